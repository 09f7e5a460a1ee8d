"""ddesys.step.decode_step, the fused CPU decode step, against an independent float64 oracle.

The oracle is a plain loop over time and channels on a full history array (no ring buffer, no fast path):

    h_t = lam h_{t-1} + m1 h_{t-k} + m2 h_{t-k-1} + bbar x_t   (h_{s<0} = 0),   y_t = 2 Re(c . h_t) + d x_t

Tolerances come from a rounding analysis (stated at ``_scale``) and were checked against measurement.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

step = pytest.importorskip("ddesys.step")
if not step.step_available():
    pytest.skip("the fused step needs Numba", allow_module_level=True)

decode_step = step.decode_step
U32, U64 = 2.0 ** -24, 2.0 ** -53


# ---------------------------------------------------------------------------------------------- oracle
def oracle(lam, m1, m2, bbar, c, d, k, x):
    """Float64 recurrence. ``x`` ``(B, L, H)``; returns ``y`` ``(B, L, H)`` and ``h`` ``(B, L, H, N2)``."""
    lam, m1, m2, bbar, c = (np.asarray(a, np.complex128) for a in (lam, m1, m2, bbar, c))
    d = np.asarray(d, np.float64)
    x = np.asarray(x, np.float64)
    B, L, H = x.shape
    N2 = lam.shape[1]
    h = np.zeros((B, L, H, N2), np.complex128)
    y = np.zeros((B, L, H))
    for t in range(L):
        for ch in range(H):
            kk = int(k[ch])
            v = bbar[ch] * x[:, t, ch, None]
            if t >= 1:
                v = v + lam[ch] * h[:, t - 1, ch]
            if t - kk >= 0:
                v = v + m1[ch] * h[:, t - kk, ch]
            if t - kk - 1 >= 0:
                v = v + m2[ch] * h[:, t - kk - 1, ch]
            h[:, t, ch] = v
            y[:, t, ch] = 2 * np.real(np.sum(c[ch] * v, axis=-1)) + d[ch] * x[:, t, ch]
    return y, h


def system(H, N2, k_max, seed, cdt=np.complex64):
    """Stable DS4D-like parameters: ``lam = (1-p) abar``, ``mu = p |abar| e^{i theta}`` (so ``|lam| + |mu|
    = |abar| < 1``), delays ``1 .. k_max`` with both ends present, fractions in ``[0, 1)``."""
    rng = np.random.default_rng(seed)
    abar = np.exp(-rng.uniform(0.02, 0.5, (H, N2)) + 1j * rng.uniform(-np.pi, np.pi, (H, N2)))
    p = rng.uniform(0.05, 0.95, (H, N2))
    lam = (1 - p) * abar
    mu = p * np.abs(abar) * np.exp(1j * rng.uniform(-np.pi, np.pi, (H, N2)))
    k = rng.integers(1, k_max + 1, H).astype(np.int64)
    k[0], k[-1] = 1, k_max
    alpha = rng.uniform(0, 1, H)
    alpha[1 % H] = 0.0
    m1 = mu * (1 - alpha)[:, None]
    m2 = mu * alpha[:, None]
    bbar = rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))
    c = rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))
    d = rng.standard_normal(H)
    rdt = np.float64 if cdt == np.complex128 else np.float32
    cast = lambda a: np.ascontiguousarray(a, cdt)   # noqa: E731
    return dict(lam=cast(lam), m1=cast(m1), m2=cast(m2), bbar=cast(bbar), c=cast(c), d=d.astype(rdt), k=k)


def run_fused(P, x, R, buf_dtype, fmt16=None, fill=0, parallel=False, buf=None):
    """Step through ``x`` ``(B, L, H)`` with the fused step; returns ``y`` ``(B, L, H)`` and the buffer."""
    B, L, H = x.shape
    N2 = P["lam"].shape[1]
    rdt = np.float64 if buf_dtype == np.complex128 else np.float32
    if buf is None:
        shape = (B, R, H, N2, 2) if fmt16 else (B, R, H, N2)
        buf = np.full(shape, fill, buf_dtype)
    xs = np.ascontiguousarray(x, rdt)
    y = np.zeros((B, L, H))
    y_t = np.zeros((B, H), rdt)
    for t in range(L):
        out = decode_step(buf, xs[:, t], P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], t, y_t,
                          fmt16=fmt16, parallel=parallel)
        assert out is y_t
        y[:, t] = y_t
    return y, buf


def _scale(P, h_ref):
    """Per-channel error scale ``S = sum_n 2 |c_n| max_t |h_n,t| / (1 - rho_n)``, ``rho = |lam|+|m1|+|m2|``.

    Rounding analysis: an error ``e`` injected into a state each step (relative ``eps`` of its size) obeys
    ``e_t = lam e_{t-1} + m1 e_{t-k} + m2 e_{t-k-1} + delta_t``; since ``|lam|+|m1|+|m2| = rho < 1``,
    ``max|e| <= max|delta| / (1 - rho)``, and the readout multiplies by ``2 |c|``: ``|dy| <= eps S``. The
    update's own float arithmetic makes ``eps`` a small multiple of the unit roundoff (four complex
    products and four sums: ``eps <= ~12 u``), and a 16-bit history adds its storage rounding."""
    rho = np.abs(P["lam"]).astype(np.float64) + np.abs(P["m1"]) + np.abs(P["m2"])
    hmax = np.abs(h_ref).max(axis=(0, 1))                 # (H, N2)
    return 2 * np.sum(np.abs(P["c"]) * hmax / (1 - rho), axis=-1)   # (H,)


# ---------------------------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("cdt", [np.complex64, np.complex128])
@pytest.mark.parametrize("parallel", [False, True])
def test_matches_float64_oracle(cdt, parallel):
    """Random fractional delays (k = 1 and k = R - 1 present, one alpha = 0), batch 3, a sequence of 3R + 5
    tokens (the ring wraps three times; every position before, at and after each delay), modes count odd."""
    H, N2, k_max, B = 12, 5, 9, 3
    R = k_max + 1
    P = system(H, N2, k_max, seed=1, cdt=cdt)
    x = np.random.default_rng(2).standard_normal((B, 3 * R + 5, H))
    rdt = np.float64 if cdt == np.complex128 else np.float32
    x = x.astype(rdt).astype(np.float64)                     # the oracle sees the inputs the step sees
    y_ref, h_ref = oracle(P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], x)
    y, buf = run_fused(P, x, R, cdt, parallel=parallel)
    u = U64 if cdt == np.complex128 else U32
    err = np.abs(y - y_ref).max(axis=(0, 1))                  # (H,)
    bound = 12 * u * _scale(P, h_ref) + 4 * u * np.abs(P["d"]) * np.abs(x).max()
    assert np.all(err <= bound), (err / bound).max()
    # the ring buffer holds the last R states in their slots
    L = x.shape[1]
    rho = np.abs(P["lam"]).astype(np.float64) + np.abs(P["m1"]) + np.abs(P["m2"])
    h_tol = 12 * u * np.abs(h_ref).max(axis=(0, 1)) / (1 - rho)        # (H, N2), same analysis per state
    for s in range(L - R, L):
        assert np.all(np.abs(buf[:, s % R] - h_ref[:, s]) <= h_tol)


@pytest.mark.parametrize("cdt", [np.complex64, np.complex128])
def test_reads_before_the_start_are_zero_whatever_the_slot_holds(cdt):
    """A buffer full of NaN: every read of a position < 0 must be skipped, not multiplied by zero."""
    H, N2, k_max, B = 7, 4, 6, 2
    R = k_max + 1
    P = system(H, N2, k_max, seed=3, cdt=cdt)
    x = np.random.default_rng(4).standard_normal((B, 2 * R, H)).astype(np.float32).astype(np.float64)
    y_ref, _ = oracle(P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], x)
    y, _ = run_fused(P, x, R, cdt, fill=np.nan)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-4 * np.abs(y_ref).max())


def test_serial_and_parallel_agree():
    """Same formula, separately compiled loops (LLVM may vectorize or contract them differently): equal to
    float32 rounding."""
    H, N2, k_max, B = 70, 8, 5, 3                     # channels not a multiple of the parallel block
    P = system(H, N2, k_max, seed=5)
    x = np.random.default_rng(6).standard_normal((B, 20, H))
    y1, b1 = run_fused(P, x, k_max + 1, np.complex64, parallel=False)
    y2, b2 = run_fused(P, x, k_max + 1, np.complex64, parallel=True)
    np.testing.assert_allclose(y2, y1, rtol=0, atol=1e-5 * np.abs(y1).max())
    np.testing.assert_allclose(b2, b1, rtol=0, atol=1e-5 * np.abs(b1).max())


def test_timed_choice_matches_serial(monkeypatch):
    """``parallel="auto"`` (opt-in) above PARALLEL_MIN_WORK times both variants on real steps: same results
    to rounding."""
    monkeypatch.setattr(step, "PARALLEL_MIN_WORK", 1)
    monkeypatch.setattr(step, "_AUTO", step._Auto())
    H, N2, k_max, B = 9, 4, 3, 2
    P = system(H, N2, k_max, seed=7)
    x = np.random.default_rng(8).standard_normal((B, 30, H))
    y1, _ = run_fused(P, x, k_max + 1, np.complex64, parallel=False)
    y2, _ = run_fused(P, x, k_max + 1, np.complex64, parallel="auto")
    np.testing.assert_allclose(y2, y1, rtol=0, atol=1e-5 * np.abs(y1).max())
    assert step._AUTO.state or step.thread_budget() == 1        # both variants were timed


def test_default_is_a_fixed_rule_not_a_timing(monkeypatch):
    """``parallel=None`` never times (regression: it timed serial against parallel and kept the faster,
    so outputs depended on the machine's load); below PARALLEL_MIN_WORK it equals the serial loop bitwise,
    above it the parallel loop bitwise; anything else for ``parallel`` is refused."""
    monkeypatch.setattr(step, "_AUTO", step._Auto())
    monkeypatch.setenv("DDESYS_NUM_THREADS", "2")                   # a budget the old timing would use
    H, N2, k_max, B = 9, 4, 3, 2
    P = system(H, N2, k_max, seed=7)
    x = np.random.default_rng(8).standard_normal((B, 30, H))
    ys = {p: run_fused(P, x, k_max + 1, np.complex64, parallel=p)[0] for p in (False, True)}
    assert np.array_equal(run_fused(P, x, k_max + 1, np.complex64, parallel=None)[0], ys[False])
    monkeypatch.setattr(step, "PARALLEL_MIN_WORK", 1)
    assert np.array_equal(run_fused(P, x, k_max + 1, np.complex64, parallel=None)[0], ys[True])
    assert not step._AUTO.state
    with pytest.raises(ValueError, match="parallel must be"):
        run_fused(P, x, k_max + 1, np.complex64, parallel="fast")


def test_parallel_loop_is_bitwise_equal_across_thread_counts():
    """The parallel loop's fixed partition: the same bits at one and two threads (the default above
    PARALLEL_MIN_WORK), complex and 16-bit rings."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    H, N2, k_max, B = 70, 8, 5, 3
    P = system(H, N2, k_max, seed=5)
    x = np.random.default_rng(6).standard_normal((B, 20, H))
    try:
        out = {}
        for n in (1, 2):
            torch.set_num_threads(n)
            out[n] = [run_fused(P, x, k_max + 1, np.complex64, parallel=True),
                      run_fused(P, x, k_max + 1, np.uint16, fmt16="float16", parallel=True)]
    finally:
        torch.set_num_threads(before)
    for (y1, b1), (y2, b2) in zip(out[1], out[2]):
        assert np.array_equal(y1, y2) and np.array_equal(b1, b2)


