"""Correctness rows of the GPU check: the fused kernels against float64 references, with error bounds
from the kernels' rounding analysis (not fixed tolerances that a fraction of random seeds fails).

Transfer kernels (``gpu/transfer.py``), working precision ``u`` (``2^-24`` float32, ``2^-53`` float64),
first order in ``u``, per output element:

* points: table entries ``w^-j`` from a float64 angle and float64 ``cos``/``sin`` (at most ``16 u64``),
  rounded once to the working precision: ``|dz| <= e_z u``, ``e_z = 1 + 16 u64 / u``;
* ``den = 1 - sum_j a_j z_j`` in real arithmetic: ``|d den| <= c_d u (1 + sum_j |a_j|)``,
  ``c_d = 12 + 1.5 e_z``; so ``|d inv| / |inv| <= (c_d kappa + 5) u``, ``kappa = (1 + sum_j |a_j|) / |den|``;
* each term (``cb inv``; ``G conj(inv)``; ``G conj(cb inv^2 z)``) adds its products and the rounding of
  ``G`` to the working precision: relative ``(c_d kappa + 8) u``, ``(c_d kappa + 9) u``,
  ``(2 c_d kappa + 20 + e_z) u``;
* sums: the forward adds ``N2`` terms serially; the backward keeps ``BLOCK_M`` lanes of
  ``ceil(M / BLOCK_M)`` serial terms and adds the lanes by a tree: ``n_sum = ceil(M / BLOCK_M) +
  log2(BLOCK_M)``, at most ``sqrt(2) n_sum u sum |term|`` for a complex sum.

So ``|error| <= u sum_terms (rel_term + sqrt(2) n_sum) |term|``, computed here in float64 from the data,
plus the same bound for the float64 reference itself (``u = 2^-53``, serial sums of every term). The row
reports ``max |error| / max |reference|`` against ``max bound / max |reference|``. The test data keep
``sum_j |a_j| <= 0.95`` (DS4D's regime: ``|rho lam| + |rho^k mu| < |abar| < 1``), so ``kappa <= 39`` and
the first-order analysis holds.
"""
from __future__ import annotations

import math

import torch

from .gpu_report import reference_path

U = {torch.float32: 2.0**-24, torch.float64: 2.0**-53}
U64 = 2.0**-53
DTYPES = [(torch.float32, torch.complex64), (torch.float64, torch.complex128)]
SUM_MAX = 0.95
FFT_VS_STEP = 1e-9     # float64 FFT output vs recurrence: kernel error <= 1e-12 (ddesys.contour.TOLERANCE)
# fused decode step vs the reference step: the same arithmetic in the same precision, only FMA contraction
# and the order of the readout sum differ; empirical margins
SAME_ARITHMETIC = {torch.float32: 1e-5, torch.float64: 1e-12}
GRADIENT = 1e-9        # fused vs unfused float64 kernel synthesis, through autograd (see check_layer_gradient)
# layer checks: channels H, state N, l_max, batch B, sequence T, prompt lengths P (the interpreter runs
# every (batch, channel) program of every decode step in Python: toy sizes there, same code)
SIZES = {"full": dict(H=8, N=16, l_max=48, B=3, T=200, P=(20, 90)),
         "toy": dict(H=4, N=8, l_max=16, B=2, T=40, P=(8, 30))}


def _row(check, dtype, error, bound, bound_from):
    good = error == error and error <= bound                      # NaN (poison left in place) fails
    return {"kind": "correctness", "check": check, "dtype": str(dtype).replace("torch.", ""), "error": error,
            "bound": bound, "bound_from": bound_from, "status": "pass" if good else "fail"}


def _rel(x, ref):
    x = x.detach().cpu().to(ref.dtype)
    return float((x - ref).abs().max() / ref.abs().max())


def random_modes(C, N2, g):
    """``A`` complex128 ``(C, N2, 3)`` with ``sum_j |A_nj|`` uniform in ``(0, SUM_MAX)``."""
    A = torch.randn(C, N2, 3, dtype=torch.complex128, generator=g)
    scale = SUM_MAX * torch.rand(C, N2, 1, dtype=torch.float64, generator=g)
    return A * (scale / A.abs().sum(-1, keepdim=True))


