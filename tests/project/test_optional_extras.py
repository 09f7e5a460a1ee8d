"""A missing optional dependency is named with the extra that installs it: each case runs an interpreter
whose import system refuses torch (or scikit-learn) as an uninstalled package would, then imports the
package or runs the CLI as ``python -m`` does."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def _run(blocked, code, timeout=120):
    """Run ``code`` in a fresh interpreter in which every module under the top-level names ``blocked``
    cannot be found (a ``sys.meta_path`` finder raising ModuleNotFoundError, as for an absent package)."""
    prelude = textwrap.dedent(f"""
        import sys

        class _Absent:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {tuple(blocked)!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, _Absent())
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _as_main(module, *argv):
    """``python -m module argv...`` (runpy, as the interpreter's ``-m`` does)."""
    return (f"import runpy; sys.argv = ['-m', *{list(argv)!r}]; "
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def test_import_ddesys_without_torch_and_the_layers_name_the_extra():
    out = _run(["torch"], """
        import json
        import ddesys
        msgs = {}
        for stmt in ("import ddesys.nn", "from ddesys.nn import DS4D", "import ddesys.experiments"):
            try:
                exec(stmt)
            except ImportError as exc:
                msgs[stmt] = str(exc)
        print(json.dumps({"torch_loaded": "torch" in sys.modules, "msgs": msgs}))
    """)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["torch_loaded"] is False
    assert set(res["msgs"]) == {"import ddesys.nn", "from ddesys.nn import DS4D", "import ddesys.experiments"}
    for stmt in ("import ddesys.nn", "from ddesys.nn import DS4D"):
        msg = res["msgs"][stmt]
        assert "pip install 'ddesys[torch]'" in msg and "download.pytorch.org/whl/cpu" in msg, msg
    assert "pip install 'ddesys[experiments]'" in res["msgs"]["import ddesys.experiments"]


@pytest.mark.parametrize("argv", [["--help"], ["--quick", "--out", "{tmp}"]])
def test_verification_cli_without_torch_says_one_line_and_exits_2(tmp_path, argv):
    argv = [a.format(tmp=tmp_path / "out") for a in argv]
    out = _run(["torch"], _as_main("ddesys.verification", *argv))
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "python -m ddesys.verification" in lines[0] and "pip install 'ddesys[torch]'" in lines[0]
    assert not (tmp_path / "out").exists()                 # stopped before any work


def test_general_experiment_without_scikit_learn_names_the_extra(tmp_path):
    """The default tasks include sdigits (scikit-learn's digits): one line, exit 2, nothing written."""
    out = _run(["sklearn"], _as_main("ddesys.experiments.general", "--scale", "smoke", "--out",
                                     str(tmp_path / "out")))
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "scikit-learn" in lines[0] and "pip install 'ddesys[experiments]'" in lines[0]
    assert not (tmp_path / "out").exists()


def test_experiment_cli_without_torch_names_the_extra():
    out = _run(["torch"], _as_main("ddesys.experiments.general", "--help"))
    assert out.returncode != 0
    assert "pip install 'ddesys[experiments]'" in out.stderr.strip().splitlines()[-1], out.stderr