def test_continues_a_prefilled_buffer():
    """Steps from position t0 > 0 on a buffer holding the oracle's last R states (what prefill leaves)."""
    H, N2, k_max, B = 6, 3, 7, 2
    R = k_max + 1
    P = system(H, N2, k_max, seed=9, cdt=np.complex128)
    x = np.random.default_rng(10).standard_normal((B, 40, H))
    y_ref, h_ref = oracle(P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], x)
    t0 = 23
    buf = np.zeros((B, R, H, N2), np.complex128)
    for s in range(t0 - R, t0):
        buf[:, s % R] = h_ref[:, s]
    y_t = np.zeros((B, H))
    for t in range(t0, 40):
        decode_step(buf, x[:, t], P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], t, y_t)
        np.testing.assert_allclose(y_t, y_ref[:, t], rtol=1e-12, atol=1e-12 * np.abs(y_ref).max())


def test_numpy_integer_position_and_strided_input():
    H, N2, k_max, B = 5, 3, 2, 2
    P = system(H, N2, k_max, seed=11)
    buf = np.zeros((B, k_max + 1, H, N2), np.complex64)
    x_all = np.random.default_rng(12).standard_normal((B, 4, H)).astype(np.float32)
    y_t = np.zeros((B, H), np.float32)
    y_ref, _ = oracle(P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], x_all)

    class Position(int):
        pass

    for t, pos in enumerate((np.int64(0), np.uint8(1), Position(2), 3)):
        decode_step(buf, x_all[:, t], P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], pos, y_t)
        np.testing.assert_allclose(y_t, y_ref[:, t], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- 16-bit history
def _torch_bf16_bits(f):
    torch = pytest.importorskip("torch")
    return torch.from_numpy(np.ascontiguousarray(f, np.float32)).to(torch.bfloat16).view(torch.int16).numpy() \
        .view(np.uint16)


def test_16bit_encoding_rounds_to_nearest_even():
    """The kernel's stores against independent references: NumPy's float16 cast, torch's bfloat16 cast;
    ties, subnormals, overflow, infinities, NaN."""
    rng = np.random.default_rng(13)
    f = (rng.standard_normal(20000) * np.exp(rng.uniform(-30, 15, 20000))).astype(np.float32)
    ties = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 65504, 65520, 65519.996,
                     2 ** -24, 2 ** -25, 3 * 2 ** -26, 1e-8, np.inf, -np.inf, -0.0, 3.4e38], np.float32)
    f = np.concatenate([f, ties, -ties]).astype(np.float32)             # an even count
    z = np.empty(f.size // 2, np.complex64)
    z.real, z.imag = f[0::2], f[1::2]                    # no arithmetic: no NaN made from inf
    with np.errstate(over="ignore"):
        want16 = np.stack([z.real, z.imag], -1).astype(np.float16).view(np.uint16)
    assert np.array_equal(step.encode16(z, "float16"), want16)
    assert np.array_equal(step.encode16(z, "bfloat16"), _torch_bf16_bits(np.stack([z.real, z.imag], -1)))
    nan = step.encode16(np.array([np.nan + 1j * np.nan], np.complex64), "bfloat16")
    assert np.all(np.isnan(step.decode16(nan, "bfloat16").view(np.float32)))
    for fmt in step.FMT16:                               # every finite 16-bit value decodes exactly
        bits = np.arange(2 ** 16, dtype=np.uint16).reshape(-1, 2)
        dec = step.decode16(bits, fmt)
        again = step.encode16(dec, fmt)
        finite = np.isfinite(dec.real) & np.isfinite(dec.imag)
        assert np.array_equal(again[finite], bits[finite])


@pytest.mark.parametrize("fmt16", ["float16", "bfloat16"])
def test_16bit_step_stores_rounded_states(fmt16):
    """With no feedback (lam = m1 = m2 = 0, bbar = 1 + 2i) the stored state is encode16(bbar x) exactly."""
    H, N2, B, R = 4, 3, 2, 3
    z = np.zeros((H, N2), np.complex64)
    bb = np.full((H, N2), 1 + 2j, np.complex64)
    buf = np.zeros((B, R, H, N2, 2), np.uint16)
    x = np.random.default_rng(14).standard_normal((B, H)).astype(np.float32) * 1000
    y = np.zeros((B, H), np.float32)
    decode_step(buf, x, z, z, z, bb, bb, np.zeros(H, np.float32), np.ones(H, np.int64), 0, y, fmt16=fmt16)
    want = step.encode16((bb[None] * x[..., None]).astype(np.complex64), fmt16)
    assert np.array_equal(buf[:, 0], want)


@pytest.mark.parametrize("fmt16", ["float16", "bfloat16"])
def test_16bit_history_error_within_bound(fmt16):
    """Error of the 16-bit history against the float64 oracle: below history_error_bound (first order in
    the storage rounding u) plus the float32 update's own; and it is the storage rounding that dominates:
    well above the complex64 cache's error. Measured numbers are printed (pytest -s)."""
    H, N2, k_max, B = 16, 8, 11, 2
    R = k_max + 1
    P = system(H, N2, k_max, seed=15)
    x = np.random.default_rng(16).standard_normal((B, 4 * R, H)).astype(np.float32).astype(np.float64)
    y_ref, h_ref = oracle(P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], x)
    y16, buf = run_fused(P, x, R, np.uint16, fmt16=fmt16)
    y32, _ = run_fused(P, x, R, np.complex64)
    e16 = np.abs(y16 - y_ref).max(axis=(0, 1))
    e32 = np.abs(y32 - y_ref).max(axis=(0, 1))
    hmax = np.abs(h_ref).max(axis=(0, 1))
    bound = step.history_error_bound(P["lam"], P["m1"], P["m2"], P["c"], hmax, fmt16)
    u = step._U16_ROUND[fmt16][0]
    # first order in u: the bound's states are the exact ones; allow the second-order term (1 + u / (1 - rho))
    rho = np.abs(P["lam"]).astype(np.float64) + np.abs(P["m1"]) + np.abs(P["m2"])
    second = 1 + u / (1 - rho).min()
    total = bound * second + 12 * U32 * _scale(P, h_ref) + 4 * U32 * np.abs(P["d"]) * np.abs(x).max()
    assert np.all(e16 <= total), (e16 / total).max()
    assert np.all(e16 >= e32)
    assert e16.max() > 10 * e32.max()
    scale = np.abs(y_ref).max()
    print(f"\n{fmt16}: max |dy| / max |y| = {e16.max() / scale:.2e} (bound {total.max() / scale:.2e}); "
          f"complex64 cache {e32.max() / scale:.2e}")


