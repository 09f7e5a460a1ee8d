"""GPU check of the fused kernels: correctness against the reference paths, then timings, one table.

    python -m verification.gpu                # on a CUDA machine (needs torch with CUDA and triton)
    python -m verification.gpu --interpret    # CPU smoke run of the same script (Triton interpreter)

Correctness (fresh random inputs, outputs poisoned with NaN before each kernel, float32 and float64):
transfer forward vs the array-API reference, transfer backward vs autograd of the reference, decode
step and ring buffer vs the reference ``step`` over a sequence that wraps the buffer. Timings (CUDA
only): DS4D train step fused vs unfused (``DDESYS_REFERENCE=1``) vs S4D at L in {1024, ..., 8192},
H = 256, N = 64, batch 32; decode tokens/s at two positions for DS4D fused, DS4D reference, S4D step.
Exits 1 when a correctness check fails.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interpret", action="store_true", help="CPU smoke run under TRITON_INTERPRET=1")
    ap.add_argument("--batch", type=int, default=32)
    return ap.parse_args(argv)


def correctness(device, dtypes):
    import torch

    import nn as dnn
    from ddesys.transfer import _sample_block, contour_points
    from gpu import transfer as gt
    rows = []
    g = torch.Generator(device="cpu").manual_seed(int(time.time()) % 2**31)   # fresh inputs each run
    for rdt, cdt in dtypes:
        tol = 1e-5 if rdt == torch.float32 else 1e-12
        C, N2, M = 6, 16, 512
        k = torch.randint(1, M // 2, (C,), generator=g).to(device)
        A = (0.2 * torch.randn(C, N2, 3, dtype=cdt, generator=g)).to(device)
        cb = torch.randn(C, N2, dtype=cdt, generator=g).to(device)
        A64 = A.to(torch.complex128).requires_grad_()
        cb64 = cb.to(torch.complex128).requires_grad_()
        ref = _sample_block(A64, cb64, contour_points(k, M, torch.complex128))
        poison = torch.full((C, M), complex(float("nan"), float("nan")), dtype=cdt, device=device)
        S = gt.sample_forward(A, cb, k, M, out=poison)
        e = float((S.to(torch.complex128) - ref.detach()).abs().max() / ref.detach().abs().max())
        rows.append(("transfer forward", str(rdt), e, tol))
        G = torch.randn(C, M, dtype=torch.complex128, generator=g).to(device)
        gA_ref, gcb_ref = torch.autograd.grad((ref * G.conj()).real.sum(), (A64, cb64))
        gA, gcb = gt.sample_backward(A, cb, k, M, G.to(cdt))
        e = max(float((gA.to(torch.complex128) - gA_ref).abs().max() / gA_ref.abs().max()),
                float((gcb.to(torch.complex128) - gcb_ref).abs().max() / gcb_ref.abs().max()))
        rows.append(("transfer backward", str(rdt), e, tol))
        layer = dnn.DS4D(8, 16, l_max=48, seed=1).to(device=device, dtype=rdt)
        x = torch.randn(3, 200, 8, dtype=rdt, generator=g).to(device)
        outs = {}
        for mode in ("fused", "reference"):
            os.environ["DDESYS_REFERENCE"] = "1" if mode == "reference" else "0"
            cache = layer.allocate_inference_cache(3, dtype=rdt)
            cache.buf.fill_(complex(float("nan"), float("nan")))   # poison: slots before t = 0 must be masked
            ys = torch.stack([layer.step(x[:, t], cache) for t in range(200)], 1)
            outs[mode] = (ys, cache.buf.clone())
        os.environ["DDESYS_REFERENCE"] = "0"
        ey = float((outs["fused"][0] - outs["reference"][0]).abs().max() / outs["reference"][0].abs().max())
        eb = float((outs["fused"][1] - outs["reference"][1]).abs().max() / outs["reference"][1].abs().max())
        rows.append(("decode step output (wraps buffer)", str(rdt), ey, tol))
        rows.append(("decode ring buffer", str(rdt), eb, tol))
    rows += _cupy_rows(device, g)
    return rows


def _cupy_rows(device, g):
    """``ddesys`` on CuPy arrays (DLPack -> the same Triton kernel) vs the NumPy path, when CuPy is here."""
    if device != "cuda":
        return []
    try:
        import cupy
    except ImportError:
        print("(CuPy not installed: the CuPy route is not checked; pip install cupy-cuda12x)")
        return []
    import numpy as np

    from ddesys.transfer import sample_transfer
    rng = np.random.default_rng(int(g.initial_seed()))
    A = 0.2 * (rng.standard_normal((6, 16, 3)) + 1j * rng.standard_normal((6, 16, 3)))
    cb = rng.standard_normal((6, 16)) + 1j * rng.standard_normal((6, 16))
    k = rng.integers(1, 256, 6)
    ref = sample_transfer(A, cb, k, 512)
    S = cupy.asnumpy(sample_transfer(cupy.asarray(A), cupy.asarray(cb), cupy.asarray(k), 512))
    return [("CuPy route (DLPack, transfer fwd)", "torch.float64", float(abs(S - ref).max() / abs(ref).max()), 1e-12)]


def _sync(device):
    import torch
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timings(device, batch, H=256, N=64, Ls=(1024, 2048, 4096, 8192), positions=(1024, 8192), n_tokens=256,
            reps=10):
    """Train step seconds (S4D, DS4D fused, DS4D unfused) per L and decode tokens/s per position."""
    import torch

    import nn as dnn
    rows = []

    def train(layer, x):
        opt = torch.optim.SGD(layer.parameters(), lr=1e-4)
        for i in range(reps + 3):
            if i == 3:
                _sync(device)
                t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            layer(x).square().mean().backward()
            opt.step()
        _sync(device)
        return (time.perf_counter() - t0) / reps

    for L in Ls:
        x = torch.randn(batch, L, H, device=device)
        t_s4d = train(dnn.S4D(H, N).to(device), x)
        t_fused = train(dnn.DS4D(H, N, l_max=L).to(device), x)
        os.environ["DDESYS_REFERENCE"] = "1"
        t_ref = train(dnn.DS4D(H, N, l_max=L).to(device), x)
        os.environ["DDESYS_REFERENCE"] = "0"
        rows.append((f"train step L={L}", t_s4d, t_fused, t_ref))

    @torch.no_grad()
    def decode(layer, pos):
        cache = layer.allocate_inference_cache(1)
        layer.prefill(torch.randn(1, pos, H, device=device), cache)
        xs = torch.randn(n_tokens, 1, H, device=device)
        for i in range(min(16, n_tokens)):
            layer.step(xs[i], cache)
        _sync(device)
        t0 = time.perf_counter()
        for i in range(n_tokens):
            layer.step(xs[i], cache)
        _sync(device)
        return n_tokens / (time.perf_counter() - t0)

    ds, s4 = dnn.DS4D(H, N, l_max=max(positions)).to(device), dnn.S4D(H, N).to(device)
    for pos in positions:
        tf = decode(ds, pos)
        os.environ["DDESYS_REFERENCE"] = "1"
        tr = decode(ds, pos)
        os.environ["DDESYS_REFERENCE"] = "0"
        rows.append((f"decode tokens/s at {pos}", decode(s4, pos), tf, tr))
    return rows


def main(argv=None):
    args = _parse(argv)
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["DDESYS_GPU_INTERPRET"] = "1"
    import torch

    import gpu
    if not gpu.triton_available():
        print("triton is not installed: pip install triton")
        return 1
    device = "cpu" if args.interpret else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --interpret for the CPU smoke run")
        return 1
    name = "Triton interpreter (CPU)" if args.interpret else torch.cuda.get_device_name()
    print(f"device: {name}; torch {torch.__version__}")
    rows = correctness(device, [(torch.float32, torch.complex64), (torch.float64, torch.complex128)])
    print(f"\n{'correctness check':36s} {'dtype':15s} {'rel. error':>11s} {'bound':>8s}  result")
    ok = True
    for what, dt, e, tol in rows:
        good = e == e and e <= tol                     # NaN (poison left) fails
        ok &= good
        print(f"{what:36s} {dt:15s} {e:11.2e} {tol:8.0e}  {'PASS' if good else 'FAIL'}")
    if device == "cuda":
        rows = timings(device, args.batch)
    else:                                     # the timing code path at toy sizes, so it cannot crash on the GPU
        print("\n(interpreter: toy sizes, the numbers are not measurements)")
        rows = timings(device, 2, H=4, N=4, Ls=(32,), positions=(16, 32), n_tokens=4, reps=1)
    if rows:
        print(f"\n{'timing':28s} {'S4D':>12s} {'DS4D fused':>12s} {'DS4D unfused':>13s} {'fused/S4D':>10s}")
        for what, a, b, c in rows:
            ratio = b / a if what.startswith("train") else a / b
            print(f"{what:28s} {a:12.4g} {b:12.4g} {c:13.4g} {ratio:10.2f}")
        print("(train rows: seconds per step, ratio DS4D/S4D, goal <= 1.2; decode rows: tokens/s, ratio "
              "S4D/DS4D, goal <= 1)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
