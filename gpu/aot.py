"""Ahead-of-time compile check: every fused kernel built to a CUDA binary without a GPU.

    python -m ddesys.gpu.aot                 # sm_80 and sm_90 (A100, H100/H200), float32 and float64
    python -m ddesys.gpu.aot --arch 90 120

The Triton interpreter (how CI runs the kernels on CPU tensors) executes the kernel's Python, not the
compiled code: type rules can differ (a Python ``float`` argument is float32 in compiled code, float64
in the interpreter), and an op the compiler rejects never shows. This check runs Triton's whole
compiler (TTIR -> TTGIR -> LLVM -> PTX -> ``ptxas`` cubin, all shipped in the ``triton`` wheel) with
the exact argument types the launchers pass (:func:`gpu.transfer.forward_launch` and friends, typed by
Triton's own ``mangle_type``), then reads registers, spills and shared memory from the cubin with
``cuobjdump``. It needs ``triton`` and ``torch``, no GPU and no CUDA driver.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import torch


def _specs(dtype):
    """``(name, kernel, args, meta)`` of each kernel at a small shape, in ``dtype`` (float32/float64)."""
    from . import decode, transfer
    cdt = torch.complex128 if dtype == torch.float64 else torch.complex64
    C, N2, M, B, R = 4, 32, 256, 2, 16
    A = torch.zeros(C, N2, 3, dtype=cdt)
    cb = torch.zeros(C, N2, dtype=cdt)
    k = torch.ones(C, dtype=torch.int64)
    out = []
    kern, _, args, meta, _ = transfer.forward_launch(A, cb, k, M)
    out.append(("transfer forward", kern, args, meta))
    kern, _, args, meta, _ = transfer.backward_launch(A, cb, k, M, torch.zeros(C, M, dtype=cdt))
    out.append(("transfer backward", kern, args, meta))
    p = torch.zeros(C, N2, dtype=cdt)
    kern, _, args, meta, _ = decode.decode_launch(torch.zeros(B, R, C, N2, dtype=cdt), torch.zeros(B, C, dtype=dtype),
                                                  p, p, p, p, p, torch.zeros(C, dtype=dtype), k, 5)
    out.append(("decode step", kern, args, meta))
    return out


def _signature(kernel, args, meta):
    """Triton's own types for the launch arguments (what ``kernel[grid](*args)`` would compile)."""
    from triton.runtime.jit import mangle_type
    names = kernel.arg_names
    sig = {n: mangle_type(a) for n, a in zip(names, args)}
    for n in names[len(args):]:
        if n not in meta:
            raise TypeError(f"{kernel.__name__}: no value for parameter {n}")
        sig[n] = "constexpr"
    return sig


def _resources(cubin: bytes):
    """Registers, spill (LOCAL), stack and shared bytes of a cubin, read with the wheel's ``cuobjdump``.
    (No kernel needs a stack: the transfer kernels gather the contour points from a table instead of
    calling libdevice's float64 ``cos``/``sin``, whose large-argument reduction reserved one.)"""
    import triton.backends.nvidia as nv
    tool = os.path.join(os.path.dirname(nv.__file__), "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        text = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True,
                              check=True).stdout
    vals = {key: int(v) for key, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text)}
    return vals.get("REG", -1), vals.get("LOCAL", 0), vals.get("STACK", 0), vals.get("SHARED", 0)


def compile_all(archs=(80, 90), dtypes=(torch.float32, torch.float64)):
    """Compile every kernel for every ``sm_<arch>`` and dtype. Returns a list of dicts with ``kernel``,
    ``dtype``, ``arch``, ``regs``, ``spill_bytes``, ``stack_bytes``, ``shared_bytes``,
    ``global_scratch_bytes`` (device memory the kernel allocates beyond its arguments), ``signature``.
    Raises whatever the compiler raises on a kernel it rejects."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    rows = []
    for dtype in dtypes:
        for name, kernel, args, meta in _specs(dtype):
            constexprs = {k: v for k, v in meta.items() if k in kernel.arg_names}
            options = {k: v for k, v in meta.items() if k not in kernel.arg_names}
            sig = _signature(kernel, args, meta)
            for arch in archs:
                src = ASTSource(fn=kernel, signature=sig, constexprs=constexprs)
                compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
                regs, spill, stack, shared = _resources(compiled.asm["cubin"])
                rows.append(dict(kernel=name, dtype=str(dtype).replace("torch.", ""), arch=arch, regs=regs,
                                 spill_bytes=spill, stack_bytes=stack, shared_bytes=shared, signature=sig,
                                 global_scratch_bytes=int(getattr(compiled.metadata, "global_scratch_size", 0))))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.gpu.aot",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, nargs="+", default=[80, 90], help="SM versions (80: A100, 90: H100/H200)")
    args = ap.parse_args(argv)
    from . import triton_available
    if not triton_available():
        print("triton is not installed: pip install triton")
        return 1
    rows = compile_all(tuple(args.arch))
    print(f"{'kernel':20s} {'dtype':8s} {'arch':>5s} {'regs':>5s} {'spill B':>8s} {'stack B':>8s} {'shared B':>9s}")
    for r in rows:
        print(f"{r['kernel']:20s} {r['dtype']:8s} {'sm_' + str(r['arch']):>5s} {r['regs']:5d} "
              f"{r['spill_bytes']:8d} {r['stack_bytes']:8d} {r['shared_bytes']:9d}")
    spills = [r for r in rows if r["spill_bytes"]]
    print("no register spills" if not spills else f"{len(spills)} kernel builds spill to local memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