def test_16bit_nan_buffer_and_float16_array_refused():
    H, N2, k_max, B = 5, 4, 4, 2
    R = k_max + 1
    P = system(H, N2, k_max, seed=17)
    x = np.random.default_rng(18).standard_normal((B, 2 * R, H)).astype(np.float32).astype(np.float64)
    y_ref, _ = oracle(P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], x)
    y, _ = run_fused(P, x, R, np.uint16, fmt16="bfloat16", fill=0x7FC0)      # bfloat16 NaN everywhere
    np.testing.assert_allclose(y, y_ref, rtol=0, atol=0.05 * np.abs(y_ref).max())
    buf16 = np.zeros((B, R, H, N2, 2), np.float16)
    y_t = np.zeros((B, H), np.float32)
    with pytest.raises(TypeError, match=r"view\(np.uint16\)"):
        decode_step(buf16, x[:, 0].astype(np.float32), P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"],
                    P["k"], 0, y_t, fmt16="float16")
    decode_step(buf16.view(np.uint16), x[:, 0].astype(np.float32), P["lam"], P["m1"], P["m2"], P["bbar"],
                P["c"], P["d"], P["k"], 0, y_t, fmt16="float16")


# ---------------------------------------------------------------------------------------------- hostile input
def _args(B=2, R=4, H=3, N2=2):
    P = system(H, N2, R - 1, seed=19)
    return dict(buf=np.zeros((B, R, H, N2), np.complex64), x_t=np.ones((B, H), np.float32), lam=P["lam"],
                m1=P["m1"], m2=P["m2"], bbar=P["bbar"], c=P["c"], d=P["d"], k=P["k"], t=5,
                y_out=np.zeros((B, H), np.float32))


