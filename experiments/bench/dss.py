"""Benchmark of the matrix delay-system analysis (accuracy and speed goals), in one run on this machine.

    python -m ddesys.experiments.bench.dss [--quick] [--out DIR]

Prints, and writes to ``DIR/bench_dss.json`` / ``DIR/bench_dss.md`` when ``--out`` is given:

* accuracy on published test problems and closed forms (rightmost roots, multiple roots, spurious roots,
  crossings and delay margins, H2 norms), each against a reference computed here without ddesys;
* the time of ``roots`` on a 20-state, 3-delay system (goal: well under a second), of a 100 x 100 stability
  chart of a 4-state system with two delays (goal: <= 30 s on 2 cores) and of the crossings of a
  10-state system;
* where the GPL package ``tdcpy`` is installed (``pip install tdcpy``), the same real problems through its
  ``roots`` / ``spectral_abscissa`` side by side, as an outside reference only (it is called, never copied).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy.linalg import expm
from scipy.special import lambertw

import ddesys
from ddesys.cpu.threads import thread_budget


def _lambert(a, b, tau, branches=range(-8, 9)):
    r = np.array([a + lambertw(b * tau * np.exp(-a * tau), k) / tau for k in branches])
    return r[np.argsort(-r.real, kind="stable")]


def nlevp_time_delay():
    """NLEVP 'time_delay' (Betcke et al. 2013; Jarlebring & Michiels 2010): double eigenvalue 3 pi i, tau 1."""
    pi = np.pi
    a = [2 * (65 * pi + 32) / (5 * (8 + 5 * pi)), 9 * pi ** 2 * (13 + 5 * pi) / (8 + 5 * pi),
         324 * pi ** 2 * (5 * pi + 4) / (5 * (8 + 5 * pi))]
    b = [(260 * pi + 128 + 225 * pi ** 2) / (10 * (8 + 5 * pi)), 45 * pi ** 2 / (8 + 5 * pi),
         81 * pi ** 2 * (40 * pi + 32 + 25 * pi ** 2) / (10 * (8 + 5 * pi))]
    A0 = np.array([[0, 1, 0], [0, 0, 1], [-a[2], -a[1], -a[0]]])
    A1 = np.array([[0, 0, 0], [0, 0, 0], [-b[2], -b[1], -b[0]]])
    return A0, A1


def _h2_scalar(a, b, tau):
    E = expm(np.array([[a, b], [-b, -a]]) * tau)
    return float(np.sqrt(np.linalg.solve([[E[0, 0], E[0, 1] - 1.0], [2 * a, 2 * b]], [0.0, -1.0])[0]))


def timed(fn, repeat=3):
    """The best of ``repeat`` wall times of ``fn()`` (seconds) and its last result: ``(seconds, result)``."""
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def accuracy_rows():
    rows = []

    def add(problem, quantity, value, ref, goal, source):
        err = float(np.max(np.abs(np.asarray(value) - np.asarray(ref)) / np.maximum(1.0, np.abs(ref))))
        rows.append(dict(problem=problem, quantity=quantity, error=err, goal=goal, met=err <= goal, source=source))

    for a, b, tau in ((0.0, -1.0, 1.0), (-0.5 + 2j, 0.8 - 0.3j, 2.0)):
        ref = _lambert(a, b, tau)[0]
        got = ddesys.DelayStateSpace([[a]], [[b]], tau).roots(re_min=ref.real - 0.5)
        add(f"s = {a} + {b} e^(-{tau} s)", "rightmost root", got.roots[np.argmin(np.abs(got.roots - ref))], ref,
            1e-10, "Lambert W (closed form)")
    A0, A1 = nlevp_time_delay()
    r = ddesys.DelayStateSpace(A0, A1, 1.0).roots(re_min=-1.0)
    near = r.roots[np.abs(r.roots - 3j * np.pi) < 1e-6]
    add("NLEVP time_delay", "double root 3 pi i (centroid)", near.mean() if near.size == 2 else np.inf, 3j * np.pi,
        1e-8, "Betcke et al. 2013 / Jarlebring & Michiels 2010")
    for tau in (10.0, 50.0):
        r = ddesys.DelayStateSpace([[-1.0, 0.3], [0.0, -2.0]], [[0.0, 1.0], [0.0, 0.0]], tau).roots(re_min=-10.0)
        add(f"nilpotent coupling, tau {tau}", "roots found vs roots of A (spurious ones count as error)",
            np.sort(r.roots.real) if r.roots.size == 2 and r.certified else [np.inf, np.inf], [-2.0, -1.0], 1e-12,
            "det M(s) = det(sI - A) (closed form)")
    m = ddesys.DelayStateSpace([[-2.0, 0.0], [0.0, -0.9]], [[-1.0, 0.0], [-1.0, -1.0]], 1.0).delay_margin()
    add("Gu, Kharitonov & Chen 2003 benchmark", "delay margin", m, np.arccos(-0.9) / np.sqrt(0.19), 1e-8,
        "published 6.1725; closed form arccos(-0.9)/sqrt(0.19)")
    a, b = -1.0, -2.0
    c = ddesys.DelayStateSpace([[a]], [[b]], 1.0).crossings(20.0)
    w = np.sqrt(b * b - a * a)
    ref = [(np.arccos(-a / b) + 2 * np.pi * k) / w for k in range(len(c))]
    add("x' = -x - 2 x(t - tau)", f"{len(c)} crossing delays in (0, 20]", [x.tau for x in c], ref, 1e-8,
        "Hayes closed form")
    for a, b, tau in ((-1.0, 0.5, 1.0), (-2.0, -1.5, 0.4)):
        h2 = ddesys.DelayStateSpace([[a]], [[b]], tau, B=[1.0], C=[1.0]).h2_norm()
        add(f"x' = {a} x + {b} x(t - {tau}) + u", "H2 norm", h2, _h2_scalar(a, b, tau), 1e-6,
            "delay Lyapunov closed form")
    return rows


def timing_rows(quick):
    rows = []
    rng = np.random.default_rng(0)
    n = 20
    A = rng.standard_normal((n, n)) / np.sqrt(n) - 2 * np.eye(n)
    Ad = 0.3 * rng.standard_normal((3, n, n)) / np.sqrt(n)
    tau = rng.uniform(0.3, 2, 3)
    sys = ddesys.DelayStateSpace(A, Ad, tau)

    def roots20():
        s = ddesys.DelayStateSpace(A, Ad, tau)           # fresh object: no cached abscissa
        return s.roots(re_min=s.spectral_abscissa() - 1.0)

    t, res = timed(roots20)
    rows.append(dict(task="roots, 20 states, 3 delays (abscissa - 1, certified)", seconds=t, goal=1.0,
                     met=t <= 1.0 and res.certified, note=f"{res.roots.size} roots, certified={res.certified}"))
    del sys
    A4 = np.array([[-1.0, 0.5, 0, 0], [0, -1.2, 0.4, 0], [0, 0, -0.8, 0.6], [0.3, 0, 0, -1.0]])
    Ad4 = np.stack([np.diag([-0.5, 0.2, -0.3, 0.1]) + 0.1, np.diag([0.1, -0.6, 0.2, -0.4]) - 0.05])
    k = 30 if quick else 100
    t1, t2 = np.linspace(0.05, 6, k), np.linspace(0.05, 6, k)
    t, chart = timed(lambda: ddesys.delay_chart(A4, Ad4, t1, t2), repeat=1)
    goal = 30.0 * (k * k) / 1e4
    rows.append(dict(task=f"stability chart {k} x {k}, 4 states, 2 delays", seconds=t, goal=goal, met=t <= goal,
                     note=f"{int(chart.stable.sum())} of {k * k} points stable, {thread_budget()} threads"))
    A10 = rng.standard_normal((10, 10)) / np.sqrt(10) - 1.5 * np.eye(10)
    A110 = 2.0 * rng.standard_normal((10, 10)) / np.sqrt(10)
    t, c = timed(lambda: ddesys.DelayStateSpace(A10, A110, 1.0).crossings(20.0))
    rows.append(dict(task="crossings in (0, 20], 10 states", seconds=t, goal=1.0, met=t <= 1.0,
                     note=f"{len(c)} crossings"))
    return rows


def tdcpy_rows():
    """The same real problems through tdcpy (GPL; an outside reference only), when installed."""
    try:
        from tdcpy.rdde import RDDE
        from tdcpy.roots import roots as td_roots
        from tdcpy.spectral_abscissa import spectral_abscissa as td_sa
    except Exception as exc:  # noqa: BLE001 - optional
        return [dict(problem="tdcpy", note=f"not installed ({type(exc).__name__}): pip install tdcpy")]
    rows = []
    probs = {"x' = -0.1 x - x(t - 1)": (np.array([[-0.1]]), np.array([[-1.0]]), 1.0),
             "NLEVP time_delay": (*nlevp_time_delay(), 1.0),
             "nilpotent coupling, tau 50": (np.array([[-1.0, 0.3], [0.0, -2.0]]),
                                            np.array([[0.0, 1.0], [0.0, 0.0]]), 50.0)}
    for name, (A, A1, tau) in probs.items():
        t0 = time.perf_counter()
        ours = ddesys.DelayStateSpace(A, A1, tau).roots(re_min=-1.0)
        t_ours = time.perf_counter() - t0
        try:
            tds = RDDE(A=np.stack([A, A1], axis=2), hA=np.array([0.0, tau]))
            t0 = time.perf_counter()
            cr, _info = td_roots(tds, r=-1.0)
            t_td = time.perf_counter() - t0
            sa = float(td_sa(tds, r=-1.0))
            theirs = f"{np.size(cr)} roots, abscissa {sa:.12g}"
        except Exception as exc:  # noqa: BLE001 - report, do not crash the benchmark
            theirs, t_td = f"failed: {type(exc).__name__}: {exc}"[:120], float("nan")
        rows.append(dict(problem=name, ddesys=f"{ours.roots.size} roots (certified={ours.certified}), abscissa "
                         f"{ours.roots[0].real if ours.roots.size else float('nan'):.12g}", ddesys_s=t_ours,
                         tdcpy=theirs, tdcpy_s=t_td))
    return rows


def _md_table(rows):
    if not rows:
        return ""
    keys = list(rows[0])
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    return "\n".join(["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
                     + ["| " + " | ".join(fmt(r.get(k, "")) for k in keys) + " |" for r in rows])


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.dss",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 30 x 30 chart instead of 100 x 100")
    ap.add_argument("--out", default=None, help="folder for bench_dss.json and bench_dss.md")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else None
    if out is not None:                              # before any work: an unusable folder fails at once
        from ddesys.io import OutError, prepare_out
        try:
            prepare_out(out)
        except OutError as exc:
            raise SystemExit(f"error: {exc}") from None
    from ddesys.io import provenance
    result = {"date": time.strftime("%Y-%m-%d"), **provenance(), "threads": thread_budget(),
              "accuracy": accuracy_rows(), "timing": timing_rows(args.quick), "tdcpy": tdcpy_rows()}
    md = [f"# Matrix delay systems: accuracy and speed ({result['date']}, {result['threads']} threads)", ""]
    for key in ("accuracy", "timing", "tdcpy"):
        md += [f"## {key}", "", _md_table(result[key]), ""]
    text = "\n".join(md)
    print(text)
    if out is not None:
        from ddesys.io import atomic_write
        atomic_write(out / "bench_dss.json", json.dumps(result, indent=2, default=str))
        atomic_write(out / "bench_dss.md", text + "\n")
    return 0 if all(r["met"] for r in result["accuracy"] + result["timing"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
