"""The README as a newcomer meets it: short, every Python snippet runs on its own (a fresh process, its own
imports, warnings as errors, nothing written into the working folder), its test command is the one CI
runs, the files it links exist, and no user document speaks of how the work is organised."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)

# words about the project's own process, never in a user document
PROCESS = re.compile(r"\b(issues?|sessions?|helpers?|CEO|tickets?|sprints?|lead engineer|landed)\b", re.I)


def _user_documents():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in docs if "_build" not in p.parts]


def test_readme_is_short_and_has_the_two_commands():
    assert len(README.splitlines()) <= 200
    assert "pip install -e . && python -m ddesys.verification --quick" in README
    test_cmd = re.search(r"^(pip install -e \"\.\[[a-z,]+\]\" && python -m pytest -q)$", README, re.M)
    assert test_cmd, "the README's test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd.group(1) in ci, "CI runs the README's test command"
    assert "--index-url https://download.pytorch.org/whl/cpu" in README    # CPU torch named


def test_readme_links_exist():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_no_process_words_in_user_documents():
    hits = [f"{p.relative_to(ROOT)}:{i + 1}: {line.strip()}" for p in _user_documents()
            for i, line in enumerate(p.read_text().splitlines()) if PROCESS.search(line)]
    assert not hits, "\n".join(hits)


@pytest.mark.integration
@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_snippet_runs_alone(i, tmp_path):
    if "torch" in BLOCKS[i]:
        pytest.importorskip("torch")
    script = tmp_path / "snippet.py"
    script.write_text(BLOCKS[i])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-W", "error", str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snippet.py"], "a snippet wrote into the working folder"
    if i == 0:                                  # the control tour: the published delay margin (closed form)
        assert "1.53953917" in out.stdout