def _read_only(a):
    a.flags.writeable = False
    return a


def _bad(**over):
    a = _args()
    fmt16 = over.pop("fmt16", None)
    a.update(over)
    return a, fmt16


HOSTILE = [
    ("k >= R", dict(k=np.array([1, 4, 2])), ValueError, r"k\[1\] = 4"),
    ("k = 0", dict(k=np.array([1, 0, 2])), ValueError, r"\[1, 3\].*k\[1\] = 0"),
    ("k < 0", dict(k=np.array([-5, 1, 2])), ValueError, r"k\[0\] = -5"),
    ("k int32", dict(k=np.array([1, 2, 3], np.int32)), ValueError, "k must be int64"),
    ("k too short", dict(k=np.array([1, 2])), ValueError, r"k must be int64 \(3,\)"),
    ("lam shape", dict(lam=np.zeros((3, 3), np.complex64)), ValueError, r"lam must be complex64 \(3, 2\)"),
    ("lam complex128", dict(lam=np.zeros((3, 2), np.complex128)), ValueError, "lam must be complex64"),
    ("c real", dict(c=np.zeros((3, 2), np.float32)), ValueError, "c must be complex64"),
    ("x batch", dict(x_t=np.ones((3, 3), np.float32)), ValueError, r"x_t must be float32 \(2, 3\)"),
    ("x float64", dict(x_t=np.ones((2, 3))), ValueError, "x_t must be float32"),
    ("y shape", dict(y_out=np.zeros((2, 4), np.float32)), ValueError, r"y_out must be float32 \(2, 3\)"),
    ("y strided", dict(y_out=np.zeros((2, 6), np.float32)[:, ::2]), ValueError, "y_out must be C-contiguous"),
    ("d shape", dict(d=np.zeros(2, np.float32)), ValueError, r"d must be float32 \(3,\)"),
    ("buf strided", dict(buf=np.zeros((2, 8, 3, 2), np.complex64)[:, ::2]), ValueError, "buf must be C-contig"),
    ("buf transposed", dict(buf=np.zeros((2, 3, 4, 2), np.complex64).transpose(0, 2, 1, 3)), ValueError,
     "C-contiguous"),
    ("buf read-only", dict(buf=np.broadcast_to(np.zeros((1, 4, 3, 2), np.complex64), (2, 4, 3, 2))), ValueError,
     "C-contiguous|read-only"),
    ("buf read-only contiguous", dict(buf=_read_only(np.zeros((2, 4, 3, 2), np.complex64))), ValueError,
     "buf is read-only"),
    ("y read-only", dict(y_out=_read_only(np.zeros((2, 3), np.float32))), ValueError, "y_out must be a writeable"),
    ("buf float32", dict(buf=np.zeros((2, 4, 3, 2), np.float32)), TypeError, "complex64, complex128 or uint16"),
    ("buf rank", dict(buf=np.zeros((2, 4, 6), np.complex64)), ValueError, r"\(B, R, H, N2\)"),
    ("R = 1", dict(buf=np.zeros((2, 1, 3, 2), np.complex64), k=np.ones(3, np.int64)), ValueError, "R >= 2"),
    ("lam strided", dict(lam=np.zeros((3, 4), np.complex64)[:, ::2]), ValueError, "lam must be C-contiguous"),
    ("t negative", dict(t=-1), ValueError, "t must be a position"),
    ("t float", dict(t=2.0), TypeError, "t must be an integer"),
    ("t bool", dict(t=True), TypeError, "t must be an integer"),
    ("t huge", dict(t=2 ** 70), ValueError, "t must be a position"),
    ("list", dict(d=[0.0, 0.0, 0.0]), TypeError, "d must be a numpy array"),
    ("fmt16 on complex", dict(fmt16="float16"), ValueError, "fmt16='float16' is for a uint16"),
    ("uint16 without fmt16", dict(buf=np.zeros((2, 4, 3, 2, 2), np.uint16)), ValueError, "needs fmt16"),
    ("bad fmt16", dict(buf=np.zeros((2, 4, 3, 2, 2), np.uint16), fmt16="fp8"), ValueError, "needs fmt16"),
    ("uint16 wrong tail", dict(buf=np.zeros((2, 4, 3, 2, 3), np.uint16), fmt16="float16"), ValueError,
     r"\(B, R, H, N2, 2\)"),
]


