"""ddesys.cpu.step.decode_step refuses hostile input (and writes nothing), and allocates nothing per token."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

step = pytest.importorskip("ddesys.cpu.step")
if not step.step_available():
    pytest.skip("the fused step needs Numba", allow_module_level=True)

from step_helpers import system  # noqa: E402

decode_step = step.decode_step


# ---------------------------------------------------------------------------------------------- hostile input
def _args(B=2, R=4, H=3, N2=2):
    P = system(H, N2, R - 1, seed=19)
    return dict(buf=step.new_ring((B, R, H, N2), np.complex64), x_t=np.ones((B, H), np.float32), lam=P["lam"],
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
    ("buf strided", dict(buf=step.new_ring((2, 8, 3, 2), np.complex64)[:, ::2]), ValueError, "channel-major"),
    ("buf slot-major", dict(buf=np.zeros((2, 4, 3, 2), np.complex64)), ValueError, r"channel-major.*new_ring"),
    ("buf read-only", dict(buf=np.broadcast_to(np.zeros((1, 4, 3, 2), np.complex64), (2, 4, 3, 2))), ValueError,
     "channel-major|read-only"),
    ("buf read-only channel-major", dict(buf=_read_only(step.new_ring((2, 4, 3, 2), np.complex64))), ValueError,
     "buf is read-only"),
    ("y read-only", dict(y_out=_read_only(np.zeros((2, 3), np.float32))), ValueError, "y_out must be a writeable"),
    ("buf float32", dict(buf=np.zeros((2, 4, 3, 2), np.float32)), TypeError, "complex64, complex128 or uint16"),
    ("buf rank", dict(buf=np.zeros((2, 4, 6), np.complex64)), ValueError, r"\(B, R, H, N2\)"),
    ("R = 1", dict(buf=step.new_ring((2, 1, 3, 2), np.complex64), k=np.ones(3, np.int64)), ValueError, "R >= 2"),
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
    B, H, N2, k_max = 8, 256, 4, 5
    assert B * H * N2 < step.PARALLEL_MIN_WORK
    cdt = np.complex128 if kind == "complex128" else np.complex64
    rdt = np.float64 if kind == "complex128" else np.float32
    P = system(H, N2, k_max, seed=20, cdt=cdt)
    fmt16 = "float16" if kind == "float16" else None
    shape = (B, k_max + 1, H, N2, 2) if fmt16 else (B, k_max + 1, H, N2)
    buf = step.new_ring(shape, np.uint16 if fmt16 else cdt)
    x = np.ones((B, H), rdt)
    y = np.zeros((B, H), rdt)
    lam, m1, m2, bb, c, d, k = P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"]
    kern = step.step_kernel("16-bit" if fmt16 else "complex", False)   # the serial entry point, by name
    ring = step.memory_view(buf)                           # (H, R, B, N2): the loops' order
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
        kern(ring, ring, fmt, ts[i], x, lam, m1, m2, bb, c, d, k, y)

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
