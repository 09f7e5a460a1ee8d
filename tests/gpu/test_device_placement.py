"""Device placement without a GPU: every layer method and every kernel-synthesis function run on PyTorch's
``meta`` device (shapes and dtypes, no data), under a dispatch mode that flags every CPU tensor an op
makes or reads.

On CUDA, a tensor built without ``device=`` lands on the CPU: either it meets CUDA tensors and the op
raises (``DS4D.prefill``'s ``torch.full``, ``S4D.prefill``'s ``torch.arange`` did), or it is copied to the
GPU, a blocking host-to-device copy (``arange`` in ``synthesize_kernel`` did, every training forward).
On ``meta`` both show as a CPU tensor inside the computation. 0-d CPU tensors are allowed: torch treats
them as scalars on any device (no copy, no error).
"""
import inspect

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ddesys import nn as dnn
from ddesys import recurrence
from ddesys import transfer as tr

META = torch.device("meta")
SCALAR = 5        # what a host read (``int(k.max())``) returns on meta: the largest delay, in steps


class CpuTensorGuard(TorchDispatchMode):
    """Records every aten op that makes or reads a CPU tensor of dimension >= 1. Host reads of a meta
    scalar (``int(t)``, ``t.item()``) have no value to return; they get ``SCALAR`` (``5`` for integers,
    ``0.5`` for floats), so code that sizes a buffer from a delay still runs."""

    def __init__(self):
        super().__init__()
        self.offenders = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            t = args[0]
            return 0.5 if t.is_floating_point() else (True if t.dtype == torch.bool else SCALAR)
        out = func(*args, **kwargs)
        if any(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0
               for t in tree_leaves((args, kwargs, out))):
            self.offenders.append(str(func))
        return out


def _run_clean(fn):
    """``fn()`` under the guard; fails naming the ops that touched a CPU tensor."""
    with CpuTensorGuard() as guard:
        out = fn()
    assert not guard.offenders, f"CPU tensors inside a meta computation (missing device=?): {guard.offenders}"
    return out


def _assert_meta(*tensors):
    for t in tree_leaves(tensors):
        if isinstance(t, torch.Tensor):
            assert t.device == META, t.device


def _layer_calls(layer, x):
    """name -> callable for every public method of ``layer`` (x: meta ``(B, L, H)``)."""
    B, L, _ = x.shape

    def step():
        cache = layer.allocate_inference_cache(B)
        _assert_meta(cache.buf if hasattr(cache, "buf") else cache.h)
        assert cache.batch_size == B and cache.nbytes > 0
        return [layer.step(x[:, t], cache) for t in range(3)]

    def prefill_then_step():
        cache = layer.allocate_inference_cache(B, dtype=torch.float64)
        y = layer.prefill(x.double(), cache)
        y2 = layer.prefill(x[:, :3].double(), cache)             # from a used cache (nn.history)
        _assert_meta(cache.buf if hasattr(cache, "buf") else cache.h)
        return y, y2, layer.step(x[:, 0].double(), cache)

    def forward():
        _, state = layer(x, return_state=True)                 # a carried state, then from it
        y, new = layer(x[:, :3], state=state, return_state=True)
        _assert_meta(new.buf if hasattr(new, "buf") else new.h)
        return layer(x), layer(x, mode="recurrent"), y

    calls = {"forward": forward, "kernel": lambda: layer.kernel(L),
             "discrete": lambda: layer.discrete(), "allocate_inference_cache": step, "step": step,
             "prefill": prefill_then_step, "memo_key": lambda: layer.memo_key(),
             "setup_step": lambda: layer.setup_step()}
    def as_prompt():
        with layer.as_prompt():
            return layer(x)

    calls.update({                                            # the decoding interface used by engines and clocks
        "bind_cache": lambda: layer.bind_cache(layer.allocate_inference_cache(B)),
        "decode_constants": lambda: tuple(layer.decode_constants(torch.float32)),
        "step_constants": lambda: tuple(layer.step_constants(torch.float32)),
        "delay_form": lambda: layer.delay_form(), "branches": lambda: layer.branches() and None,
        "check_decodable": lambda: layer.check_decodable(), "clear_decode_memo": lambda: layer.clear_decode_memo(),
        "as_prompt": as_prompt, "prepare_decode": lambda: layer.prepare_decode(B, None, None),
        "prepare": lambda: layer.prepare(L), "time_kernel": lambda: layer.time_kernel(L),
        "ssm_forward": lambda: layer.ssm_forward(x.transpose(-1, -2)),
        "chunk_forward": lambda: layer.chunk_forward(x.transpose(-1, -2))})
    if isinstance(layer, dnn.DS4D):
        calls["branch_constants"] = lambda: layer.branch_constants(torch.float32)
        calls["branch_kernel"] = lambda: layer.branch_kernel(L)     # None without a branch
        calls["adopt_range"] = lambda: layer.adopt_range(layer.s_max, layer.l_max)
        calls["contour"] = lambda: layer.contour(L)           # NumPy only: returns (M, rho)
        calls["compiled_step"] = lambda: layer.compiled_step(layer.allocate_inference_cache(B))   # None off the CPU
        calls["tap_delay"] = (lambda: layer.tap_delay()) if layer.has_tap else \
            (lambda: pytest.raises(AttributeError, layer.tap_delay) and None)
    return calls


