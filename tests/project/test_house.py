"""The shape of the house (docs/theory.md, "Where things live"): one package name, arrows that point one
way (no import circle, lazy imports included), a small top level, no module that reads or writes another
object's private attributes beyond a short list, no engine chosen and no model family parsed by comparing
strings, and a clean linter run (ruff: pyflakes and the line length, configured in pyproject.toml)."""
from __future__ import annotations

import ast
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = {"ddesys": "ddesys", "nn": "ddesys.nn", "gpu": "ddesys.gpu", "verification": "ddesys.verification",
           "experiments": "ddesys.experiments"}

#: reads or writes of another object's underscore attribute that are accepted, with the reason
PRIVATE_OK = {
    "super()._load_from_state_dict": "torch's documented override point for state-dict migration",
    "data._asdict": "a NamedTuple's public method (the underscore avoids field-name clashes)",
    "_parallel._launch_threads": "Numba's thread pool starts lazily; there is no public call to start it",
}
MAX_PRIVATE = 15


def modules():
    """``{dotted name: path}`` of every module of the installed package ``ddesys``."""
    out = {}
    for folder, pkg in FOLDERS.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            parts = list(f.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = f
    return out


def _edges(mods):
    """``{module: set of project modules it imports}``, every import statement (lazy ones too)."""
    edges = {m: set() for m in mods}
    for name, f in mods.items():
        pkg = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and not name.startswith(t + "."):
                    edges[name].add(t)
    return edges


def _cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in edges:
        if v not in index:
            visit(v)
    return out


def private_accesses(mods):
    """``file:line: expression`` for every ``obj._name`` (not a dunder) whose ``obj`` is not ``self``/``cls``."""
    out = []
    for f in mods.values():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                out.append((f"{f.relative_to(ROOT)}:{node.lineno}", ast.unparse(node)))
    return out


def test_no_import_circles():
    assert _cycles(_edges(modules())) == []


def test_the_matrix_core_never_imports_control():
    """``ddesys.control`` (interconnections, margins, design) builds on ``ddesys.matrix``; no module of the
    matrix side imports it, lazy imports inside functions included."""
    edges = _edges(modules())
    matrix = [m for m in edges if m == "ddesys.matrix" or m.startswith("ddesys.matrix.")]
    assert len(matrix) > 10 and "ddesys.control" in edges
    bad = {m: sorted(t for t in edges[m] if t == "ddesys.control" or t.startswith("ddesys.control."))
           for m in matrix}
    assert not any(bad.values()), {m: t for m, t in bad.items() if t}


def test_a_small_top_level():
    top = sorted(p.name for p in (ROOT / "ddesys").glob("*.py"))
    assert len(top) <= 32, top
    subpackages = {p.name for p in (ROOT / "ddesys").iterdir() if (p / "__init__.py").is_file()}
    assert {"matrix", "control", "cpu"} <= subpackages


def test_private_attributes_stay_home():
    found = private_accesses(modules())
    unexplained = [f"{w}: {e}" for w, e in found if e not in PRIVATE_OK]
    assert len(found) <= MAX_PRIVATE, "\n".join(f"{w}: {e}" for w, e in found)
    assert len(unexplained) <= MAX_PRIVATE - len(PRIVATE_OK), "\n".join(unexplained)


@pytest.mark.integration
def test_the_linter_passes():
    """``ruff check`` (its configuration: ``[tool.ruff]`` in pyproject.toml) finds nothing in the package
    folders, the tests and the examples. Files are shaped by their concepts, not by a line count; the linter
    keeps the lines readable and the names used."""
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed: install the test extra (pip install -e '.[test]'; CI installs it)")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_no_engine_or_model_family_chosen_by_string():
    """Engines are objects (``cache.engine``), model families come from a specification: no comparison of an
    engine's name and no ``label.split("-")`` / ``endswith("-clock")`` parsing outside the one parser."""
    bad = []
    pat = re.compile(r"""engine\s*(==|!=|in)\s*\(?["']|\.name\s*==\s*["'](fused|triton|reference)["']|"""
                     r"""split\(["']-["']\)\[0\]|endswith\(["']-(clock|gate|tap)["']\)""")
    for f in modules().values():
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if pat.search(line) and "# parser" not in line:
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_pyproject_lists_every_package_once():
    """The one mechanism (package-dir) maps every folder with an ``__init__.py`` to ``ddesys.*``."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools]")[1].split("[tool.setuptools.package-dir]")[0]
    listed = set(re.findall(r'"(ddesys(?:\.\w+)*)"', section))
    want = {m for m, f in modules().items() if f.name == "__init__.py"}
    assert listed == want


@pytest.mark.integration
def test_the_wheel_installs_ddesys_only(tmp_path):
    """A wheel built from the tree (a copy: the build leaves its folders) has one top-level package,
    ``ddesys``, and no file twice."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", ".venv*", "__pycache__",
                                                             "docs", "tests", "*_out", "checkpoints"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("ddesys-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"ddesys"}, tops
    top_level = [n for n in names if n.endswith("top_level.txt")]
    if top_level:
        assert zipfile.ZipFile(wheel).read(top_level[0]).decode().split() == ["ddesys"]
    assert len(names) == len(set(names))
    for sub in ("ddesys/nn/ds4d.py", "ddesys/matrix/statespace.py", "ddesys/control/iosys.py", "ddesys/cpu/step.py",
                "ddesys/experiments/bench/decode.py", "ddesys/verification/__main__.py"):
        assert sub in names, sub


@pytest.mark.parametrize("folder", ["nn", "gpu", "verification", "experiments"])
def test_a_folder_is_not_importable_under_its_own_name_from_the_clone(folder):
    """From the clone's root ``import nn`` would load a second copy of ``ddesys.nn`` (checkpoints saved
    from it would name ``nn.model.SequenceModel``): each folder refuses, naming its real package."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and f"import ddesys.{folder}" in r.stderr, r.stderr[-500:]


def test_clocks_are_parts_not_strings():
    """Clocks reach a model as parts (``wrap(layer, index)``) or given clocks: no table keyed by a clock's
    name anywhere in ``ddesys.nn`` (the names ``"learned"`` / ``"binary"`` are sugar resolved in one function,
    :func:`nn.block.named_clock`), and the block takes its clock as ``clock=``, not a flag."""
    import inspect

    from ddesys.nn import SequenceBlock

    names = {"learned", "binary", "given"}
    bad = []
    for name, f in modules().items():
        if not name.startswith("ddesys.nn"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value in names for k in node.keys):
                bad.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad
    params = inspect.signature(SequenceBlock).parameters
    assert "clock" in params and "clocked" not in params
