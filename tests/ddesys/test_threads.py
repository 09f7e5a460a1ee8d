"""Thread hygiene: the compiled loops never change the caller's thread settings nor run beside them."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
numba = pytest.importorskip("numba")

from ddesys.cpu.threads import numba_threads, thread_budget  # noqa: E402


@pytest.mark.integration
def test_fresh_process_keeps_one_thread():
    """A user's 1-thread script: every compiled path (DS4D FFT kernel fwd/bwd, S4D Vandermonde, the
    recurrence, ddesys simulate and kernel) leaves torch at 1 thread and Numba at its own setting."""
    code = textwrap.dedent("""
        import numpy as np, torch
        torch.set_num_threads(1)
        import numba, ddesys
        from ddesys import nn
        for layer in (nn.DS4D(8, 8, l_max=32), nn.S4D(8, 8)):
            layer(torch.randn(2, 32, 8)).sum().backward()
        nn.DS4D(4, 4, l_max=16)(torch.randn(1, 16, 4), mode="recurrent")
        sys_ = nn.DS4D(4, 4, l_max=16).to_ddesys()
        sys_.simulate(np.ones((4, 64))); sys_.kernel(64)
        print(torch.get_num_threads(), numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["1", "True"]


def test_budget_follows_torch_and_restores(monkeypatch):
    monkeypatch.delenv("DDESYS_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    nb_before = numba.get_num_threads()
    try:
        torch.set_num_threads(1)
        with numba_threads() as n:
            assert n == 1 and numba.get_num_threads() == 1      # Numba inside torch's budget
        assert torch.get_num_threads() == 1 and numba.get_num_threads() == nb_before
    finally:
        torch.set_num_threads(before)


def test_env_override(monkeypatch):
    monkeypatch.setenv("DDESYS_NUM_THREADS", "1")
    assert thread_budget() == 1
    monkeypatch.setenv("DDESYS_NUM_THREADS", "100000")
    assert thread_budget() == numba.config.NUMBA_NUM_THREADS      # capped by Numba's pool
    for bad in ("0", "two"):
        monkeypatch.setenv("DDESYS_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="DDESYS_NUM_THREADS"):
            thread_budget()


_POOL = """
import os, numpy as np
from ddesys.cpu.prefill import run_ring
z = np.zeros((2, 2), np.complex64)
run_ring(np.zeros((1, 3, 2, 2), np.complex64), np.zeros((1, 2, 4), np.float32), z, z, z, z, z,
         np.zeros(2, np.float32), np.array([1, 2]), 0)
from numba.np.ufunc import parallel
print(parallel._is_initialized, os.environ.get("OMP_WAIT_POLICY"))
"""


@pytest.mark.integration
@pytest.mark.parametrize("env,want", [({}, "True None"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "True ACTIVE")])
def test_numba_pool_starts_passive_and_leaves_the_environment(env, want):
    """Numba's pool is launched with OMP_WAIT_POLICY=PASSIVE for that launch only; a caller's own
    setting is kept (a subprocess: the pool starts once per process)."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", _POOL], env={**base, **env}, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == want
