"""The package graph: arrows point one way, only public names cross packages, ``import ddesys`` stays
free of torch (docs: README, "Layout")."""
import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
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


SUBPACKAGES = PACKAGES[1:]          # installed as ddesys.gpu, ddesys.nn, ... (the folders keep their names)


def _targets(mod, names):
    """``(package, rest of the dotted path, imported names)`` an import reaches: ``ddesys.nn.x`` and
    ``from ddesys import nn`` reach ``nn``; the old top-level names (``import nn``) are flagged."""
    parts = mod.split(".")
    if parts[0] in SUBPACKAGES:
        yield "old:" + parts[0], parts[1:], names
    elif parts[0] == "ddesys":
        if len(parts) > 1 and parts[1] in SUBPACKAGES:
            yield parts[1], parts[2:], names
        else:
            subs = [n for n in names if n in SUBPACKAGES and len(parts) == 1]
            for n in subs:
                yield n, [], []
            rest = [n for n in names if n not in subs]
            if rest or not names:
                yield "ddesys", parts[1:], rest


def test_arrows_point_one_way_and_private_names_stay_home():
    bad = []
    for pkg in PACKAGES:
        for f in _files(pkg):
            for mod, names, line in _imports(f):
                if mod == "ddesys._legacy" and f.name == "__init__.py":   # the old-name shim, the one exception
                    continue
                for top, rest, imported in _targets(mod, names):
                    where = f"{f.relative_to(ROOT)}:{line}"
                    if top.startswith("old:"):
                        bad.append(f"{where}: the old import path {mod} (use ddesys.{top[4:]})")
                        continue
                    if top == pkg:
                        continue
                    if top not in ALLOWED[pkg]:
                        bad.append(f"{where}: {pkg} imports {mod}")
                    private = [p for p in rest if p.startswith("_")] + [n for n in imported if n.startswith("_")]
                    if private:
                        bad.append(f"{where}: private name(s) {private} of {top}")
    assert not bad, "\n".join(bad)


def test_tests_use_the_new_import_paths():
    bad = []
    for f in sorted((ROOT / "tests").rglob("*.py")):
        if f.parent == ROOT / "tests" / "data":      # scripts that wrote old-version test data, run on that version
            continue
        for mod, names, line in _imports(f):
            if mod.split(".")[0] in SUBPACKAGES:
                bad.append(f"{f.relative_to(ROOT)}:{line}: {mod}")
    assert not bad, "\n".join(bad)


def _python(code, *flags):
    """Run ``code`` in a fresh interpreter from the repository root; its stripped stdout (exit 0 asserted)."""
    out = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_torch_nn_and_the_layers_in_one_file():
    code = ("from torch import nn\nfrom ddesys.nn import DS4D\n"
            "m = nn.Sequential(nn.Linear(4, 4), DS4D(4, 8, l_max=8))\nprint(type(m[1]).__module__)")
    assert _python(code, "-W", "error::DeprecationWarning") == "ddesys.nn.ds4d"


def test_import_ddesys_needs_no_torch():
    code = ("import sys, ddesys, ddesys.transfer, ddesys.backend, ddesys.parameterization, ddesys.plot;"
            "print(sorted(m for m in ('torch', 'nn', 'gpu', 'ddesys.nn', 'ddesys.gpu', 'cupy', 'triton') "
            "if m in sys.modules))")
    assert _python(code) == "[]"


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
            # the clock gates' own logistic, not p's map
            gate = f.name in ("selective.py", "learned_clock.py", "flip_token_clock.py")
            assert "(1 - p) * abar" not in text and ("torch.sigmoid(" not in text or gate), f