@pytest.mark.parametrize("name,over,exc,msg", HOSTILE, ids=[h[0] for h in HOSTILE])
@pytest.mark.parametrize("parallel", [False, True])
def test_hostile_inputs_refused_and_nothing_written(name, over, exc, msg, parallel):
    a, fmt16 = _bad(**over)
    buf, y = a["buf"], a["y_out"]
    buf_before = np.array(buf, copy=True) if isinstance(buf, np.ndarray) else None
    y_before = np.array(y, copy=True)
    with pytest.raises(exc, match=msg):
        decode_step(a["buf"], a["x_t"], a["lam"], a["m1"], a["m2"], a["bbar"], a["c"], a["d"], a["k"], a["t"],
                    a["y_out"], fmt16=fmt16, parallel=parallel)
    if buf_before is not None:
        assert np.array_equal(np.asarray(buf), buf_before, equal_nan=True)
    assert np.array_equal(y, y_before)


def test_torch_tensor_refused_with_a_hint():
    torch = pytest.importorskip("torch")
    a = _args()
    with pytest.raises(TypeError, match=r"\.numpy\(\)"):
        decode_step(torch.from_numpy(a["buf"]), a["x_t"], a["lam"], a["m1"], a["m2"], a["bbar"], a["c"], a["d"],
                    a["k"], 0, a["y_out"])


