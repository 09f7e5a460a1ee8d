"""Every command-line program's usage line shows how it is invoked (``usage: python -m ddesys...``), not
the file name argparse would guess (``__main__.py``, ``dss.py``)."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CLIS = ["ddesys.verification", "ddesys.verification.gpu", "ddesys.verification.kernel_accuracy", "ddesys.gpu.aot",
        "ddesys.experiments.synthetic", "ddesys.experiments.efficiency", "ddesys.experiments.delay",
        "ddesys.experiments.general", "ddesys.experiments.s4_recipe", "ddesys.experiments.synthetic.clock_study",
        "ddesys.experiments.claims"] + [
    f"ddesys.experiments.bench.{n}" for n in ("chart_executor", "clock", "control", "decode", "dss", "layers",
                                              "ring_layout", "simulate", "step", "userpath")]


def _usage_ok(text, module):
    first = text.lstrip()
    head = f"usage: python -m {module}"
    return first.startswith(head) and first[len(head):len(head) + 1] in (" ", "\n")


def test_every_argparse_program_is_listed():
    """Each module that builds an ArgumentParser is one of CLIS (a new program joins the checks below)."""
    found = set()
    for folder, pkg in (("verification", "ddesys.verification"), ("gpu", "ddesys.gpu"), ("nn", "ddesys.nn"),
                        ("experiments", "ddesys.experiments"), ("ddesys", "ddesys")):
        for f in (ROOT / folder).rglob("*.py"):
            if "ArgumentParser(" in f.read_text():
                parts = list(f.relative_to(ROOT / folder).with_suffix("").parts)
                found.add(".".join([pkg, *(parts[:-1] if parts[-1] == "__main__" else parts)]))
    assert found == set(CLIS)


@pytest.mark.parametrize("module", CLIS)
def test_help_shows_the_invocation(module, capsys):
    """In process (one interpreter for all): ``main(["--help"])`` prints the usage and exits 0."""
    name = module + ".__main__" if importlib.util.find_spec(module).submodule_search_locations else module
    main = importlib.import_module(name).main
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert _usage_ok(out, module), out[:200]


@pytest.mark.integration
@pytest.mark.parametrize("module", ["ddesys.verification", "ddesys.experiments.bench.dss"])
def test_python_dash_m_help(module):
    """The real invocation, for a package CLI and a module CLI (each a few seconds: the rest run in process)."""
    out = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert _usage_ok(out.stdout, module), out.stdout[:200]
