"""Benchmark: a stability chart run serially, in threads and through process pools (``executor=``).

    python -m ddesys.experiments.bench.chart_executor            # 60 x 60 chart
    python -m ddesys.experiments.bench.chart_executor --quick    # 24 x 24 chart

The chart is ``ddesys.delay_chart`` of the 4-state, two-delay system of ``bench.dss`` over
``tau1, tau2 in [0.05, 6]``. It runs serially (``workers=1``, the baseline), in threads
(``workers=2``), and through a ``concurrent.futures.ProcessPoolExecutor`` of 1, 2, ... workers (up to
``--max-workers``, default the CPU count and at least 2) with ``workers=`` the pool's size. Each pool is
started and its processes warmed up before the timing (the start-up is printed apart). Printed: the time
of each run (best of ``--repeats``), its speed-up over the serial run measured in the same run, its CPU
seconds (this process and the pool's, start-up included), and whether its chart equals the serial one
bit for bit (the exit status is 1 if one does not). The speed-up of a pool of ``w`` processes is at most
the number of cores free of other work.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import ddesys

A4 = np.array([[-1.0, 0.5, 0, 0], [0, -1.2, 0.4, 0], [0, 0, -0.8, 0.6], [0.3, 0, 0, -1.0]])
AD4 = np.stack([np.diag([-0.5, 0.2, -0.3, 0.1]) + 0.1, np.diag([0.1, -0.6, 0.2, -0.4]) - 0.05])


def _warm():
    """Runs in a pool process: loads the chart module, then holds the process a moment so that the
    next warm-up task lands on another one."""
    import ddesys.matrix.chart  # noqa: F401

    time.sleep(0.2)
    return os.getpid()


def _load():
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:                                             # pragma: no cover - not on every platform
        return "unknown"


def _cpu():
    """CPU seconds of this process and of its waited-for children (the pool's processes, once shut down)."""
    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def _best(fn, repeats):
    best, out = np.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _same(a, b):
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("stable", "converged", "n_grid")) \
        and a.abscissa.tobytes() == b.abscissa.tobytes()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.chart_executor",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 24 x 24 chart instead of 60 x 60")
    ap.add_argument("--size", type=int, default=None, help="points along each delay axis")
    ap.add_argument("--max-workers", type=int, default=None,
                    help="largest process pool (default: the CPU count, at least 2)")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs of each variant (the best is shown)")
    ap.add_argument("--start-method", choices=multiprocessing.get_all_start_methods(), default=None,
                    help="how the pool starts its processes (default: the platform's)")
    args = ap.parse_args(argv)
    k = args.size or (24 if args.quick else 60)
    top = args.max_workers or max(2, os.cpu_count() or 1)
    ctx = multiprocessing.get_context(args.start_method)
    t = np.linspace(0.05, 6.0, k)

    def chart(**kw):
        return ddesys.delay_chart(A4, AD4, t, t, **kw)

    print(f"stability chart {k} x {k} ({k * k} points), 4 states, 2 delays; {os.cpu_count()} CPU cores, "
          f"process start method {ctx.get_start_method()}; load average {_load()} (other work on the cores "
          "lowers the speed-ups)")
    chart(workers=1, n_grid=12)                                       # warm the caches of this process
    rows = []
    c0 = _cpu()
    t_serial, ref = _best(lambda: chart(workers=1), args.repeats)
    rows.append(("serial (workers=1)", t_serial, (_cpu() - c0) / args.repeats, True))
    c0 = _cpu()
    t_thr, c = _best(lambda: chart(workers=2), args.repeats)
    rows.append(("threads (workers=2)", t_thr, (_cpu() - c0) / args.repeats, _same(c, ref)))
    for w in range(1, top + 1):
        t0 = time.perf_counter()
        with ProcessPoolExecutor(max_workers=w, mp_context=ctx) as pool:
            pids = {f.result() for f in [pool.submit(_warm) for _ in range(w)]}
            start = time.perf_counter() - t0
            c0 = _cpu()
            t_w, c = _best(lambda w=w, pool=pool: chart(executor=pool, workers=w), args.repeats)
        rows.append((f"ProcessPoolExecutor({w}) (start-up {start:.2f} s, {len(pids)} processes)", t_w,
                     (_cpu() - c0) / args.repeats, _same(c, ref)))
    print(f"load average after: {_load()}")
    width = max(len(r[0]) for r in rows)
    print(f"{'run':<{width}}  {'seconds':>8}  {'speed-up':>8}  {'CPU s/run':>9}  identical to serial")
    for name, sec, cpu, same in rows:
        print(f"{name:<{width}}  {sec:8.2f}  {t_serial / sec:7.2f}x  {cpu:9.2f}  {'yes' if same else 'NO'}")
    print("speed-up: the serial time over the run's, both measured above (best of --repeats); CPU s/run: the "
          "CPU seconds of this process and of the pool's processes (their start-up included) per run")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