def test_check_step_args_accepts_valid_arguments():
    a = _args()
    assert step.check_step_args(*a.values()) is None


# ---------------------------------------------------------------------------------------------- allocation
def _peak_bytes(fn, calls):
    """Largest tracemalloc peak above the current traced memory over ``calls`` calls of ``fn(i)``: every
    Python object and every NumPy data block allocated during a call counts, freed or not."""
    worst = 0
    for i in range(calls):
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn(i)
        worst = max(worst, tracemalloc.get_traced_memory()[1] - before)
    return worst


@pytest.mark.parametrize("kind", ["complex64", "complex128", "float16"])
def test_no_per_token_allocation(kind):
    """Deterministic count, no timing. Over 40 tokens each, the largest number of bytes allocated during
    one call (tracemalloc peak: every Python object and NumPy data block, freed or not) for the bare
    compiled kernel, ``parallel=False``, ``None`` and ``True``: no NumPy data block at all, and a few
    hundred bytes of Python objects (argument tuples, the thread-budget context), far below the smallest
    array the step could make here ((B, H) float32, 16 KiB); y_out is written in place and returned.
    (Structural bounds, not byte counts: those change with the interpreter.)"""
    B, H, N2, k_max = 16, 256, 4, 5
    assert B * H * N2 < step.PARALLEL_MIN_WORK
    cdt = np.complex128 if kind == "complex128" else np.complex64
    rdt = np.float64 if kind == "complex128" else np.float32
    P = system(H, N2, k_max, seed=20, cdt=cdt)
    fmt16 = "float16" if kind == "float16" else None
    shape = (B, k_max + 1, H, N2, 2) if fmt16 else (B, k_max + 1, H, N2)
    buf = np.zeros(shape, np.uint16 if fmt16 else cdt)
    x = np.ones((B, H), rdt)
    y = np.zeros((B, H), rdt)
    lam, m1, m2, bb, c, d, k = P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"]
    kern = step._kernel(2 if fmt16 else 0)
    fmt = 0
    ts = list(range(1000, 1100))                           # the positions exist before measuring
    out = {name: [None] * 40 for name in ("serial", "auto", "threads")}    # filled in place: no growth

    def serial(i):                                         # plain positional calls: no tuple of their own
        out["serial"][i] = decode_step(buf, x, lam, m1, m2, bb, c, d, k, ts[i], y, fmt16, False)

    def auto(i):
        out["auto"][i] = decode_step(buf, x, lam, m1, m2, bb, c, d, k, ts[i], y, fmt16, None)

    def threads(i):
        out["threads"][i] = decode_step(buf, x, lam, m1, m2, bb, c, d, k, ts[i], y, fmt16, True)

    def bare(i):
        kern(buf, buf, fmt, ts[i], x, lam, m1, m2, bb, c, d, k, y)

    for f in (serial, auto, threads, bare):
        f(0)
        f(1)
    tracemalloc.start()
    try:
        b = _peak_bytes(bare, 40)
        w_serial = _peak_bytes(serial, 40)
        w_auto = _peak_bytes(auto, 40)
        w_threads = _peak_bytes(threads, 40)
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    finally:
        tracemalloc.stop()
    # structural, not byte-exact: no NumPy data block at all, and every call's Python-side allocation
    # far below the smallest array the step could make here ((B, H) float32, 16 KiB)
    assert len(snap.traces) == 0
    assert max(b, w_serial, w_auto, w_threads) < 4096, (b, w_serial, w_auto, w_threads)
    assert all(o is y for v in out.values() for o in v)
    y[:] = 0
    decode_step(buf, x, lam, m1, m2, bb, c, d, k, 1200, y, fmt16)
    assert np.any(y != 0)