# to_ddesys hands the layer to the NumPy analysis classes: a host copy by design (no data on meta)
HOST_BY_DESIGN = {"to_ddesys"}


@pytest.mark.parametrize("cls, kw", [(dnn.DS4D, {}), (dnn.DS4D, {"tap": True, "tap_width": 3.0}), (dnn.S4D, {})])
def test_every_public_layer_method_stays_on_the_layers_device(cls, kw):
    layer = (cls(4, 8, l_max=16, seed=0, **kw) if cls is dnn.DS4D else cls(4, 8, seed=0)).to(META)
    x = torch.randn(2, 12, 4, device=META)
    calls = _layer_calls(layer, x)
    own = {n for klass in cls.__mro__ if klass.__module__.startswith("ddesys.nn.")   # the project's classes
           for n, v in vars(klass).items() if not n.startswith("_") and inspect.isfunction(v)}
    assert own - HOST_BY_DESIGN == set(calls), "a public method without a device-placement check"
    for name, fn in calls.items():
        _assert_meta(_run_clean(fn))


def test_bidirectional_layers_stay_on_device():
    for layer in (dnn.DS4D(4, 8, l_max=16, bidirectional=True, seed=0), dnn.S4D(4, 8, bidirectional=True, seed=0)):
        layer = layer.to(META)
        _assert_meta(_run_clean(lambda: layer(torch.randn(2, 12, 4, device=META))))


def test_training_backward_stays_on_device():
    """The reference (unfused) training path, forward and backward, as it runs on CUDA without Triton."""
    for layer in (dnn.DS4D(4, 8, l_max=16, seed=0), dnn.DS4D(4, 8, l_max=16, seed=0, tap=True, tap_width=3.0),
                  dnn.S4D(4, 8, seed=0)):
        layer = layer.to(META)
        x = torch.randn(2, 12, 4, device=META)
        grads = _run_clean(lambda: torch.autograd.grad(layer(x).square().sum(), list(layer.parameters())))
        _assert_meta(grads)


@pytest.mark.parametrize("cdt", [torch.complex64, torch.complex128])
def test_kernel_synthesis_builds_nothing_on_the_host(cdt):
    """``synthesize_kernel`` (both outputs), ``vandermonde_kernel``, ``contour_points``, ``sample_transfer``
    (forward and backward) and the vector recurrence build their index vectors on the data's device."""
    rdt = torch.float32 if cdt == torch.complex64 else torch.float64
    C, N2, L, M = 3, 4, 10, 32
    lam, mu, cb = (torch.zeros(C, N2, dtype=cdt, device=META) for _ in range(3))
    k = torch.zeros(C, dtype=torch.int64, device=META)
    alpha, rho = torch.zeros(C, dtype=rdt, device=META), torch.zeros(C, dtype=rdt, device=META)
    _assert_meta(_run_clean(lambda: tr.synthesize_kernel(lam, mu, cb, k, alpha, L, M, rho)))
    _assert_meta(_run_clean(lambda: tr.synthesize_kernel(lam, mu, cb, k, alpha, L, M, rho, per_mode=True)))
    _assert_meta(_run_clean(lambda: tr.vandermonde_kernel(lam, cb, L)))
    _assert_meta(_run_clean(lambda: tr.contour_points(k, M, cdt)))
    A = torch.zeros(C, N2, 3, dtype=cdt, device=META, requires_grad=True)
    cbg = cb.clone().requires_grad_()
    _assert_meta(_run_clean(lambda: torch.autograd.grad(tr.sample_transfer(A, cbg, k, M).abs().sum(), (A, cbg))))
    x = torch.zeros(C, L, dtype=rdt, device=META)
    _assert_meta(_run_clean(lambda: recurrence.run_recurrence(lam, mu, cb, cb, k, alpha, alpha, x)))


def test_the_guard_catches_a_host_tensor():
    """The guard itself: a forgotten ``device=`` is reported (else the tests above prove nothing)."""
    with pytest.raises(AssertionError, match="arange"):
        _run_clean(lambda: torch.zeros(3, device=META) + torch.arange(3).to(META))
    _run_clean(lambda: torch.zeros(3, device=META) + torch.tensor(2.0))      # 0-d: a scalar, allowed
