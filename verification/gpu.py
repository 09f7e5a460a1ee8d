"""GPU check of the fused kernels: preflight, correctness against float64 references, then timings.

    python -m ddesys.verification.gpu --out DIR [--seed S]   # on a CUDA machine (torch with CUDA, triton)
    python -m ddesys.verification.gpu --interpret --out DIR  # CPU smoke run of the same code (Triton interpreter)

Preflight (:mod:`verification.gpu_preflight`): imports and versions (``array-api-compat`` included:
without it ``ddesys`` silently falls back to NumPy), the device, one tiny fused launch; a problem stops
the check (exit 2) with a message saying what to install or carry.

Correctness (:mod:`verification.gpu_correctness`; fresh random inputs from ``--seed``, printed and
saved, so any run can be repeated): transfer forward (into a NaN-poisoned ``out``) and backward, float32
and float64, against the float64 reference and autograd, each with the bound of the kernels' rounding
analysis; decode step and ring buffer vs the reference step over a sequence that wraps the buffer; DS4D
parameter gradients, fused vs unfused, through autograd; ``prefill`` then ``step`` on the device vs the
FFT output (DS4D and S4D); the CuPy route when CuPy is installed.

Timings (:mod:`verification.gpu_timing`, CUDA events): train step S4D / DS4D fused / DS4D unfused at L in
{1024, ..., 8192}, H = 256, N = 64, batch 32; prefill; decode tokens/s at batch 1 and 64, before and
after the longest delay, with cache bytes. Under ``--interpret`` the same code runs at toy sizes (the
numbers are not measurements).

Every row is printed and written to ``DIR/gpu_check.json`` and ``DIR/gpu_check.md`` as soon as it is
measured; a section that raises becomes an error row and the next section still runs. Exit status: 0
all checks pass, 1 a check failed or a section raised, 2 the preflight stopped the run. The process's
environment is restored on return (``DDESYS_REFERENCE`` is toggled per row; ``--interpret`` sets
``TRITON_INTERPRET``/``DDESYS_GPU_INTERPRET``, which must precede the first import of ``gpu.transfer``:
run it as a fresh process).
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time

from ddesys.io import provenance

from .gpu_report import Report, env_vars

FULL = dict(train=dict(batch=32, H=256, N=64, Ls=(1024, 2048, 4096, 8192), reps=10),
            decode=dict(H=256, N=64, l_max=8192, batches=(1, 64), n_tokens=256, warmup=16))
TOY = dict(train=dict(batch=2, H=4, N=4, Ls=(32,), reps=1, warmup=1),
           decode=dict(H=4, N=4, l_max=32, batches=(1, 2), n_tokens=2, warmup=1))


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m ddesys.verification.gpu",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interpret", action="store_true", help="CPU smoke run under TRITON_INTERPRET=1")
    ap.add_argument("--out", default="verification_out/gpu", help="folder for gpu_check.json / gpu_check.md")
    ap.add_argument("--seed", type=int, default=None, help="seed of the random inputs (default: fresh, printed)")
    ap.add_argument("--batch", type=int, default=None, help="training batch (default 32)")
    ap.add_argument("--skip-timing", action="store_true", help="correctness only")
    return ap.parse_args(argv)


def main(argv=None):
    args = _parse(argv)
    seed = args.seed if args.seed is not None else time.time_ns() % 2**31
    env = dict(DDESYS_REFERENCE="0")
    if args.interpret:
        env.update(TRITON_INTERPRET="1", DDESYS_GPU_INTERPRET="1")
    with env_vars(**env):
        return _run(args, seed)


def _run(args, seed):
    from .gpu_preflight import message, preflight
    pre = preflight(args.interpret)
    info = pre["info"]
    meta = {"seed": seed, "interpret": args.interpret, "argv": sys.argv[1:], "device": info.get("device"),
            "torch": info.get("torch"), "triton": info.get("triton"),
            "started": datetime.datetime.now().isoformat(timespec="seconds"), **provenance()}
    report = Report(args.out, meta)
    report.set_preflight(pre)
    print(f"GPU check: seed {seed} (repeat with --seed {seed}); writing {args.out}/gpu_check.json and .md",
          flush=True)
    for k, v in info.items():
        print(f"  {k}: {v}")
    if not pre["ok"]:
        print(message(pre), flush=True)
        report.finish("preflight failed")
        return 2
    device = "cpu" if args.interpret else "cuda"

    from . import gpu_correctness, gpu_timing
    print("\ncorrectness (error and bound relative to the reference's largest value)", flush=True)
    gpu_correctness.run_all(device, seed, report, toy=args.interpret)
    if not args.skip_timing:
        sizes = TOY if args.interpret else FULL
        train = dict(sizes["train"], **({"batch": args.batch} if args.batch else {}))
        if args.interpret:
            print("\n(interpreter: toy sizes, the numbers are not measurements)")
        print("\ntimings", flush=True)
        report.guarded("train timing", gpu_timing.train_rows, device, report.add, **train)
        report.guarded("decode timing", gpu_timing.decode_rows, device, report.add, **sizes["decode"])
    report.finish("done")
    n_bad = sum(r["status"] in ("fail", "error") for r in report.rows)
    print(f"\n{'ALL CHECKS PASS' if report.ok else f'{n_bad} rows failed or raised'}; seed {seed}; "
          f"report: {args.out}/gpu_check.md", flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
