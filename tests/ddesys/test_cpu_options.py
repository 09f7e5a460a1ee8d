"""The compile-options table of ddesys.cpu: every compiled loop is registered there by name, compiled
with its row's options, and a row that promises sums in the written order has no reassociation."""
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import ddesys
import ddesys.cpu as cpu
from ddesys.cpu import options
from ddesys.cpu.options import LOOPS, LoopOptions

REPO = Path(ddesys.__file__).resolve().parents[1]
PACKAGE_DIRS = ("ddesys", "nn", "gpu", "verification")     # the folders the wheel installs as ddesys.*


def _cpu_modules():
    return [importlib.import_module(f"ddesys.cpu.{m.name}") for m in pkgutil.iter_modules(cpu.__path__)]


def _fastmath_flags(fm):
    return {"fast"} if fm is True else set(fm or ())


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_no_reassociation_rows_do_not_reassociate(name):
    row = LOOPS[name]
    flags = _fastmath_flags(row.fastmath)
    if not row.reassoc:
        assert row.fastmath is not True and not flags & {"reassoc", "fast"}, name
    else:
        assert flags & {"reassoc", "fast"}, name


def test_a_row_that_contradicts_its_flags_is_refused():
    with pytest.raises(ValueError, match="reassoc"):
        LoopOptions(fastmath=True, reassoc=False)
    with pytest.raises(ValueError, match="reassoc"):
        LoopOptions(fastmath=frozenset({"contract", "nsz"}), reassoc=True)
    with pytest.raises(KeyError, match="no compile options"):
        options.loop("no.such.row")


def test_the_docstring_table_is_the_table():
    """The table in ddesys.cpu.options' docstring names every row with the row's options."""
    fm = {True: "fast", options.CRN: "CRN", options.CN: "CN", False: "-"}
    lines = [ln for ln in options.__doc__.splitlines() if ln.startswith("``") and "." in ln.split()[0]]
    assert {ln.split()[0].strip("`") for ln in lines} == set(LOOPS)
    for ln in lines:
        name, *cols = ln.split()
        row = LOOPS[name.strip("`")]
        want = [fm[row.fastmath], "prange" if row.parallel else "-", "yes" if row.cache else "-",
                row.error_model or "-", "yes" if row.nogil else "-", "always" if row.inline else "-",
                "yes" if row.reassoc else "no"]
        assert cols[:7] == want, (name, cols[:7], want)


@pytest.mark.skipif(not cpu.available(), reason="Numba missing or disabled")
def test_every_compiled_loop_of_ddesys_cpu_is_registered_with_its_rows_options():
    """Every Numba dispatcher defined in a module of ddesys.cpu was made through the table, with the
    options of its row (fastmath and parallel as the row says)."""
    from numba.core.dispatcher import Dispatcher
    modules = _cpu_modules()                       # imported first: importing registers their loops
    registered = {(mod, qual): row for row, mod, qual in options.registered()}
    seen = 0
    for mod in modules:
        for attr, obj in vars(mod).items():
            if not isinstance(obj, Dispatcher) or obj.py_func.__module__ != mod.__name__:
                continue
            key = (mod.__name__, obj.py_func.__qualname__)
            assert key in registered, f"{key} compiled outside ddesys.cpu.options"
            row = LOOPS[registered[key]]
            topts = obj.targetoptions
            assert _fastmath_flags(topts.get("fastmath")) == _fastmath_flags(row.fastmath), key
            assert bool(topts.get("parallel", False)) == row.parallel, key
            seen += 1
    assert seen >= 20                      # the loops of recurrence, tap, selective, transfer, step, prefill


@pytest.mark.skipif(not cpu.available(), reason="Numba missing or disabled")
def test_step_entry_points_are_named_and_take_their_rows():
    from ddesys.cpu import step_loops
    assert set(step_loops.STEP_ENTRIES) == {(s, p) for s in ("complex", "16-bit") for p in (False, True)}
    for (storage, parallel), fn in step_loops.STEP_ENTRIES.items():
        assert fn.loop_row == ("step.entry_parallel" if parallel else "step.entry")
        assert LOOPS[fn.loop_row].parallel is parallel


def _sources(dirs):
    for d in dirs:
        for p in sorted((REPO / d).rglob("*.py")):
            if "__pycache__" not in p.parts:
                yield p, p.read_text()


#: imports that only read the installed version for a report (nothing compiled)
_VERSION_REPORTS = {("verification/__main__.py", "import numba")}


def test_only_ddesys_cpu_imports_numba_and_only_the_table_compiles():
    """The one optional import of Numba lives in ddesys/cpu; ``njit`` is called in ddesys/cpu/options.py
    only (every other loop takes its options from the table by name)."""
    imports, jits = [], []
    for p, text in _sources(PACKAGE_DIRS):
        rel = p.relative_to(REPO).as_posix()
        for ln, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"^\s*(import numba\b|from numba\b)", code) and not rel.startswith("ddesys/cpu/") \
                    and (rel, line.strip()) not in _VERSION_REPORTS:
                imports.append(f"{rel}:{ln}")
            if re.search(r"\bnjit\s*\(|\bnumba\.jit\s*\(|\bnb\.jit\s*\(", code) and rel != "ddesys/cpu/options.py":
                jits.append(f"{rel}:{ln}")
    assert not imports, imports
    assert not jits, jits