def transfer_bounds(A, cb, Z, G, u, block_m):
    """Absolute first-order error bounds of the fused kernels in precision ``u`` and of the float64
    reference: ``(forward (C, M), grad_A (C, N2), grad_cb (C, N2))``, all complex128 inputs (the kernel's
    own inputs, exactly), ``Z`` from :func:`ddesys.transfer.contour_points`, ``G`` ``(C, M)``."""
    N2, M = A.shape[-2], Z.shape[-1]
    den = 1 - A @ Z                                                   # (C, N2, M)
    inv = (1 / den).abs()                                             # (C, N2, M)
    kappa = (1 + A.abs().sum(-1))[..., None] / den.abs()              # (C, N2, M)
    t_f = cb.abs()[..., None] * inv                                   # |cb inv|
    t_cb = G.abs()[:, None, :] * inv                                  # |G conj(inv)|
    t_a = G.abs()[:, None, :] * cb.abs()[..., None] * inv**2          # |G conj(cb inv^2 z)|, |z| = 1
    n_bwd = math.ceil(M / block_m) + math.log2(block_m)
    r2 = math.sqrt(2)

    def one(u_, n_fwd, n_b):
        e_z = 1 + 16 * U64 / u_
        c_d = 12 + 1.5 * e_z
        fwd = u_ * ((c_d * kappa + 8 + r2 * n_fwd) * t_f).sum(-2)    # (C, M)
        gcb = u_ * ((c_d * kappa + 9 + r2 * n_b) * t_cb).sum(-1)      # (C, N2)
        ga = u_ * ((2 * c_d * kappa + 20 + e_z + r2 * n_b) * t_a).sum(-1)   # (C, N2)
        return fwd, ga, gcb

    kern, ref = one(u, N2, n_bwd), one(U64, N2, M)
    return tuple(a + b for a, b in zip(kern, ref))


BOUND_TEXT = "first-order rounding analysis of the kernel and of the float64 reference, from the data"


