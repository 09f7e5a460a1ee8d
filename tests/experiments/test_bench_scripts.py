"""The decode and training benchmarks run end to end at toy sizes and print their goals and bounds
(smoke: no timing is asserted)."""
from __future__ import annotations

from ddesys.experiments.bench import clock as bench_clock
from ddesys.experiments.bench import decode as bench_decode
from ddesys.experiments.bench import layers as bench_nn
from ddesys.verification import bounds


def test_bench_decode_sections_print_figures_and_bounds(capsys):
    bench_decode.step_section(8, 4, 32, 4, 1)
    bench_decode.model_section(8, 4, 32, 4, 1)
    bench_decode.prefill_speed_section(8, 4, (16,), 1)
    out = capsys.readouterr().out
    assert "memory bandwidth" in out and "bound" in out and "goals:" in out
    assert "prefill / forward" in out and "DS4D+tap" in out and "goal <= 1.3" in out


def test_bench_decode_load_section_runs_both_loads(capsys):
    bench_decode.load_section(8, 4, 32, 4, 1)
    out = capsys.readouterr().out
    assert all(f"under {what}" in out for what in bench_decode._LOADS)
    assert "serial loop" in out and "goal: DS4D slows no more than S4D" in out


def test_bench_nn_train_section_prints_shares(capsys):
    bench_nn.train_section(8, 4, (2,), [32], 1)
    out = capsys.readouterr().out
    assert "kernel synthesis" in out and "worst DS4D tokens/s" in out


def test_bench_clock_sections_print_ratios(capsys):
    res = bench_clock.decode_section((16, 32), 2, 1)
    times = bench_clock.train_section(1, batch=2)
    out = capsys.readouterr().out
    assert "late / early" in out and "x s4d" in out and set(times) == set(bench_clock.FAMILIES)
    assert all(v > 0 for r in res.values() for v in r.values())


def test_step_bytes():
    assert bounds.step_bytes("ds4d", 1, 256, 32) == (4 * 256 * 32 + 5 * 256 * 32) * 8
    assert bounds.step_bytes("s4d", 8, 2, 3) == (2 * 8 * 2 * 3 + 3 * 2 * 3) * 8
    assert bounds.memory_bandwidth(nbytes=2 ** 20, reps=2) > 0


def test_ring_layout_probe_same_update_in_both_layouts():
    """The layout probe's two loops are one update: the states of a plain NumPy loop, transposed."""
    import numpy as np
    import pytest

    from ddesys.experiments.bench import ring_layout as probe
    if not probe.numba_available():
        pytest.skip("Numba not available")
    slot_major, channel_major = probe._loops()
    rng = np.random.default_rng(1)
    B, R, H, N2 = 3, 9, 4, 2
    a = (rng.standard_normal((B, R, H, N2)) + 1j * rng.standard_normal((B, R, H, N2))).astype(np.complex64)
    c = np.ascontiguousarray(a.transpose(2, 1, 0, 3))                 # (H, R, B, N2)
    k = np.array([1, 3, 5, 7])
    lam, mu = np.full((H, N2), 0.5 + 0.1j, np.complex64), np.full((H, N2), 0.2, np.complex64)
    x = rng.standard_normal((B, H)).astype(np.float32)
    ref = a.astype(np.complex128)                                   # a plain NumPy loop, float64
    for t in range(R, 3 * R):
        slot_major(a, t, k, lam, mu, x)
        channel_major(c, t, k, lam, mu, x)
        for h in range(H):
            s1, s2 = (t - k[h]) % R, (t - k[h] - 1) % R
            ref[:, t % R, h] = lam[h] * ref[:, (t - 1) % R, h] + mu[h] * (ref[:, s1, h] + ref[:, s2, h]) \
                + x[:, h, None]
    assert np.allclose(a, ref, rtol=1e-4, atol=1e-5)
    assert np.allclose(c.transpose(2, 1, 0, 3), ref, rtol=1e-4, atol=1e-5)
    assert set(probe.time_layouts(2, 8, H=4, N2=2, n_tok=2, reps=1)) == {"slot-major", "channel-major"}


def test_bench_userpath_sections_print_the_ratios(capsys):
    from ddesys.experiments.bench import userpath
    models = {"ds4d": userpath.build("ds4d", 8, 4, 16), "s4d": userpath.build("s4d", 8, 4, 16)}
    userpath.step_section(models, 3, 1, prompt=8)
    userpath.state_section(models, 16, 1, batch=2)
    out = capsys.readouterr().out
    assert "own/plan" in out and "DS4D/S4D through the own loop" in out
    assert "forward from a state" in out and "training on 2 carried chunks" in out and "ring of" in out
    import pytest
    with pytest.raises(SystemExit):
        userpath.main(["--chunk", "0"])
