"""Benchmark of loops with dead time: exact margins and closed-loop roots against python-control's Pade models.

    python -m ddesys.experiments.bench.control [--states 20] [--pade 6] [--repeat 3] [--reps 30]

Prints, in one run on this machine:

* accuracy on the first-order plant with dead time ``e^{-s} / (s + 1)``: the critical gain
  ``sqrt(1 + w^2)`` (``w + atan(w) = pi``), the phase margin of ``2 G`` (``wgc = sqrt 3``) and the closed
  loop's delay margin ``(pi - atan(sqrt 3)) / sqrt 3``, each against its closed form (mpmath), for ddesys
  (exact delays) and python-control (Pade model of ``--pade``);
* the time of ``stability_margins`` on plants of 2, 5, 10 and ``--states`` states with dead time under PI
  control beside python-control's ``stability_margins`` of the loop's Pade model, timed in alternation
  (``ddesys.nn.timing.interleaved``, fastest of ``--reps`` each), one ratio per plant (goal: within 2x);
* for the ``--states``-state plant, the margins and the closed loop's rightmost roots and stability (goal:
  both under one second), beside python-control's margins and poles of the Pade model;
* ``stability_margins(returnall=True)`` on a long dead time, ``3 e^{-10 s} / (s + 1)`` (every phase
  crossover and every local minimum of ``|1 + L|`` up to ``1e4``, thousands of each; goal: under one
  second);
* the closed loop's step response on ``[0, 30]`` (1001 times) for 2 and ``--states`` plant states: ddesys
  (default tolerance) against ``control.step_response`` of Pade models of orders 2 to 12, every error
  measured against a ddesys reference at ``rtol=1e-11``; the ratio of the times is taken at the Pade
  order whose error first reaches ddesys's, or (when none does: a Pade model's error falls only as about
  ``1 / order`` on a response with dead time) at the most accurate order tried, at ``--pade``, and against
  python-control's fastest time of any order (goal: within 2x; python-control's times on one model vary
  between calls, about 3 or 8 ms on a 2-core machine).
"""
from __future__ import annotations

import argparse

import numpy as np

import ddesys

from .dss import timed


def accuracy_rows(pade):
    """``(quantity, reference, ddesys, python-control with Pade)`` on the first-order plant with dead time."""
    import mpmath as mp

    mp.mp.dps = 30
    w = mp.findroot(lambda x: x + mp.atan(x) - mp.pi, 2.0)
    gm_ref = float(mp.sqrt(1 + w ** 2))
    pm_ref = float(180 - (mp.atan(mp.sqrt(3)) + mp.sqrt(3)) * 180 / mp.pi)
    dm_ref = float((mp.pi - mp.atan(mp.sqrt(3))) / mp.sqrt(3))
    G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)
    rows = [("critical gain of G", gm_ref, ddesys.stability_margins(G)[0]),
            ("phase margin of 2G (deg)", pm_ref, ddesys.stability_margins(2.0 * G)[1]),
            ("delay margin of feedback(2G)", dm_ref, ddesys.feedback(2.0 * G).delay_margin())]
    try:
        import control
    except ImportError:
        return [r + (float("nan"),) for r in rows]
    P = G.to_control(pade_order=pade)
    theirs = [control.stability_margins(P)[0], control.stability_margins(2.0 * P)[1], float("nan")]
    return [r + (float(t),) for r, t in zip(rows, theirs)]


def loop(n, seed=0):
    """A stable ``n``-state plant with dead time 0.7 under a PI controller: the loop transfer function."""
    rng = np.random.default_rng(seed)
    A = -np.diag(np.linspace(0.5, 5.0, n)) + 0.1 * rng.standard_normal((n, n))
    B = rng.standard_normal((n, 1))
    C = rng.standard_normal((1, n)) / n
    return ddesys.tf([0.5, 0.3], [1.0, 0.0]) * ddesys.ss(A, B, C, input_delay=0.7)


MARGIN_STATES = (2, 5, 10)           # plant states of the margins' timings, with --states


