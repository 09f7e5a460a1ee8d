"""gpu/ launchers without a GPU: the device each launch targets, argument validation, the CuPy route's
fallback. The kernels themselves are checked under the interpreter in test_gpu.py."""
import ast
import contextlib
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from ddesys import gpu  # noqa: E402
from ddesys import transfer as dtr  # noqa: E402
from ddesys.gpu import decode as gd  # noqa: E402
from ddesys.gpu import transfer as gt  # noqa: E402

C, N2, M = 3, 4, 16


def _inputs(cdt=torch.complex64):
    A = torch.zeros(C, N2, 3, dtype=cdt)
    return A, torch.zeros(C, N2, dtype=cdt), torch.ones(C, dtype=torch.int64)


def _decode_args(B=2, R=5, H=C):
    p = torch.zeros(H, N2, dtype=torch.complex64)
    return (torch.zeros(B, R, H, N2, dtype=torch.complex64), torch.zeros(B, H), p, p, p, p, p, torch.zeros(H),
            torch.ones(H, dtype=torch.int64), 3)


# ---------------------------------------------------------------- item: launch on the data's CUDA device
def test_device_guard_makes_the_tensors_cuda_device_current(monkeypatch):
    """Triton launches on the current CUDA device; for a CUDA tensor the guard switches to the tensor's
    device (torch.cuda.device, faked here: there is no GPU) and switches back; for a CPU tensor it does
    nothing (torch.cuda is never touched)."""
    log = []

    class FakeCudaDevice:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            log.append(("enter", self.device))

        def __exit__(self, *exc):
            log.append(("exit", self.device))

    monkeypatch.setattr(torch.cuda, "device", FakeCudaDevice)
    on_gpu1 = types.SimpleNamespace(is_cuda=True, device=torch.device("cuda", 1))
    with gpu.device_guard(on_gpu1):
        assert log == [("enter", torch.device("cuda", 1))]
    assert log[-1] == ("exit", torch.device("cuda", 1))
    with gpu.device_guard(torch.zeros(1)):
        pass
    assert len(log) == 2


def test_every_launcher_launches_inside_the_guard_of_its_data(monkeypatch):
    """Each launcher enters ``device_guard`` of the tensor it works on, and launches the kernel inside it."""
    active = []
    launched = []

    @contextlib.contextmanager
    def guard(t):
        active.append(t)
        yield
        active.pop()

    class FakeKernel:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            def launch(*args, **meta):
                assert active, f"{self.name} launched outside device_guard"
                launched.append((self.name, active[-1]))
            return launch

    for mod in (gt, gd):
        monkeypatch.setattr(mod, "device_guard", guard)
    for mod, name in ((gt, "_fwd_kernel"), (gt, "_bwd_kernel"), (gd, "_decode_kernel")):
        monkeypatch.setattr(mod, name, FakeKernel(name))
    A, cb, k = _inputs()
    gt.sample_forward(A, cb, k, M)
    gt.sample_backward(A, cb, k, M, torch.zeros(C, M, dtype=A.dtype))
    args = _decode_args()
    gd.triton_step(*args)
    assert [n for n, _ in launched] == ["_fwd_kernel", "_bwd_kernel", "_decode_kernel"]
    assert launched[0][1] is A and launched[1][1] is A and launched[2][1] is args[0]


