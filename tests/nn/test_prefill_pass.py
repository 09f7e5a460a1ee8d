"""ddesys.cpu.prefill.run_ring (a prompt through the decode ring in one compiled pass) and the layers'
prefill on top of it, against an independent float64 oracle: a plain loop over a full history array
(no ring, no project code), and the ring stepping leaves (the slot of position ``s`` is ``s mod R``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

prefill = pytest.importorskip("ddesys.cpu.prefill")
if not prefill.prefill_available():
    pytest.skip("the compiled prefill needs Numba", allow_module_level=True)

from ddesys import nn as dnn  # noqa: E402
from ddesys.nn.decode.engine import FusedEngine, ReferenceEngine  # noqa: E402

from nn_helpers import live_states  # noqa: E402
from test_fused_step import oracle as step_oracle  # noqa: E402

run_ring = prefill.run_ring


def oracle(lam, m1, m2, bbar, c, d, k, x):
    """``x`` ``(B, H, L)`` -> ``y`` ``(B, H, L)``, ``h`` ``(B, H, L, N2)`` complex128, ``h_{s<0} = 0``: the
    fused step's float64 loop oracle (a full history array, no ring), in this module's layout."""
    y, h = step_oracle(lam, m1, m2, bbar, c, d, k, np.moveaxis(x, 1, 2))        # (B, L, H), (B, L, H, N2)
    return np.moveaxis(y, 1, 2), np.moveaxis(h, 1, 2)


def _system(H=5, N2=3, R=9, seed=0, cdt=np.complex128):
    rng = np.random.default_rng(seed)
    cx = lambda s: (rng.uniform(-0.3, 0.3, s) + 1j * rng.uniform(-0.3, 0.3, s)).astype(cdt)  # noqa: E731
    lam, m1, m2, bbar, c = (cx((H, N2)) for _ in range(5))
    rdt = np.float64 if cdt == np.complex128 else np.float32
    d = rng.standard_normal(H).astype(rdt)
    k = rng.integers(1, R, H).astype(np.int64)
    k[0] = R - 1                                   # the ring's longest delay: t-k-1 reads the slot written
    return lam, m1, m2, bbar, c, d, k


@pytest.mark.parametrize("layout", ["channel-major", "slot-major"])
@pytest.mark.parametrize("cuts", [(0, 40), (0, 3, 4, 17, 40), (0, 12, 40)])
def test_run_ring_matches_the_oracle_in_chunks(cuts, layout):
    """Chunks before, at and after the ring wraps (R = 9, 40 tokens); outputs and the ring, in the decode
    step's layout (ddesys.cpu.step.new_ring) and in a plain C-contiguous array."""
    from ddesys.cpu.step import new_ring
    B, R = 2, 9
    sysd = _system(R=R)
    x = np.random.default_rng(1).standard_normal((B, 5, 40))
    y_ref, h_ref = oracle(*sysd, x)
    ring = new_ring((B, R, 5, 3), np.complex128) if layout == "channel-major" else np.zeros((B, R, 5, 3), np.complex128)
    y = np.concatenate([run_ring(ring, x[:, :, a:b], *sysd, a) for a, b in zip(cuts, cuts[1:])], -1)
    assert np.abs(y - y_ref).max() <= 1e-13 * np.abs(y_ref).max()
    _assert_window(ring, h_ref, sysd[-1], 40, 1e-13)


def test_run_ring_more_batch_rows_than_an_item():
    """B = 11 rows: items of up to 8 rows (ddesys.cpu.prefill._RB) and a partial one."""
    from ddesys.cpu.step import new_ring
    B, R = 11, 9
    sysd = _system(R=R, seed=5)
    x = np.random.default_rng(6).standard_normal((B, 5, 40))
    y_ref, h_ref = oracle(*sysd, x)
    ring = new_ring((B, R, 5, 3), np.complex128)
    y = np.concatenate([run_ring(ring, x[:, :, :5], *sysd, 0), run_ring(ring, x[:, :, 5:], *sysd, 5)], -1)
    assert np.abs(y - y_ref).max() <= 1e-13 * np.abs(y_ref).max()
    _assert_window(ring, h_ref, sysd[-1], 40, 1e-13)


