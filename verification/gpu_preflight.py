"""Preflight of the GPU check: imports, versions, the array namespace ``ddesys`` will use, the device and
one tiny fused launch, before anything is measured. A problem stops the check with a message that says
what to do, instead of a wrong first row (``ddesys`` without ``array-api-compat`` silently takes its
NumPy fallback) or a crash minutes in.
"""
from __future__ import annotations

import importlib
import platform
import re

# (import name, pip name, minimum version, why)
REQUIRED = [
    ("numpy", "numpy", "1.24", "ddesys"),
    ("scipy", "scipy", "1.10", "ddesys"),
    ("array_api_compat", "array-api-compat", "1.6",
     "ddesys's array namespace; without it ddesys silently falls back to NumPy"),
    ("torch", "torch", "2.1", "nn layers"),
    ("triton", "triton", "3.0", "the fused kernels"),
]
OPTIONAL = [("numba", "the CPU fast paths (not used on CUDA)"), ("cupy", "the CuPy route row"),
            ("tqdm", "experiments.efficiency"), ("matplotlib", "experiments.efficiency's figure")]
CARRY_HINT = ("it is pure Python: carry its wheel to the GPU machine (gpu_wheels/, see README section "
              "'GPU kernels') and install it with: pip install --no-index --no-deps --target /tmp/ddesys_deps "
              "gpu_wheels/*.whl && export PYTHONPATH=/tmp/ddesys_deps")


def _version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", str(v).split("+")[0])[:3])


def preflight(interpret=False):
    """``{"ok": bool, "problems": [str], "info": {name: value}}``. ``interpret``: the CPU smoke run
    (Triton's interpreter) instead of a CUDA device."""
    problems, info = [], {"python": platform.python_version()}
    for mod, pip_name, minimum, why in REQUIRED:
        try:
            m = importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 - any import failure is the message
            hint = CARRY_HINT if mod == "array_api_compat" else f"pip install '{pip_name}>={minimum}'"
            problems.append(f"{pip_name} is not importable ({type(e).__name__}: {e}); needed for {why}; {hint}")
            continue
        ver = getattr(m, "__version__", "?")
        info[pip_name] = ver
        if _version_tuple(ver) < _version_tuple(minimum):
            problems.append(f"{pip_name} {ver} is older than the required {minimum} ({why})")
    for mod, why in OPTIONAL:
        try:
            info[mod] = getattr(importlib.import_module(mod), "__version__", "?")
        except Exception as e:  # noqa: BLE001
            info[mod] = f"absent ({type(e).__name__}; only {why})"
    if problems:                                       # the checks below need the required packages
        return {"ok": False, "problems": problems, "info": info}

    import torch

    from ddesys import gpu
    from ddesys.backend import TRITON, choose
    try:
        import array_api_compat
        compat_ok = array_api_compat.is_torch_namespace(array_api_compat.array_namespace(torch.zeros(1)))
    except ImportError:
        compat_ok = False
    if not compat_ok:
        problems.append("ddesys does not use array-api-compat's torch namespace (NumPy fallback): " + CARRY_HINT)
    info["torch CUDA build"] = torch.version.cuda
    if interpret:
        info["device"] = "Triton interpreter (CPU)"
        device = "cpu"
    elif not torch.cuda.is_available():
        problems.append(f"torch {torch.__version__} sees no CUDA device (CUDA build: {torch.version.cuda}); "
                        "for the CPU smoke run use --interpret")
        return {"ok": False, "problems": problems, "info": info}
    else:
        device = "cuda"
        p = torch.cuda.get_device_properties(0)
        info.update({"device": torch.cuda.get_device_name(0), "capability": f"sm_{p.major}{p.minor}",
                     "device count": torch.cuda.device_count(), "memory GiB": round(p.total_memory / 2**30, 1)})
        if p.major < 8:
            info["note"] = "compute capability below 8.0: the kernels were compiled ahead of time for sm_80/sm_90 only"
    x = torch.zeros(1, device=device)
    if not gpu.triton_available():
        problems.append("triton does not import (gpu.triton_available() is False)")
    elif choose(x) != TRITON:
        problems.append("the fused kernels are not selected for this device (ddesys.backend.choose): is "
                        "DDESYS_REFERENCE set, or TRITON_INTERPRET/DDESYS_GPU_INTERPRET missing for --interpret?")
    else:
        problems += _tiny_launch(device)
    return {"ok": not problems, "problems": problems, "info": info}


def _tiny_launch(device):
    """Compile and run the forward kernel once on 1 channel, 1 mode, 4 frequencies (a Triton or driver
    failure shows here, clearly labelled)."""
    import torch

    from ddesys.gpu import transfer as gt
    try:
        A = torch.zeros(1, 1, 3, dtype=torch.complex128, device=device)
        cb = torch.ones(1, 1, dtype=torch.complex128, device=device)
        S = gt.sample_forward(A, cb, torch.ones(1, dtype=torch.int64, device=device), 4)
        if not bool((S == 1).all()):                   # den = 1: S = cb = 1 exactly
            return [f"tiny fused launch returned {S.cpu().tolist()}, expected all 1"]
    except Exception as e:  # noqa: BLE001
        return [f"tiny fused launch failed ({type(e).__name__}: {e}): Triton cannot compile or run here"]
    return []


def message(result):
    """The text printed when the preflight stops the check."""
    return "\n".join(["PREFLIGHT FAILED: the GPU check did not start."] + [f"  * {p}" for p in result["problems"]])
