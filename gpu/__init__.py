"""Fused kernels (Triton) for the DS4D hot paths: transfer construction (forward and backward) and the
decode step. One source serves ``nn`` (torch CUDA tensors) and ``ddesys`` (CuPy arrays via DLPack).

This package is a leaf: it imports nothing of the project. It says what it *can* run
(:func:`usable_for`, :func:`cuda_usable`); :func:`ddesys.backend.choose` decides what runs (it adds the
``DDESYS_REFERENCE=1`` switch). Importing this package never fails: without Triton or a GPU the
capability checks are simply False. Triton itself is imported lazily, by the first question about CUDA
data (or under the interpreter), never by ``import gpu`` or a question about CPU data. On a CPU,
``TRITON_INTERPRET=1`` with ``DDESYS_GPU_INTERPRET=1`` runs the same kernels on CPU tensors (that is how
CI tests them).
"""

from __future__ import annotations

if __name__ != "ddesys.gpu":  # the clone's folder imported as a top-level package
    raise ImportError("this folder is the package ddesys.gpu: import it as `import ddesys.gpu` "
                      "(importing `gpu` from the clone's root loads a second copy under another name)")


import contextlib
import functools
import os

# compile options of every launch, stated rather than left to Triton's changing defaults: fused
# multiply-add on (Triton 3.9's default, slated to flip in 3.10; it only tightens these kernels' rounding)
OPTIONS = {"enable_fp_fusion": True}


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    """Triton imports (it is optional: ``pip install triton``)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure means: not available
        return False
    return True


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _interpret_requested() -> bool:
    return interpreting() and os.environ.get("DDESYS_GPU_INTERPRET", "0") not in ("", "0")


def cuda_usable() -> bool:
    """The fused kernels could run here at all: Triton imports and torch sees a CUDA device (or the
    interpreter is requested). Checked before any foreign array (CuPy) is handed to torch, so a
    CPU-only torch never has to import GPU memory."""
    if not triton_available():
        return False
    if _interpret_requested():
        return True
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def device_guard(tensor):
    """Context for a Triton launch on ``tensor``'s data: Triton launches on the *current* CUDA device,
    so a tensor on ``cuda:1`` while device 0 is current would be read from the wrong device. For CUDA
    tensors this is ``torch.cuda.device(tensor.device)`` (restores the previous current device on exit);
    for anything else (CPU tensors under the interpreter) it does nothing."""
    if getattr(tensor, "is_cuda", False):
        import torch
        return torch.cuda.device(tensor.device)
    return contextlib.nullcontext()


def usable_for(tensor) -> bool:
    """The fused kernels can run on this torch tensor: CUDA data (or any data under ``TRITON_INTERPRET=1``
    when ``DDESYS_GPU_INTERPRET=1`` asks for it in tests) and Triton present. Whether they *do* run is
    :func:`ddesys.backend.choose`'s decision."""
    if not (getattr(tensor, "is_cuda", False) or _interpret_requested()):
        return False                  # decided without importing Triton (CPU data needs no GPU kernel)
    return triton_available()
