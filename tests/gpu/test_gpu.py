"""gpu/: the Triton kernels, run by Triton's interpreter on CPU tensors (the same source runs on CUDA)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")


def test_import_gpu_without_triton_or_cuda_is_harmless():
    from ddesys import gpu
    import torch
    assert gpu.usable_for(torch.zeros(1)) is False          # CPU tensor, no interpreter flag


@pytest.mark.integration
def test_kernels_match_reference_under_interpreter():
    root = str(Path(__file__).parents[2])              # this checkout's packages, not an installed copy
    env = dict(os.environ, TRITON_INTERPRET="1", DDESYS_GPU_INTERPRET="1", DDESYS_REFERENCE="0",
               PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    script = Path(__file__).parents[1] / "gpu_interp_checks.py"
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[2])
    assert res.returncode == 0, res.stderr[-3000:]
    err = json.loads(res.stdout.strip().splitlines()[-1])
    assert err["fwd_f32"] <= 1e-5 and err["fwd_f64"] <= 1e-12, err
    for name in ("bwd_A", "bwd_cb"):
        assert err[f"{name}_f32"] <= 1e-5 and err[f"{name}_f64"] <= 1e-12, err
    assert err["bwd_blocks_f64"] <= 1e-12, err
    assert err["layer_kernel"] <= 1e-12 and err["layer_kernel_oracle"] <= 1e-12, err
    assert err["decode_y"] <= 1e-12 and err["decode_cache"] <= 1e-12, err
    assert err["decode_oracle"] <= 1e-12 and err["fft_oracle"] <= 1e-9, err
    assert err["cupy_route"] <= 1e-12, err


def test_kernels_compile_for_the_gpu_ahead_of_time():
    """The interpreter runs the kernels' Python, not compiled code: build the real CUDA binaries (sm_90,
    both dtypes) with the launchers' exact argument types; no GPU needed."""
    from ddesys.gpu import aot
    rows = aot.compile_all(archs=(90,))
    assert {(r["kernel"], r["dtype"]) for r in rows} == {
        (k, d) for k in ("transfer forward", "transfer backward", "decode step") for d in ("float32", "float64")}
    for r in rows:
        assert r["regs"] > 0 and r["spill_bytes"] == 0 and r["global_scratch_bytes"] == 0, r
        assert r["stack_bytes"] == 0, r            # no libdevice cos/sin in the kernels (unit-root table)
        # no scalar float arguments: compiled Triton passes Python floats as float32 (the interpreter
        # as float64), which silently cost the float64 path seven digits once
        assert not [n for n, t in r["signature"].items() if t in ("fp16", "bf16", "fp32", "fp64")], r


@pytest.mark.integration
def test_gpu_verification_script_smoke_run(tmp_path):
    """The prepared GPU script (`python -m ddesys.verification.gpu`) runs end to end under the interpreter, so it
    cannot crash for a silly reason on the GPU machine; its JSON report is checked row by row."""
    res = subprocess.run([sys.executable, "-m", "ddesys.verification.gpu", "--interpret", "--seed", "3",
                          "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=900, cwd=Path(__file__).parents[2],
                         env=dict(os.environ, DDESYS_REFERENCE="0"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "seed 3" in res.stdout
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["status"] == "done" and data["ok"] is True and data["meta"]["seed"] == 3
    assert data["preflight"]["ok"] and not data["preflight"]["problems"]
    rows = data["rows"]
    assert not [r for r in rows if r["kind"] == "error"], rows
    corr = [r for r in rows if r["kind"] == "correctness"]
    expected = {(c, d) for c in ("transfer forward", "transfer backward, grad A", "transfer backward, grad cb",
                                 "decode step output (wraps buffer)", "decode ring buffer")
                for d in ("float32", "float64")}
    expected |= {("DS4D parameter gradients, fused vs unfused", "float64")}
    expected |= {(f"{n} prefill({p}) then step vs FFT", "float64") for n in ("DS4D", "S4D") for p in (8, 30)}
    assert {(r["check"], r["dtype"]) for r in corr} == expected
    for r in corr:
        assert r["status"] == "pass" and 0 <= r["error"] <= r["bound"], r
        assert r["bound"] <= (1e-3 if r["dtype"] == "float32" else 1e-9), r        # a bound that tests something
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 1 and train[0]["L"] == 32
    assert set(train[0]["seconds"]) == {"S4D", "DS4D fused", "DS4D unfused"}
    assert all(v > 0 for v in train[0]["seconds"].values())
    assert {r["impl"] for r in rows if r["kind"] == "prefill"} == {"S4D", "DS4D"}
    dec = [r for r in rows if r["kind"] == "decode"]
    assert {(r["impl"], r["batch"], r["relative_to_delay"]) for r in dec} == {
        (i, b, p) for i in ("S4D", "DS4D fused", "DS4D reference") for b in (1, 2) for p in ("before", "after")}
    for r in dec:
        assert r["tokens_per_s"] > 0 and r["cache_bytes"] > 0, r
        assert (r["position"] <= r["k_max"]) == (r["relative_to_delay"] == "before"), r
    md = (tmp_path / "gpu_check.md").read_text()
    assert "## Correctness" in md and "## Decoding" in md and "## Training step" in md


def test_transfer_kernel_memory_is_o_cm_plus_cn():
    """The launchers hand the kernels only O(C M + C N2 + M) elements (inputs, outputs, the unit-root
    table; no scratch: the AOT test checks the compiled kernels allocate none), never the (C, N2, M)
    tensor of the unfused path."""
    import torch
    from ddesys.gpu import transfer as gt
    C, N2, M = 4, 32, 4096
    A, cb = torch.zeros(C, N2, 3, dtype=torch.complex64), torch.zeros(C, N2, dtype=torch.complex64)
    k = torch.ones(C, dtype=torch.int64)
    for launch in (gt.forward_launch(A, cb, k, M), gt.backward_launch(A, cb, k, M, torch.zeros(C, M, dtype=A.dtype))):
        total = sum(a.numel() for a in launch[2] if isinstance(a, torch.Tensor))
        assert total <= 2 * (2 * C * M) + 8 * C * N2 + C + 2 * M, total   # (C, M) in/out + modes + roots
        assert total < C * N2 * M / 8
