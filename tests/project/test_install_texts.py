"""The install commands the README and the guides show agree with each other and with CI: one test
command (the extras CI installs), the documentation built with ``-W`` everywhere, ``[all]`` naming every
extra but CuPy's."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "guide").glob("*.md"))]


def _ci_test_command():
    line = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if "pytest" in ln]
    assert len(line) == 1, line
    return line[0].strip()


def test_every_test_command_is_the_one_ci_runs():
    ci = _ci_test_command()
    found = []
    for page in PAGES:
        for ln in page.read_text().splitlines():
            m = re.search(r'pip install -e "?\.\[[^\]]*\]"? && python -m pytest -q', ln)
            if m:
                found.append(page.name)
                assert m.group(0) == ci, f"{page.name}: {m.group(0)!r} differs from CI's {ci!r}"
    assert "README.md" in found


def test_every_docs_build_is_strict():
    for page in PAGES:
        for ln in page.read_text().splitlines():
            if "python -m sphinx" in ln:
                assert " -W " in ln, f"{page.name}: a docs build without -W: {ln.strip()}"


def test_all_names_every_extra_but_cupy():
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^(\w+)\s*=", block, re.M)) - {"all", "cupy"}
    all_line = re.search(r'^all\s*=\s*\["ddesys\[([^\]]*)\]"\]', block, re.M)
    assert all_line and set(all_line.group(1).split(",")) == extras, (all_line, extras)