def test_no_kernel_launch_outside_a_device_guard_in_gpu_sources():
    """Lint over gpu/*.py: every ``kernel[grid](...)`` launch sits in a ``with device_guard(...)`` block,
    so a new launcher cannot forget it."""
    for path in sorted(Path(gpu.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        guarded = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.With) and any(
                    isinstance(i.context_expr, ast.Call) and getattr(i.context_expr.func, "id", "") == "device_guard"
                    for i in node.items):
                guarded |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and \
                    isinstance(node.func.slice, ast.Name) and node.func.slice.id == "grid":
                assert id(node) in guarded, f"{path.name}:{node.lineno}: kernel launch outside device_guard"


# ---------------------------------------------------------------- item: out= and argument validation
@pytest.mark.parametrize("bad, err, match", [
    (lambda: torch.empty(C, M, dtype=torch.complex128), TypeError, "dtype"),
    (lambda: torch.empty(C, M + 1, dtype=torch.complex64), ValueError, "shape"),
    (lambda: torch.empty(M, C, dtype=torch.complex64).T, ValueError, "contiguous"),
    (lambda: torch.empty(C, M, dtype=torch.complex64, device="meta"), ValueError, "meta"),
    (lambda: np.zeros((C, M), np.complex64), TypeError, "torch.Tensor"),
])
def test_forward_out_is_validated(bad, err, match):
    A, cb, k = _inputs()
    with pytest.raises(err, match=match):
        gt.sample_forward(A, cb, k, M, out=bad())


def test_transfer_inputs_are_validated():
    A, cb, k = _inputs()
    with pytest.raises(ValueError, match="k is on meta"):
        gt.forward_launch(A, cb, k.to("meta"), M)
    with pytest.raises(ValueError, match="cb must be"):
        gt.forward_launch(A, cb.to(torch.complex128), k, M)
    with pytest.raises(TypeError, match="complex"):
        gt.forward_launch(A.real, cb, k, M)
    with pytest.raises(ValueError, match="G must have shape"):
        gt.backward_launch(A, cb, k, M, torch.zeros(C, M + 1, dtype=A.dtype))


@pytest.mark.parametrize("i, bad, err, match", [
    (0, lambda b: b.transpose(1, 2).contiguous().transpose(1, 2), ValueError, "contiguous"),
    (0, lambda b: b.real.contiguous(), TypeError, "complex64/complex128"),
    (1, lambda x: x[:, :-1], ValueError, "x_t must have shape"),
    (2, lambda p: p.to("meta"), ValueError, "lam is on meta"),
    (8, lambda k: k.double(), TypeError, "integer"),
])
def test_decode_arguments_are_validated(i, bad, err, match):
    args = list(_decode_args())
    args[i] = bad(args[i])
    with pytest.raises(err, match=match):
        gd.triton_step(*args)


# ---------------------------------------------------------------- item: CuPy route with a CPU-only torch
def _cupy_like(monkeypatch):
    """NumPy arrays stand in for CuPy (CuPy cannot allocate without a GPU; both speak DLPack)."""
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(from_dlpack=np.from_dlpack))
    rng = np.random.default_rng(0)
    return 0.1 * rng.standard_normal((C, N2, 3)) + 0j, rng.standard_normal((C, N2)) + 0j, np.ones(C, np.int64)


def test_cupy_route_never_hands_arrays_to_a_cpu_only_torch(monkeypatch):
    """No CUDA in torch (this machine) and no interpreter requested: the route must decline before any
    DLPack exchange (a CuPy array would make a CPU-only torch raise)."""
    A, cb, k = _cupy_like(monkeypatch)
    for var in ("TRITON_INTERPRET", "DDESYS_GPU_INTERPRET", "DDESYS_REFERENCE"):
        monkeypatch.delenv(var, raising=False)

    def refuse(x):
        raise AssertionError("torch.from_dlpack called before the fused path was found usable")
    monkeypatch.setattr(torch, "from_dlpack", refuse)
    assert not gpu.cuda_usable()
    assert dtr._cupy_via_gpu(A, cb, k, M) is None


def test_cupy_route_falls_back_when_torch_refuses_the_memory(monkeypatch):
    """Fused path usable, but torch cannot import the arrays (e.g. another CUDA runtime): ``None``, so
    ``sample_transfer`` takes the reference path instead of raising."""
    A, cb, k = _cupy_like(monkeypatch)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("DDESYS_GPU_INTERPRET", "1")
    monkeypatch.delenv("DDESYS_REFERENCE", raising=False)
    assert gpu.cuda_usable()

    def refuse(x):
        raise RuntimeError("from_dlpack: unsupported device type")
    monkeypatch.setattr(torch, "from_dlpack", refuse)
    assert dtr._cupy_via_gpu(A, cb, k, M) is None
    monkeypatch.setenv("DDESYS_REFERENCE", "1")
    from ddesys.backend import REFERENCE, choose
    assert gpu.cuda_usable() and choose(torch.zeros(1)) == REFERENCE     # capable, but the switch decides
