"""ddesys.cpu.step.decode_step, the fused CPU decode step, against an independent float64 oracle
(tests/step_helpers.py; hostile input and allocation: test_fused_step_inputs.py).

The oracle is a plain loop over time and channels on a full history array (no ring buffer, no fast path):

    h_t = lam h_{t-1} + m1 h_{t-k} + m2 h_{t-k-1} + bbar x_t   (h_{s<0} = 0),   y_t = 2 Re(c . h_t) + d x_t

Tolerances come from a rounding analysis (stated at ``_scale``) and were checked against measurement.
"""
from __future__ import annotations

import numpy as np
import pytest

step = pytest.importorskip("ddesys.cpu.step")
if not step.step_available():
    pytest.skip("the fused step needs Numba", allow_module_level=True)

decode_step = step.decode_step
U32, U64 = 2.0 ** -24, 2.0 ** -53

from step_helpers import _scale, oracle, run_fused, system  # noqa: E402


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
    buf = step.new_ring((B, R, H, N2), np.complex128)
    for s in range(t0 - R, t0):
        buf[:, s % R] = h_ref[:, s]
    y_t = np.zeros((B, H))
    for t in range(t0, 40):
        decode_step(buf, x[:, t], P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], t, y_t)
        np.testing.assert_allclose(y_t, y_ref[:, t], rtol=1e-12, atol=1e-12 * np.abs(y_ref).max())


def test_numpy_integer_position_and_strided_input():
    H, N2, k_max, B = 5, 3, 2, 2
    P = system(H, N2, k_max, seed=11)
    buf = step.new_ring((B, k_max + 1, H, N2), np.complex64)
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
    buf = step.new_ring((B, R, H, N2, 2), np.uint16)
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
    buf16 = step.new_ring((B, R, H, N2, 2), np.float16)
    y_t = np.zeros((B, H), np.float32)
    with pytest.raises(TypeError, match=r"view\(np.uint16\)"):
        decode_step(buf16, x[:, 0].astype(np.float32), P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"],
                    P["k"], 0, y_t, fmt16="float16")
    decode_step(buf16.view(np.uint16), x[:, 0].astype(np.float32), P["lam"], P["m1"], P["m2"], P["bbar"],
                P["c"], P["d"], P["k"], 0, y_t, fmt16="float16")


# ---------------------------------------------------------------------------------------------- the nn layer
def test_layer_wiring_matches_ds4d_reference_step(monkeypatch):
    """The call nn.DS4D.step's fused engine makes (constants from ``step_constants`` as NumPy views, the
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
    assert (cache_layer.engine.name, cache_ref.engine.name) == ("fused", "reference")
    rdt = torch.float32
    with torch.no_grad():
        k_ = layer.step_constants(rdt)
        consts = tuple(z.detach().resolve_conj().contiguous().numpy() for z in (k_.lam, k_.m1, k_.m2, k_.bbar, k_.c))
        consts += (layer.D.detach().to(rdt).contiguous().numpy(), k_.k.contiguous().numpy())
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
    """A parallel step runs inside ddesys.cpu.threads.numba_threads: torch's and Numba's thread counts are
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
