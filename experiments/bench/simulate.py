"""Benchmark: ``DiscreteDelaySystem.simulate`` (Numba) against a plain Python loop.

    python -m ddesys.experiments.bench.simulate            # L = 8192, N2 = 32 modes, 16 channels, float64
    python -m ddesys.experiments.bench.simulate --quick    # L = 1024, N2 = 8, 4 channels

Both run the same recurrence (docs/theory.md §2)::

    h_t = lam h_{t-1} + mu ((1 - alpha) h_{t-k} + alpha h_{t-k-1}) + bbar x_t,   h_{t<0} = 0
    y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t

on a random DS4D-initialized system (S4D-Inv base dynamics, p = 0.1, delays up to L/2). The Numba
kernel is compiled (or loaded from its cache) by a small warm-up call before timing and timed as the
best of ``--repeats`` runs; the Python loop is timed once.
"""
from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

import ddesys
from ddesys.init import s4d_modes
from ddesys.verification.systems import ds4d_system


def random_ds4d(rng, H, N2, L, dt_min=1e-3, dt_max=1e-1, p=0.1):
    """S4D-Inv base dynamics, log-uniform dt per channel, delayed branch p, delays uniform in [1, L/2]."""
    a = s4d_modes(N2, "inv")
    dt = np.exp(rng.uniform(math.log(dt_min), math.log(dt_max), H))
    theta = np.pi + 0.1 * rng.standard_normal((H, N2))
    c = (rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))) / np.sqrt(2)
    delay = rng.uniform(1.0, max(1.0, L / 2), H)
    lam, mu, bbar, c, delay = ds4d_system(a, dt, p, theta, c, delay)
    return dict(lam=lam, mu=mu, bbar=bbar, c=c, delay=delay, d=rng.standard_normal(H))


def python_loop(lam, mu, bbar, c, delay, d, x):
    """The recurrence in plain Python: loops over channel, mode and time, complex scalars."""
    H, N2 = lam.shape
    L = x.shape[1]
    y = np.zeros((H, L))
    for b in range(H):
        s = float(delay[b])
        k = math.floor(s)
        alpha = s - k
        xb = x[b].tolist()
        yb = [float(d[b]) * v for v in xb]
        for n in range(N2):
            ln, mn, bn, cn = complex(lam[b, n]), complex(mu[b, n]), complex(bbar[b, n]), complex(c[b, n])
            m1, m2 = mn * (1 - alpha), mn * alpha
            h = [0j] * L
            for t in range(L):
                v = bn * xb[t]
                if t >= 1:
                    v += ln * h[t - 1]
                if t >= k:
                    v += m1 * h[t - k]
                if t >= k + 1:
                    v += m2 * h[t - k - 1]
                h[t] = v
                yb[t] += 2.0 * (cn.real * v.real - cn.imag * v.imag)
        y[b] = yb
    return y


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.simulate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (L=1024, N2=8, 4 channels)")
    ap.add_argument("--L", type=int, default=None)
    ap.add_argument("--modes", type=int, default=None, help="N2, stored complex modes per channel")
    ap.add_argument("--channels", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5, help="timed Numba runs (best is reported)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    L = args.L or (1024 if args.quick else 8192)
    N2 = args.modes or (8 if args.quick else 32)
    H = args.channels or (4 if args.quick else 16)

    rng = np.random.default_rng(args.seed)
    params = random_ds4d(rng, H, N2, L)
    x = rng.standard_normal((H, L))
    sysm = ddesys.DiscreteDelaySystem(**params)

    print(f"simulate benchmark: H={H} channels, N2={N2} modes, L={L}, float64, "
          f"delays {params['delay'].min():.1f}..{params['delay'].max():.1f} steps")
    print(f"numba available: {ddesys.recurrence.numba_available()}  (CPU cores: {os.cpu_count()})")

    t0 = time.perf_counter()
    sysm.simulate(x[:, :64])                              # warm-up: JIT compile or cache load
    print(f"warm-up (compile/cache load): {time.perf_counter() - t0:.3f} s")

    times = []
    for _ in range(max(1, args.repeats)):
        t0 = time.perf_counter()
        y_nb = sysm.simulate(x)
        times.append(time.perf_counter() - t0)
    t_nb = min(times)

    t0 = time.perf_counter()
    y_py = python_loop(**params, x=x)
    t_py = time.perf_counter() - t0

    diff = float(np.abs(y_nb - y_py).max())
    scale = float(np.abs(y_py).max())
    label = "numba" if ddesys.recurrence.numba_available() else "vector"
    print(f"simulate ({label}): {t_nb * 1e3:10.2f} ms  (best of {len(times)}, median "
          f"{np.median(times) * 1e3:.2f} ms)")
    print(f"python loop       : {t_py * 1e3:10.2f} ms  (one run)")
    print(f"speed ratio       : {t_py / t_nb:10.1f} x")
    print(f"max |diff|        : {diff:.3e}  (relative to max |y| = {scale:.3g}: {diff / scale:.3e})")
    return dict(t_simulate=t_nb, t_python=t_py, ratio=t_py / t_nb, max_abs_diff=diff)


if __name__ == "__main__":
    main()
