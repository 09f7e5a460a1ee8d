"""The package graph: arrows point one way, only public names cross packages, ``import ddesys`` stays
free of torch (docs: README, "Layout")."""
import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("ddesys", "gpu", "nn", "verification", "experiments")
# who may import whom (the README's layout): ddesys reaches gpu only lazily, for CuPy arrays
ALLOWED = {"ddesys": {"gpu"}, "gpu": set(), "nn": {"ddesys", "gpu"},
           "verification": {"ddesys", "gpu", "nn"}, "experiments": {"ddesys", "gpu", "nn", "verification"}}


def _imports(path):
    """``(module, names, line)`` of every import in a file (module as written, absolute or relative)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [a.name for a in node.names], node.lineno


def _files(pkg):
    return sorted((ROOT / pkg).rglob("*.py"))


def test_arrows_point_one_way_and_private_names_stay_home():
    bad = []
    for pkg in PACKAGES:
        for f in _files(pkg):
            for mod, names, line in _imports(f):
                top = mod.split(".")[0]
                if top not in PACKAGES or top == pkg:
                    continue
                where = f"{f.relative_to(ROOT)}:{line}"
                if top not in ALLOWED[pkg]:
                    bad.append(f"{where}: {pkg} imports {mod}")
                private = [p for p in mod.split(".")[1:] if p.startswith("_")]
                private += [n for n in names if n.startswith("_")]
                if private:
                    bad.append(f"{where}: private name(s) {private} of {top}")
    assert not bad, "\n".join(bad)


def test_import_ddesys_needs_no_torch():
    code = ("import sys, ddesys, ddesys.transfer, ddesys.backend, ddesys.parameterization, ddesys.plot;"
            "print(sorted(m for m in ('torch', 'nn', 'gpu', 'cupy', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_one_home_per_formula():
    """The DS4D map, Q(z) and the backend decision are defined once (where the README says)."""
    defs = {"def ds4d_discrete(": [], "def q_eval(": [], "def choose(": [], "def force_reference(": []}
    for pkg in PACKAGES:
        for f in _files(pkg):
            text = f.read_text()
            for d in defs:
                if d in text:
                    defs[d].append(str(f.relative_to(ROOT)))
    assert defs == {"def ds4d_discrete(": ["ddesys/parameterization.py"], "def q_eval(": ["ddesys/charpoly.py"],
                    "def choose(": ["ddesys/backend.py"], "def force_reference(": ["ddesys/backend.py"]}
    for pkg in ("nn", "verification", "experiments"):             # no restated exp(a dt) / sigmoid(r) maps
        for f in _files(pkg):
            text = f.read_text()
            assert "(1 - p) * abar" not in text and "torch.sigmoid(" not in text, f