def margin_rows(states, pade, reps):
    """``(plant states, Pade model states, ddesys seconds, python-control seconds)`` of ``stability_margins`` on
    ``loop(n)`` and on its Pade model, for ``n`` in 2, 5, 10 and ``states``: each pair timed in alternation,
    the fastest of ``reps`` calls each (a shared machine's load only ever adds time). Without python-control
    its seconds are nan."""
    from ddesys.nn.timing import interleaved

    try:
        import control
    except ImportError:
        control = None
    rows = []
    for n in sorted({*MARGIN_STATES, states}):
        L = loop(n)
        if control is None:
            rows.append((n, 0, interleaved([lambda: ddesys.stability_margins(L)], reps, stat=min)[0], float("nan")))
            continue
        P = L.to_control(pade_order=pade)
        t_d, t_c = interleaved([lambda: ddesys.stability_margins(L), lambda: control.stability_margins(P)], reps,
                               stat=min)
        rows.append((n, P.nstates, t_d, t_c))
    return rows


def print_margins(states, pade, reps):
    """Print the rows of :func:`margin_rows`; return them."""
    print(f"\nstability_margins, PI control of an n-state plant with dead time 0.7 (fastest of {reps}, in alternation)")
    ratios, rows = [], margin_rows(states, pade, reps)
    for n, ns, t_d, t_c in rows:
        line = f"  {n:2d}-state plant: ddesys {t_d * 1e3:6.2f} ms"
        if np.isfinite(t_c):
            ratios.append(t_d / t_c)
            line += (f"   python-control Pade({pade}) ({ns:2d} states) {t_c * 1e3:6.2f} ms   "
                     f"time ratio ddesys / python-control: {t_d / t_c:.2f}x (goal: within 2x)")
        print(line)
    if ratios:
        print(f"  margins within 2x of python-control's at every plant: {'yes' if max(ratios) <= 2.0 else 'NO'}")
    else:
        print("  (python-control is not installed: pip install control for the baseline)")
    return rows


def print_returnall(repeat):
    """``returnall=True`` on ``3 e^{-10 s} / (s + 1)``: every crossing and every minimum of ``|1 + L|``."""
    L = 3.0 * ddesys.tf([1.0], [1.0, 1.0], delay=10.0)
    t, (GM, PM, SM, w180, wc, ws) = timed(lambda: ddesys.stability_margins(L, returnall=True), repeat)
    print(f"\nstability_margins(returnall=True) of 3 e^(-10 s) / (s + 1): {t * 1e3:.1f} ms for {w180.size} phase "
          f"crossovers, {wc.size} gain crossover and {ws.size - 2} minima of |1 + L| refined "
          f"(goal: under 1 s: {'yes' if t < 1.0 else 'NO'})")


STEP_PADE = (2, 4, 6, 8, 10, 12)     # python-control's Pade orders tried for the step response


def step_rows(states, repeat):
    """``(ddesys (seconds, error, estimate), [(order, model states, seconds, error), ...])`` for the step
    response of ``feedback(0.5 loop(states))`` on ``[0, 30]``, errors against ddesys at ``rtol=1e-11``;
    the list is empty without python-control."""
    cl = ddesys.feedback(0.5 * loop(states))
    t = np.linspace(0.0, 30.0, 1001)
    ref = cl.step(t, rtol=1e-11).y[0, 0]
    cl.step(t)                                           # compiled once, outside the timing
    t_d, r = timed(lambda: cl.step(t), repeat)
    ours = (t_d, float(np.abs(r.y[0, 0] - ref).max()), r.error_estimate)
    try:
        import control
    except ImportError:
        return ours, []
    rows = []
    for k in STEP_PADE:
        P = ddesys.to_control(cl, pade_order=k)
        t_c, y = timed(lambda: control.step_response(P, t).outputs, repeat)
        rows.append((k, P.nstates, t_c, float(np.abs(np.ravel(y) - ref).max())))
    return ours, rows