# ---------------------------------------------------------------------------------------------- the nn layer
def test_layer_wiring_matches_ds4d_reference_step(monkeypatch):
    """The call nn.DS4D.step's fused engine makes (constants from ``_step_constants`` as NumPy views, the
    cache's buffer viewed, ``y`` in ``rdt``), here outside the layer, equals the layer's torch reference
    engine token by token in float32, before and after the longest delay; and the layer's
    own default step (which calls the fused step) matches too."""
    torch = pytest.importorskip("torch")
    from ddesys import nn as dnn
    torch.manual_seed(0)
    H, N, B = 16, 8, 2
    layer = dnn.DS4D(H, N, l_max=48)
    cache, cache_layer = (layer.allocate_inference_cache(B) for _ in range(2))
    cache_ref = layer.allocate_inference_cache(B, engine="reference")
    assert (cache_layer.engine, cache_ref.engine) == ("fused", "reference")
    rdt = torch.float32
    with torch.no_grad():
        k_ = layer._step_constants(rdt)
        consts = tuple(z.detach().resolve_conj().contiguous().numpy() for z in (k_.lam, k_.m1, k_.m2, k_.bbar, k_.c)) + (
            layer.D.detach().to(rdt).contiguous().numpy(), k_.k.contiguous().numpy())
    buf_np = cache.buf.numpy()                                  # once per cache
    R = cache.n_slots
    xs = torch.randn(2 * R + 3, B, H)
    for t in range(xs.shape[0]):
        x_t = xs[t]
        y_ref = layer.step(x_t, cache_ref)
        y_layer = layer.step(x_t, cache_layer)
        xt = x_t.detach().to(rdt)
        y = torch.empty(x_t.shape, dtype=rdt)
        decode_step(buf_np, xt.numpy(), *consts, cache.t, y.numpy())
        cache.t += 1
        torch.testing.assert_close(y.to(x_t.dtype), y_ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(y_layer, y, rtol=0, atol=0)
    torch.testing.assert_close(cache.buf, cache_ref.buf, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("torch_threads", [1, 2])
def test_parallel_step_keeps_the_thread_budget(torch_threads):
    """A parallel step runs inside ddesys.threads.numba_threads: torch's and Numba's thread counts are
    what they were, whatever the setting (with a budget of one thread the parallel loop runs on one)."""
    torch = pytest.importorskip("torch")
    import numba
    before = torch.get_num_threads()
    nb_before = numba.get_num_threads()
    try:
        torch.set_num_threads(torch_threads)
        H, N2, k_max, B = 40, 4, 3, 2
        P = system(H, N2, k_max, seed=21)
        x = np.random.default_rng(22).standard_normal((B, 8, H))
        y_par, _ = run_fused(P, x, k_max + 1, np.complex64, parallel=True)
        assert torch.get_num_threads() == torch_threads
        assert numba.get_num_threads() == nb_before
        y_ser, _ = run_fused(P, x, k_max + 1, np.complex64, parallel=False)
        np.testing.assert_allclose(y_par, y_ser, rtol=0, atol=1e-5 * np.abs(y_ser).max())
    finally:
        torch.set_num_threads(before)
