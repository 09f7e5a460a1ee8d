"""FFT kernel synthesis (contour shift) against the exact recurrence, paper setting vs automatic.

    python -m ddesys.verification.kernel_accuracy [--quick] [--channels H] [--modes N2] [--seed S] [--json PATH]

For float32 and float64, dt in {1e-3, 1e-2, 1e-1} and L in {1024, 2048, 4096, 8192}, prints the worst
relative error over channels, ``max_t |K_fft - K_rec| / max_t |K_rec|``, of:

* ``paper``: eps = 1e-3, M = nextpow2(2L), synthesis in the output precision (the paper's setting);
* ``auto``: ``eps="auto"`` with the synthesis in the output precision (float32 stays float32);
* ``default`` (float32 only): the library default, synthesis in float64 and the kernel cast to float32.

The reference is the float64 recurrence (Numba), the same discrete system, itself checked against an
independent NumPy impulse response (:mod:`verification.reference`, column ``ref_vs_oracle``, bound 1e-12).
Exits non-zero when the library default misses its acceptance bound (1e-10 float64, 2e-6 float32) or
the reference its check. ``--json PATH`` also writes the rows, bounds and verdict as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ddesys.contour import next_pow2
from ddesys.io import provenance
from ddesys.verification import reference
from ddesys.verification.reference import rel_err
from ddesys.verification.systems import random_delay_system

BOUND = {"float64": 1e-10, "float32": 2e-6}
REF_BOUND = 1e-12        # the float64 recurrence reference vs the independent NumPy impulse response


def run(Ls, dts, H, N2, seed):
    rows = []
    jobs = [(L, dt) for L in Ls for dt in dts]
    for L, dt in tqdm(jobs, desc="kernel accuracy", leave=False):
        rng = np.random.default_rng(seed)
        sys_ = random_delay_system(rng, H, N2, dt, L)
        ref = sys_.kernel(L, method="recurrence")                     # float64 recurrence
        ref_check = rel_err(ref, reference.recurrence_kernel(sys_.lam, sys_.mu, sys_.bbar, sys_.c, sys_.delay, L))
        M = next_pow2(2 * L)
        for prec, dtype in (("float64", np.float64), ("float32", np.float32)):
            paper = sys_.kernel(L, eps=1e-3, M=M, dtype=dtype, compute_dtype=dtype)
            auto = sys_.kernel(L, dtype=dtype, compute_dtype=dtype)
            ct = sys_.contour(L, compute_dtype=dtype)
            row = dict(L=L, dt=dt, precision=prec, paper=rel_err(paper, ref), auto=rel_err(auto, ref),
                       auto_M=ct.M // L, auto_eps=float(np.min(ct.eps)), predicted=float(np.max(ct.predicted_error)))
            row["default"] = rel_err(sys_.kernel(L, dtype=dtype), ref) if prec == "float32" else row["auto"]
            row["ref_vs_oracle"] = ref_check
            rows.append(row)
    return rows


def print_table(rows):
    print(f"{'prec':8s} {'dt':>6s} {'L':>5s} | {'paper eps=1e-3,M=2L':>20s} | {'auto':>9s} {'(M/L, eps)':>14s} "
          f"{'predicted':>9s} | {'default':>9s}")
    print("-" * 92)
    for r in rows:
        print(f"{r['precision']:8s} {r['dt']:6.0e} {r['L']:5d} | {r['paper']:20.2e} | {r['auto']:9.2e} "
              f"({r['auto_M']}, {r['auto_eps']:7.1e}) {r['predicted']:9.1e} | {r['default']:9.2e}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.verification.kernel_accuracy",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="L in {1024, 2048} only, 4 channels")
    ap.add_argument("--channels", type=int, default=16)
    ap.add_argument("--modes", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows and the verdict to this file")
    args = ap.parse_args(argv)
    Ls = [1024, 2048] if args.quick else [1024, 2048, 4096, 8192]
    H = 4 if args.quick else args.channels
    rows = run(Ls, [1e-3, 1e-2, 1e-1], H, args.modes, args.seed)
    print(f"FFT kernel vs float64 recurrence: worst relative error over {H} channels x {args.modes} modes, "
          "delays uniform in [1, L/2]")
    print_table(rows)
    fails = [r for r in rows if r["default"] > BOUND[r["precision"]] or r["ref_vs_oracle"] > REF_BOUND]
    print(f"reference check: float64 recurrence vs independent NumPy impulse response, worst "
          f"{max(r['ref_vs_oracle'] for r in rows):.2e} (bound {REF_BOUND:g})")
    print(f"\nacceptance (library default): float64 <= {BOUND['float64']:g}, float32 <= {BOUND['float32']:g}: "
          + ("PASS" if not fails else f"FAIL ({len(fails)} rows)"))
    if args.json is not None:
        args.json.write_text(json.dumps(dict(**provenance(), channels=H, modes=args.modes, seed=args.seed,
                                             bound=BOUND, ref_bound=REF_BOUND, passed=not fails, rows=rows),
                                        indent=1, default=float))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
