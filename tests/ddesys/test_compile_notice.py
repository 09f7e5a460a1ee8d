"""The first real compilation of a compiled loop of ddesys in a process writes one line to standard error
(ddesys/cpu/notice.py): once per process, not when the loop is loaded from Numba's disk cache, never with
DDESYS_QUIET=1, and never as a warning (a program run with -W error keeps running)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ddesys
import ddesys.cpu as cpu

REPO = Path(ddesys.__file__).resolve().parents[1]

# two loops, three compilations (the FIR for float64 and float32, the 16-bit encoder): one notice
PROGRAM = textwrap.dedent("""
    import numpy as np
    from ddesys.cpu.tap_loops import offset_fir_into
    from ddesys.cpu.step_loops import encode16_loop
    for dt in (np.float64, np.float32):
        x = np.ones((1, 2, 8), dt); y = np.zeros((1, 2, 8), dt)
        offset_fir_into(x, np.zeros((2, 1), np.int64), np.ones((2, 1), dt), 0, y)
        assert y.sum() == 16
    encode16_loop(np.ones(3, np.complex64), 0, np.zeros((3, 2), np.uint16))
    print("ran")
""")

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not cpu.available(), reason="Numba missing or disabled")]


def _run(cache_dir, **env):
    full = {k: v for k, v in os.environ.items() if k != "DDESYS_QUIET"}
    full.update(NUMBA_CACHE_DIR=str(cache_dir), **env)
    proc = subprocess.run([sys.executable, "-W", "error", "-c", PROGRAM], cwd=str(REPO), env=full,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "ran", proc.stderr[-3000:]
    return proc.stderr


def _notices(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("ddesys: compiling")]


def test_first_compile_prints_one_notice_and_the_cache_prints_none(tmp_path):
    from ddesys.cpu.notice import MESSAGE
    first = _run(tmp_path / "cache")                       # a fresh cache: every loop compiles
    assert _notices(first) == [MESSAGE], first[-3000:]
    assert "DDESYS_QUIET=1" in MESSAGE
    again = _run(tmp_path / "cache")                       # the same cache: loaded, nothing compiles
    assert _notices(again) == [], again[-3000:]


def test_ddesys_quiet_silences_the_notice(tmp_path):
    err = _run(tmp_path / "cache", DDESYS_QUIET="1")
    assert _notices(err) == [] and "ddesys:" not in err, err[-3000:]


def test_compiling_code_outside_ddesys_prints_nothing(tmp_path):
    """The listener reacts to loops of the package only (another library's Numba code is not ours)."""
    code = ("import numba, ddesys.cpu.options\n"
            "f = numba.njit(lambda a: a + 1)\n"
            "assert f(1) == 2\n"
            "print('ran')\n")
    full = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    full.pop("DDESYS_QUIET", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), env=full, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ran", proc.stderr[-3000:]
    assert _notices(proc.stderr) == []


# a user's whole path, as an outside client runs it: train a step, pass state between chunks, prefill,
# decode by its own model.step loop and by generate, at batch 1 and 8, DS4D (with a tap) and S4D
CLIENT = textwrap.dedent("""
    import torch
    from numba.core import event
    compiled = []

    class Count(event.Listener):
        def on_start(self, ev):
            fn = getattr((ev.data or {}).get("dispatcher"), "py_func", None)
            if fn is not None and (fn.__module__ or "").startswith("ddesys"):
                compiled.append(fn.__module__ + "." + fn.__qualname__)

        def on_end(self, ev):
            pass
    event.register("numba:compile", Count())
    from ddesys.nn import SequenceModel
    torch.manual_seed(0)
    for layer, kw in (("ds4d", dict(d_state=8, l_max=24, tap=True)), ("ds4d", dict(d_state=8, l_max=24)),
                      ("s4d", dict(d_state=8))):
        lm = SequenceModel(11, 11, d_model=8, n_layers=2, layer=layer, embedding=True, layer_kw=kw)
        ids = torch.randint(0, 11, (2, 24))
        y, st = lm(ids[:, :12], return_state=True)
        y2 = lm(ids[:, 12:], state=st)
        (y.square().mean() + y2.square().mean()).backward()
        lm.eval()
        for B in (1, 8):
            caches = lm.allocate_inference_cache(B)
            lm.prefill(torch.randint(0, 11, (B, 6)), caches)
            for _ in range(3):
                lm.step(torch.randint(0, 11, (B,)), caches)
            lm.generate(torch.randint(0, 11, (B, 4)), max_new_tokens=3, temperature=0)
    print("compiled:", " ".join(sorted(set(compiled))) or "nothing")
""")


def test_a_second_process_of_a_client_compiles_nothing(tmp_path):
    """One compile per installation: the first run of a user's whole path fills Numba's disk cache, a
    second process (same cache) loads every loop and compiles none, and prints no notice."""
    env = {k: v for k, v in os.environ.items() if k != "DDESYS_QUIET"}
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-W", "error", "-c", CLIENT], cwd=str(tmp_path), env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(proc)
    assert "compiled: nothing" not in runs[0].stdout and _notices(runs[0].stderr)      # a fresh cache compiles
    assert runs[1].stdout.strip().endswith("compiled: nothing"), runs[1].stdout[-3000:]
    assert _notices(runs[1].stderr) == [], runs[1].stderr[-3000:]
