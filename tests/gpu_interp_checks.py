"""Run under TRITON_INTERPRET=1 DDESYS_GPU_INTERPRET=1 (see test_gpu.py): the Triton kernels on CPU
tensors against the reference paths, and the layer's kernel, decode and FFT output through them against
the independent references (``ddesys.verification.reference``; this script's folder is on ``sys.path`` for
``nn_helpers``). Prints one JSON
line of measured errors."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
import torch  # noqa: E402

from ddesys import gpu  # noqa: E402
from ddesys.transfer import sample_points, contour_points  # noqa: E402
from ddesys.gpu import transfer as gt  # noqa: E402

out = {}
g = torch.Generator().manual_seed(0)
C, N2, M = 3, 5, 48
k = torch.tensor([1, 7, 30])
for name, rdt, cdt in (("f32", torch.float32, torch.complex64), ("f64", torch.float64, torch.complex128)):
    A = (0.3 * torch.randn(C, N2, 3, dtype=cdt, generator=g))
    cb = torch.randn(C, N2, dtype=cdt, generator=g)
    A64, cb64 = A.to(torch.complex128).requires_grad_(), cb.to(torch.complex128).requires_grad_()
    ref = sample_points(A64, cb64, contour_points(k, M, torch.complex128))           # reference, float64
    refd = ref.detach()
    S = gt.sample_forward(A, cb, k, M)
    out[f"fwd_{name}"] = float((S.to(torch.complex128) - refd).abs().max() / refd.abs().max())
    G = torch.randn(C, M, dtype=torch.complex128, generator=g)
    gA_ref, gcb_ref = torch.autograd.grad((ref * G.conj()).real.sum(), (A64, cb64))
    gA, gcb = gt.sample_backward(A, cb, k, M, G.to(cdt))
    out[f"bwd_A_{name}"] = float((gA.to(torch.complex128) - gA_ref).abs().max() / gA_ref.abs().max())
    out[f"bwd_cb_{name}"] = float((gcb.to(torch.complex128) - gcb_ref).abs().max() / gcb_ref.abs().max())

# backward over several blocks of modes (N2 = 20: a full block of 16 and a partial one) and a partial
# block of frequencies (M = 40), float64
A = 0.1 * torch.randn(2, 20, 3, dtype=torch.complex128, generator=g)
cb = torch.randn(2, 20, dtype=torch.complex128, generator=g)
k2 = torch.tensor([3, 17])
A64, cb64 = A.clone().requires_grad_(), cb.clone().requires_grad_()
ref = sample_points(A64, cb64, contour_points(k2, 40, torch.complex128))
G = torch.randn(2, 40, dtype=torch.complex128, generator=g)
gA_ref, gcb_ref = torch.autograd.grad((ref * G.conj()).real.sum(), (A64, cb64))
gA, gcb = gt.sample_backward(A, cb, k2, 40, G)
out["bwd_blocks_f64"] = max(float((gA - gA_ref).abs().max() / gA_ref.abs().max()),
                            float((gcb - gcb_ref).abs().max() / gcb_ref.abs().max()))

# the CuPy route (ddesys on CuPy arrays -> DLPack -> the same Triton kernel -> DLPack back), with NumPy
# standing in for CuPy: CuPy cannot allocate without a GPU, and both speak DLPack
import types  # noqa: E402

import numpy as np  # noqa: E402

from ddesys import transfer as dtr  # noqa: E402

sys.modules["cupy"] = types.SimpleNamespace(from_dlpack=np.from_dlpack)
rng = np.random.default_rng(1)
A_np = 0.3 * (rng.standard_normal((2, 3, N2, 3)) + 1j * rng.standard_normal((2, 3, N2, 3)))
cb_np = rng.standard_normal((2, 3, N2)) + 1j * rng.standard_normal((2, 3, N2))
k_np = rng.integers(1, M // 2, (2, 3))
S_np = dtr._cupy_via_gpu(A_np, cb_np, k_np, M)
assert isinstance(S_np, np.ndarray) and S_np.shape == (2, 3, M), (type(S_np), getattr(S_np, "shape", None))
ref = sample_points(torch.from_numpy(A_np.reshape(6, N2, 3)), torch.from_numpy(cb_np.reshape(6, N2)),
                    contour_points(torch.from_numpy(k_np.reshape(6)), M, torch.complex128)).numpy().reshape(2, 3, M)
out["cupy_route"] = float(np.abs(S_np - ref).max() / np.abs(ref).max())
del sys.modules["cupy"]

# the full layer: kernel through the Triton path (dispatch) vs the reference path
from ddesys import nn as dnn  # noqa: E402

from nn_helpers import bhl, spec_discrete  # noqa: E402
from ddesys.verification.reference import brute_force, impulse_response, rel_err, rel_max  # noqa: E402

layer = dnn.DS4D(4, 8, l_max=64, seed=0).double()
lam, mu, bbar, c, delay, d = spec_discrete(layer)
assert gpu.usable_for(layer.D)
K_gpu = layer.kernel(64, M=256).detach()   # M = 4L: restoration amplifies FFT rounding less
os.environ["DDESYS_REFERENCE"] = "1"
K_ref = layer.kernel(64, M=256).detach()
out["layer_kernel"] = float((K_gpu - K_ref).abs().max() / K_ref.abs().max())
out["layer_kernel_oracle"] = rel_err(K_gpu, impulse_response(lam, mu, bbar, c, delay, 64))

# decode kernel over a sequence that wraps the ring buffer, against the reference step
x = torch.randn(2, 150, 4, dtype=torch.float64, generator=g)
outs = {}
for mode in ("gpu", "ref"):
    os.environ["DDESYS_REFERENCE"] = "1" if mode == "ref" else "0"
    cache = layer.allocate_inference_cache(2, dtype=torch.float64)
    ys = torch.stack([layer.step(x[:, t], cache) for t in range(150)], 1)
    outs[mode] = (ys, cache.buf.clone(), cache.n_slots)
assert outs["gpu"][2] < 150, "sequence must wrap the ring buffer"
out["decode_y"] = float((outs["gpu"][0] - outs["ref"][0]).abs().max() / outs["ref"][0].abs().max())
out["decode_cache"] = float((outs["gpu"][1] - outs["ref"][1]).abs().max() / outs["ref"][1].abs().max())
y_oracle = brute_force(lam, mu, bbar, c, delay, d, bhl(x)).reshape(2, 4, 150)
out["decode_oracle"] = rel_max(bhl(outs["gpu"][0]), y_oracle)
os.environ["DDESYS_REFERENCE"] = "0"
out["fft_oracle"] = rel_max(bhl(layer(x)), y_oracle)        # the FFT path, kernel through the Triton path
print(json.dumps(out))
sys.exit(0)