def check_transfer(device, g, emit):
    """Forward (into a NaN-poisoned ``out``) and backward of the transfer kernels, float32 and float64,
    against the float64 array-API reference and its autograd. ``N2 = 20``: the backward covers a full and
    a partial block of modes; ``M = 512`` several blocks of frequencies."""
    from ddesys.transfer import sample_points, contour_points
    from ddesys.gpu import transfer as gt
    C, N2, M = 6, 20, 512
    for rdt, cdt in DTYPES:
        k = torch.randint(1, M // 2, (C,), generator=g)
        A = random_modes(C, N2, g).to(cdt)
        cb = torch.randn(C, N2, dtype=cdt, generator=g)
        A64 = A.to(torch.complex128).requires_grad_()                 # the kernel's inputs, exactly
        cb64 = cb.to(torch.complex128).requires_grad_()
        Z = contour_points(k, M, torch.complex128)                    # (C, 3, M)
        ref = sample_points(A64, cb64, Z)                             # (C, M)
        G = torch.randn(C, M, dtype=torch.complex128, generator=g)
        b_fwd, b_ga, b_gcb = transfer_bounds(A64.detach(), cb64.detach(), Z, G, U[rdt], gt.BWD_BLOCK_M)
        refd = ref.detach()
        poison = torch.full((C, M), complex(float("nan"), float("nan")), dtype=cdt, device=device)
        S = gt.sample_forward(A.to(device), cb.to(device), k.to(device), M, out=poison)
        emit(_row("transfer forward", rdt, _rel(S, refd), float(b_fwd.max() / refd.abs().max()), BOUND_TEXT))
        gA_ref, gcb_ref = torch.autograd.grad((ref * G.conj()).real.sum(), (A64, cb64))
        gA, gcb = gt.sample_backward(A.to(device), cb.to(device), k.to(device), M, G.to(cdt).to(device))
        emit(_row("transfer backward, grad A", rdt, _rel(gA, gA_ref),
                  float(b_ga.max() / gA_ref.abs().max()), BOUND_TEXT))
        emit(_row("transfer backward, grad cb", rdt, _rel(gcb, gcb_ref),
                  float(b_gcb.max() / gcb_ref.abs().max()), BOUND_TEXT))


def check_decode(device, g, seed, emit, H, N, l_max, B, T, **_):
    """Fused decode step vs the reference step over a sequence that wraps the ring buffer, from a
    NaN-poisoned buffer (slots before ``t = 0`` must be masked, never read)."""
    from ddesys import nn as dnn
    for rdt, _ in DTYPES:
        layer = dnn.DS4D(H, N, l_max=l_max, seed=seed).to(device=device, dtype=rdt)
        x = torch.randn(B, T, H, dtype=rdt, generator=g).to(device)
        outs = {}
        for mode in ("fused", "reference"):
            with reference_path(mode == "reference"):
                cache = layer.allocate_inference_cache(B, dtype=rdt)
                cache.buf.fill_(complex(float("nan"), float("nan")))
                ys = torch.stack([layer.step(x[:, t], cache) for t in range(T)], 1)        # (B, T, H)
            outs[mode] = (ys, cache.buf.clone(), cache.n_slots)
        assert outs["fused"][2] < T, "the sequence must wrap the ring buffer"
        how = "same arithmetic as the reference step in the same precision (FMA, summation order); empirical"
        emit(_row("decode step output (wraps buffer)", rdt, _rel(outs["fused"][0], outs["reference"][0].cpu()),
                  SAME_ARITHMETIC[rdt], how))
        emit(_row("decode ring buffer", rdt, _rel(outs["fused"][1], outs["reference"][1].cpu()),
                  SAME_ARITHMETIC[rdt], how))


def check_layer_gradient(device, g, seed, emit, H, N, l_max, B, **_):
    """DS4D parameter gradients through autograd, fused kernels vs the unfused reference (float64 layer).
    Both synthesize the kernel from the same parameters; they differ by the sampled transfer function's
    rounding amplified by the contour restoration, which the layer's contour keeps below 1e-12
    (``ddesys.contour.TOLERANCE``) relative; the bound allows 1000 times that."""
    from ddesys import nn as dnn
    layer = dnn.DS4D(H, N, l_max=l_max, seed=seed).double().to(device)
    x = torch.randn(B, l_max, H, dtype=torch.float64, generator=g).to(device)
    w = torch.randn(B, l_max, H, dtype=torch.float64, generator=g).to(device)
    grads = {}
    for mode in ("fused", "reference"):
        with reference_path(mode == "reference"):
            layer.zero_grad(set_to_none=True)
            (layer(x) * w).sum().backward()
        grads[mode] = {n: p.grad.detach().cpu().clone() for n, p in layer.named_parameters()}
    err = max(_rel(grads["fused"][n], grads["reference"][n]) for n in grads["reference"]
              if grads["reference"][n].abs().max() > 0)
    emit(_row("DS4D parameter gradients, fused vs unfused", torch.float64, err, GRADIENT,
              "1000 x the contour's float64 kernel tolerance (1e-12)"))


def check_prefill_then_step(device, g, seed, emit, H, N, l_max, B, P, **_):
    """``prefill`` a prompt on the device, then ``step`` the rest (fused decode), against the FFT output
    of the whole sequence; prompts shorter and longer than the ring buffer (DS4D: ``R <= l_max``)."""
    from ddesys import nn as dnn
    T = P[-1] + P[0]
    x = torch.randn(B, T, H, dtype=torch.float64, generator=g).to(device)
    for layer in (dnn.DS4D(H, N, l_max=l_max, seed=seed), dnn.S4D(H, N, seed=seed)):
        layer = layer.double().to(device)
        with torch.no_grad():
            y_ref = layer(x).cpu()                                                      # (B, T, H)
        for p in P:
            cache = layer.allocate_inference_cache(B, dtype=torch.float64)
            y0 = layer.prefill(x[:, :p], cache)                                         # (B, p, H)
            ys = torch.stack([layer.step(x[:, t], cache) for t in range(p, T)], 1)      # (B, T - p, H)
            err = _rel(torch.cat([y0, ys], 1), y_ref)
            emit(_row(f"{type(layer).__name__} prefill({p}) then step vs FFT", torch.float64, err, FFT_VS_STEP,
                      "FFT kernel error <= 1e-12 (contour tolerance) with a 1000x margin"))


def check_cupy(device, g, emit):
    """``ddesys`` on CuPy arrays (DLPack to the same Triton kernel) vs the float64 reference, on CUDA when
    CuPy is installed; otherwise no row (the preflight lists CuPy's presence)."""
    if device != "cuda":
        return
    try:
        import cupy
    except ImportError:
        return
    from ddesys.transfer import sample_points, contour_points, sample_transfer
    from ddesys.gpu import transfer as gt
    C, N2, M = 6, 16, 512
    A = random_modes(C, N2, g)
    cb = torch.randn(C, N2, dtype=torch.complex128, generator=g)
    k = torch.randint(1, M // 2, (C,), generator=g)
    Z = contour_points(k, M, torch.complex128)
    ref = sample_points(A, cb, Z)
    S = sample_transfer(cupy.asarray(A.numpy()), cupy.asarray(cb.numpy()), cupy.asarray(k.numpy()), M)
    b = transfer_bounds(A, cb, Z, torch.zeros(C, M, dtype=torch.complex128), U64, gt.BWD_BLOCK_M)[0]
    emit(_row("CuPy route (DLPack, transfer forward)", torch.float64, _rel(torch.from_numpy(cupy.asnumpy(S)), ref),
              float(b.max() / ref.abs().max()), BOUND_TEXT))


def run_all(device, seed, report, toy=False):
    """Every correctness check, each guarded (one that raises is an error row; the others still run).
    ``toy``: the interpreter's sizes (:data:`SIZES`)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    sz = SIZES["toy" if toy else "full"]
    report.guarded("transfer kernels", check_transfer, device, g, report.add)
    report.guarded("decode step", check_decode, device, g, seed, report.add, **sz)
    report.guarded("DS4D gradients", check_layer_gradient, device, g, seed, report.add, **sz)
    report.guarded("prefill then step", check_prefill_then_step, device, g, seed, report.add, **sz)
    report.guarded("CuPy route", check_cupy, device, g, report.add)