def _assert_window(ring, h_ref, k, L, tol, decode=lambda r: r):
    """Each channel's last ``k + 1`` positions (what later steps read) at their slots ``s mod R``: the
    contract of run_ring (older slots are unspecified)."""
    R = ring.shape[1]
    got = decode(ring)
    scale = np.abs(h_ref).max()
    for h, kh in enumerate(k):
        for s in range(max(0, L - int(kh) - 1), L):
            assert np.abs(got[:, s % R, h] - h_ref[:, h, s]).max() <= tol * scale, (h, s)


def test_run_ring_complex64_and_16bit():
    B, R, L = 2, 9, 60
    sysd = _system(R=R, cdt=np.complex64)
    x = np.random.default_rng(2).standard_normal((B, 5, L)).astype(np.float32)
    y_ref, h_ref = oracle(*(a.astype(np.complex128) if np.iscomplexobj(a) else a for a in sysd), x)
    y = run_ring(np.zeros((B, R, 5, 3), np.complex64), x, *sysd, 0)
    assert y.dtype == np.float32
    assert np.abs(y - y_ref).max() <= 1e-5 * np.abs(y_ref).max()
    for fmt, tol in (("float16", 2e-3), ("bfloat16", 1e-2)):
        ring = np.zeros((B, R, 5, 3, 2), np.uint16)
        y16 = np.concatenate([run_ring(ring, x[:, :, :25], *sysd, 0, fmt16=fmt),
                              run_ring(ring, x[:, :, 25:], *sysd, 25, fmt16=fmt)], -1)
        assert np.abs(y16 - y_ref).max() <= tol * np.abs(y_ref).max(), fmt
        _assert_window(ring, h_ref, sysd[-1], L, tol, decode=lambda r: prefill_ring16(r, fmt))


def prefill_ring16(ring, fmt):
    from ddesys.cpu.step import decode16
    return decode16(ring, fmt)


def test_no_delay_is_the_plain_diagonal_recurrence():
    """k = NO_DELAY with a ring of one slot (S4D's state): h_t = lam h_{t-1} + bbar x_t."""
    lam, m1, m2, bbar, c, d, _ = _system()
    k = np.full(5, prefill.NO_DELAY, np.int64)
    x = np.random.default_rng(3).standard_normal((2, 5, 30))
    y_ref, h_ref = oracle(lam, 0 * m1, 0 * m2, bbar, c, d, np.full(5, 10 ** 6), x)
    ring = np.zeros((2, 1, 5, 3), np.complex128)
    y = np.concatenate([run_ring(ring, x[:, :, :11], lam, m1, m2, bbar, c, d, k, 0),
                        run_ring(ring, x[:, :, 11:], lam, m1, m2, bbar, c, d, k, 11)], -1)
    assert np.abs(y - y_ref).max() <= 1e-13 * np.abs(y_ref).max()
    assert np.abs(ring[:, 0] - h_ref[:, :, -1]).max() <= 1e-13 * np.abs(h_ref).max()


def test_run_ring_is_bitwise_equal_across_thread_counts():
    sysd = _system(H=37, N2=4, R=50, cdt=np.complex64)
    x = np.random.default_rng(4).standard_normal((3, 37, 200)).astype(np.float32)
    before = torch.get_num_threads()
    out = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)               # the thread budget follows torch's
            ring = np.zeros((3, 50, 37, 4), np.complex64)
            out.append((run_ring(ring, x, *sysd, 0), ring))
    finally:
        torch.set_num_threads(before)
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])


