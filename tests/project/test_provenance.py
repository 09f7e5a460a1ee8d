"""Every results file says what wrote it: ``ddesys.io.provenance()`` gives the package version and the git
commit of the source it runs from ("unknown", never an error, for a copy git does not track), and the
verification CLI and the experiment driver put both into their results.json."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ddesys
from ddesys.io import provenance

ROOT = Path(__file__).resolve().parents[2]
COMMIT = re.compile(r"^[0-9a-f]{7,40}(\+dirty)?$")


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)


def test_version_is_read_from_one_place():
    text = (ROOT / "ddesys" / "_version.py").read_text()
    assert re.search(r'^__version__ = "([^"]+)"$', text, re.M).group(1) == ddesys.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'attr = "ddesys._version.__version__"' in pyproject
    assert not re.search(r"^version\s*=", pyproject.split("[project]")[1].split("\n[")[0], re.M)
    cff = (ROOT / "CITATION.cff").read_text()
    assert re.search(r"^version: (\S+)$", cff, re.M).group(1) == ddesys.__version__
    assert re.search(r"^cff-version: 1\.2\.0$", cff, re.M) and re.search(r"^license: MIT$", cff, re.M)


def test_provenance_in_this_checkout():
    head = _git("rev-parse", "HEAD")
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    p = provenance()
    assert set(p) == {"ddesys", "commit"} and p["ddesys"] == ddesys.__version__
    assert COMMIT.match(p["commit"]), p
    assert head.stdout.strip().startswith(p["commit"].split("+")[0])        # git's own full hash
    dirty = _git("status", "--porcelain", "--untracked-files=no").stdout.strip() != ""
    assert p["commit"].endswith("+dirty") == dirty


_PRINT = "import json, ddesys.io; print(json.dumps([ddesys.io.__file__, ddesys.io.provenance()]))"


@pytest.mark.integration
@pytest.mark.parametrize("where", ["no_repo", "untracked_in_a_repo", "no_git_program"])
def test_a_copy_outside_git_says_unknown(tmp_path, where):
    """A copy of the package (as an installed one is) reports "unknown" and never fails: outside any
    repository, inside a repository that does not track it, or with no git program at all."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "ddesys", site / "ddesys", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(site), GIT_CEILING_DIRECTORIES=str(tmp_path.parent))
    if where == "untracked_in_a_repo":
        if shutil.which("git") is None:
            pytest.skip("no git")
        for cmd in (["init", "-q"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                                      "-m", "a commit, so HEAD resolves"]):
            subprocess.run(["git", *cmd], cwd=tmp_path, check=True, timeout=30, capture_output=True)
    if where == "no_git_program":
        env["PATH"] = str(tmp_path / "empty")
    out = subprocess.run([sys.executable, "-c", _PRINT], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    where_from, p = json.loads(out.stdout)
    assert Path(where_from).resolve().is_relative_to(site.resolve())    # the copy ran, not the checkout
    assert p == {"ddesys": ddesys.__version__, "commit": "unknown"}


def test_verification_results_carry_provenance(tmp_path, monkeypatch):
    """``python -m ddesys.verification`` with no checks registered: the machine block of results.json
    names the version and the commit."""
    from ddesys.verification import __main__ as vmain
    monkeypatch.setattr(vmain, "CHECKS", ())
    assert vmain.main(["--quick", "--out", str(tmp_path)]) == 0
    machine = json.loads((tmp_path / "results.json").read_text())["machine"]
    assert machine["ddesys"] == ddesys.__version__
    assert machine["commit"] == provenance()["commit"]


def test_experiment_results_carry_provenance(tmp_path):
    """The driver every experiment CLI runs through (a one-run toy experiment): results.json's meta names
    the version and the commit."""
    from ddesys.experiments._driver import Experiment, drive
    from ddesys.experiments._runs import RunSchema, add_run_arguments
    from ddesys.experiments._train import Job

    def run(ckpt, progress, ctx):
        return {"key": "toy|seed0", "config": {"seed": 0}, "status": "done", "curve": [{"step": 0, "err": 0.5}],
                "w": [1.0]}

    exp = Experiment("toy", RunSchema(done=("w",), curve=("err",), types={"w": "list"}), lambda r: "toy|seed0",
                     ("report.md",), lambda args, ctx: ([Job("toy|seed0", "toy", 1, run)], "toy"),
                     lambda runs, meta: "# toy\n", lambda runs, out: None, lambda runs: bool(runs))
    ap = argparse.ArgumentParser()
    for name, default in (("--scale", "toy"), ("--device", "cpu")):
        ap.add_argument(name, default=default)
    ap.add_argument("--quiet", action="store_true")
    add_run_arguments(ap)
    assert drive(exp, ap.parse_args(["--quiet"]), ["--quiet"], tmp_path) == 0
    meta = json.loads((tmp_path / "results.json").read_text())["meta"]
    assert meta["ddesys"] == ddesys.__version__
    assert meta["commit"] == provenance()["commit"]
