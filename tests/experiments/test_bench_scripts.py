"""The decode and training benchmarks run end to end at toy sizes and print their goals and bounds
(smoke: no timing is asserted)."""
from __future__ import annotations

from ddesys.experiments import bench_clock, bench_decode, bench_nn
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
