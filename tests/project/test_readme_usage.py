"""Every snippet of the README's "Using DS4D in your own code" section runs, in a fresh process."""
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _section(title):
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {title}")
    end = text.index("\n## ", start + 3)
    return text[start:end]


@pytest.mark.integration
def test_usage_snippets_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", _section("Using DS4D in your own code"), re.S)
    assert len(blocks) == 7
    script = tmp_path / "snippets.py"
    script.write_text("\n".join(blocks))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ds4d.pt").exists()


@pytest.mark.integration
def test_matrix_delay_system_tour_runs(tmp_path):
    """The README's DelayStateSpace tour runs as written (a fresh process, no torch needed)."""
    text = (ROOT / "README.md").read_text()
    start = text.index("### Matrix delay systems")
    block = re.findall(r"```python\n(.*?)```", text[start:], re.S)[0]
    script = tmp_path / "tour.py"
    script.write_text("import matplotlib\nmatplotlib.use('Agg')\n" + block)
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert "1.5395" in out.stdout and "True" in out.stdout
    assert (tmp_path / "bode.png").stat().st_size > 5000 and (tmp_path / "chart.png").stat().st_size > 5000