def test_run_ring_refuses_bad_arguments_untouched():
    sysd = _system()
    ring = np.zeros((2, 9, 5, 3), np.complex128)
    x = np.ones((2, 5, 4))
    lam, m1, m2, bbar, c, d, k = sysd
    with pytest.raises(ValueError, match="delay"):
        run_ring(ring, x, lam, m1, m2, bbar, c, d, np.where(k == k[0], 9, k), 0)
    with pytest.raises(ValueError, match="x must be"):
        run_ring(ring, x[:, :4], *sysd, 0)
    with pytest.raises(ValueError, match="t0"):
        run_ring(ring, x, *sysd, -1)
    with pytest.raises(TypeError, match="ring"):
        run_ring(ring.real.copy(), x, *sysd, 0)
    with pytest.raises(ValueError, match="modes must be contiguous"):
        run_ring(ring[..., ::2], x, *sysd, 0)
    assert not ring.any()


# ---------------------------------------------------------------------------------------------- layers
def _step_through(layer, x, cache):
    return torch.stack([layer.step(x[:, t], cache) for t in range(x.shape[1])], 1)


@pytest.mark.parametrize("kind", ["ds4d", "s4d", "tap"])
def test_layer_prefill_is_stepping(kind):
    """The compiled prefill (a CPU cache) equals stepping through the prompt: outputs and state, float64,
    fresh and after tokens, through a ring that wraps."""
    torch.manual_seed(0)
    if kind == "ds4d":
        layer = dnn.DS4D(4, d_state=6, l_max=16, seed=0).double()
    elif kind == "tap":                                # a wide window: several offsets per channel
        layer = dnn.DS4D(4, d_state=6, l_max=16, tap=True, tap_width=3.5, seed=0).double()
        with torch.no_grad():
            layer.tap.e.copy_(torch.tensor([0.7, -0.4, 1.1, 0.3], dtype=torch.float64))
    else:
        layer = dnn.S4D(4, d_state=6, seed=0).double()
    x = torch.randn(2, 40, 4, dtype=torch.float64)
    with torch.no_grad():
        a = layer.allocate_inference_cache(2, dtype=torch.float64)
        if kind != "s4d":
            assert isinstance(a.engine, FusedEngine)
        ya = torch.cat([layer.prefill(x[:, :7], a), _step_through(layer, x[:, 7:9], a), layer.prefill(x[:, 9:], a)], 1)
        b = layer.allocate_inference_cache(2, dtype=torch.float64)
        yb = _step_through(layer, x, b)
    assert a.t == b.t == 40
    assert float((ya - yb).abs().max()) <= 1e-12 * float(yb.abs().max())
    sa, sb = live_states(a, layer), live_states(b, layer)
    assert float((sa - sb).abs().max()) <= 1e-12 * float(sb.abs().max())
    if kind == "tap":
        assert torch.equal(a.branch_states[0], b.branch_states[0])


def test_reference_engine_keeps_the_spectral_prefill(monkeypatch):
    """A cache of the reference engine (DDESYS_REFERENCE=1 at allocation) does not take the compiled pass,
    and both agree."""
    import ddesys.nn.decode.engine as engine_mod
    layer = dnn.DS4D(3, d_state=4, l_max=12, seed=1).double()
    x = torch.randn(1, 30, 3, dtype=torch.float64)
    with torch.no_grad():
        monkeypatch.setenv("DDESYS_REFERENCE", "1")
        ref = layer.allocate_inference_cache(1, dtype=torch.float64)
        monkeypatch.delenv("DDESYS_REFERENCE")
        assert isinstance(ref.engine, ReferenceEngine)
        calls = []
        monkeypatch.setattr(engine_mod, "fused_ds4d", lambda *a: calls.append(1))
        y_ref = layer.prefill(x, ref)
        assert not calls
        monkeypatch.undo()
        fused = layer.allocate_inference_cache(1, dtype=torch.float64)
        y = layer.prefill(x, fused)
    assert float((y - y_ref).abs().max()) <= 1e-11 * float(y_ref.abs().max())
    sf, sr = live_states(fused, layer), live_states(ref, layer)
    assert float((sf - sr).abs().max()) <= 1e-11 * float(sr.abs().max())
