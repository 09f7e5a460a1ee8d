"""The decode check's flatness test (``nn.timing.flat_in_position``) holds under a background load of twice
the core count and still fails a per-token cost that grows with the position."""
import multiprocessing as mp
import os
import time

import pytest

from ddesys.nn.timing import flat_in_position


def _spin(stop_at):
    while time.time() < stop_at:
        pass


def _work(n):
    def f():
        s = 0
        for i in range(n):
            s += i
        return s
    return f


def _loaded(seconds):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_spin, args=(time.time() + seconds,), daemon=True)
             for _ in range(2 * (os.cpu_count() or 1))]
    for p in procs:
        p.start()
    return procs


def test_flat_cost_passes_under_twice_the_core_count_of_load():
    procs = _loaded(20.0)
    try:
        time.sleep(0.5)                                       # the load is running
        for _ in range(3):
            times, ratio, flat, _ = flat_in_position([_work(20_000), _work(20_000)])
            assert flat, (times, ratio)
    finally:
        for p in procs:
            p.terminate()


def test_a_cost_growing_with_the_position_fails():
    times, ratio, flat, attempts = flat_in_position([_work(20_000), _work(60_000)])
    assert not flat and ratio > 2.0 and attempts == 3


@pytest.mark.slow
def test_the_decode_check_passes_ten_runs_under_load(tmp_path):
    """The main job's decode check (quick scale) ten times under a background load of twice the core count."""
    from ddesys.verification.__main__ import CONFIGS
    from ddesys.verification.checks_model import check_decode

    procs = _loaded(600.0)
    try:
        time.sleep(0.5)
        results = [check_decode(CONFIGS["quick"], tmp_path, lambda *a: None) for _ in range(10)]
    finally:
        for p in procs:
            p.terminate()
    assert all(r["passed"] for r in results), [r["rows"][1]["value"] for r in results]