def print_step(states, pade, repeat):
    print("\nstep response of feedback(0.5 L) on [0, 30], 1001 times (errors against ddesys at rtol=1e-11)")
    ratios = []
    for n in sorted({2, states}):
        (t_d, e_d, est), rows = step_rows(n, repeat)
        print(f"  {n}-state plant: ddesys {t_d * 1e3:7.2f} ms   error {e_d:.1e} (estimate {est:.1e})")
        if not rows:
            print("    (python-control is not installed: pip install control for the baseline)")
            continue
        for k, ns, t_c, e_c in rows:
            print(f"    python-control Pade({k:2d}) ({ns:2d} states) {t_c * 1e3:7.2f} ms   error {e_c:.1e}")
        match = [r for r in rows if r[3] <= e_d]
        k, _, t_c, e_c = match[0] if match else min(rows, key=lambda r: r[3])
        how = "matching ddesys's error" if match else \
            f"the most accurate tried, {e_c / max(e_d, 1e-300):.0e} times ddesys's error"
        at = {r[0]: r for r in rows}.get(pade)
        fastest = min(r[2] for r in rows)                 # python-control's times vary from call to call
        ratio = t_d / t_c
        ratios.append(t_d / fastest)
        line = f"    time ratio ddesys / python-control: {ratio:.2f}x at Pade({k}) ({how})"
        if at is not None and at[0] != k:
            line += f", {t_d / at[2]:.2f}x at Pade({pade}) (error {at[3] / max(e_d, 1e-300):.0e} times ddesys's)"
        print(line + f"; {t_d / fastest:.2f}x against its fastest time, any order")
    if ratios:
        print(f"  within 2x of python-control's fastest time: {'yes' if max(ratios) <= 2.0 else 'NO'}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.control",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--states", type=int, default=20, help="plant states of the timed loop (default 20)")
    ap.add_argument("--pade", type=int, default=6, help="Pade degree of python-control's delay model (default 6)")
    ap.add_argument("--repeat", type=int, default=3, help="timing repeats, best kept (default 3)")
    ap.add_argument("--reps", type=int, default=30, help="alternating calls of the margins' timings (default 30)")
    args = ap.parse_args(argv)
    if args.states < 1 or args.pade < 1 or args.repeat < 1 or args.reps < 1:
        ap.error("--states, --pade, --repeat and --reps must be >= 1")

    print("accuracy on e^{-s} / (s + 1) (reference: closed forms, mpmath)")
    print(f"{'quantity':32s} {'reference':>14s} {'ddesys err':>11s} {'Pade(%d) err' % args.pade:>12s}")
    for name, ref, ours, theirs in accuracy_rows(args.pade):
        print(f"{name:32s} {ref:14.10f} {abs(ours - ref):11.2e} {abs(theirs - ref):12.2e}")

    t_m = {n: t for n, _, t, _ in print_margins(args.states, args.pade, args.reps)}[args.states]

    L = loop(args.states)
    m = ddesys.stability_margins(L)

    def closed():
        cl = ddesys.feedback(L)
        return cl.poles()[:4], cl.is_stable()

    t_r, (roots, stable) = timed(closed, args.repeat)
    print(f"\n{args.states}-state plant, dead time 0.7, PI control")
    print(f"  ddesys margins      {t_m * 1e3:8.1f} ms   gm {m[0]:.6g}  pm {m[1]:.6g} deg  sm {m[2]:.6g}  (timed above)")
    print(f"  ddesys closed loop  {t_r * 1e3:8.1f} ms   rightmost {complex(roots[0]):.6g}  stable {stable}")
    print(f"  both under 1 s: {'yes' if t_m < 1.0 and t_r < 1.0 else 'NO'}")
    try:
        import control
    except ImportError:
        print("  (python-control is not installed: pip install control for the baseline)")
        return 0
    P = L.to_control(pade_order=args.pade)
    pm = control.stability_margins(P)
    t_pr, pr = timed(lambda: control.feedback(P, 1).poles(), args.repeat)
    rightmost = pr[np.argmax(pr.real)]
    print(f"  python-control, Pade({args.pade}) model ({P.nstates} states)")
    print(f"    margins                       gm {pm[0]:.6g}  pm {pm[1]:.6g} deg  sm {pm[2]:.6g}")
    print(f"    closed-loop poles {t_pr * 1e3:8.1f} ms   rightmost {complex(rightmost):.6g}")
    print(f"  time ratio ddesys / python-control: closed loop {t_r / t_pr:.2f}x")
    print(f"  python-control's error against the exact values: pm {abs(pm[1] - m[1]):.2e} deg, "
          f"rightmost root {abs(rightmost - roots[0]):.2e}")
    print_returnall(args.repeat)
    print_step(args.states, args.pade, max(args.repeat, 15))      # milliseconds: best of more repeats
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
