"""Numbers in the hand-written notes come from the generated reports: every ``mean +- std`` pair and every
number with three or more decimals in ``docs/experiments/*/notes.md``, the README and the layers guide
appears verbatim in a file the project's commands wrote under ``docs/experiments`` (the reports, which
``test_results_safety`` regenerates from their results files, the benchmark outputs, the results files).

A number typed by hand that drifts from the report (a last digit rounded differently, a run re-done)
fails here. A pair is specific; a single number could match elsewhere by coincidence, so the pairs are the
strong check and the singles a guard against typos."""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "experiments"
PAIR = re.compile(r"\d+\.\d+ \+- \d+\.\d+")
SINGLE = re.compile(r"(?<![\w.])\d+\.\d{3,}(?!\d)")
HAND = ("notes.md", "README.md")


def _generated():
    files = [f for f in DOCS.rglob("*") if f.is_file() and f.suffix in (".md", ".txt", ".json") and f.name not in HAND]
    assert len(files) > 20, files
    return "\n".join(f.read_text(encoding="utf-8") for f in files)


def _hand_written():
    return [*sorted(DOCS.glob("*/notes.md")), DOCS / "README.md", ROOT / "README.md",
            ROOT / "docs" / "guide" / "layers.md"]


@pytest.mark.parametrize("path", _hand_written(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_number_in_the_notes_is_in_a_generated_file(path):
    corpus, text = _generated(), path.read_text(encoding="utf-8")
    stale = [m for m in PAIR.findall(text) + SINGLE.findall(text) if m not in corpus]
    assert not stale, f"{path.relative_to(ROOT)}: numbers not in any generated report: {stale}"


def test_a_drifted_number_is_caught():
    corpus = _generated()
    assert "0.383 +- 0.168" in corpus                          # the report's value
    assert "0.383 +- 0.167" not in corpus                      # the value once typed in the notes


def test_the_claims_page_is_generated_from_the_committed_results():
    """``docs/experiments/claims.md`` is what ``python -m ddesys.experiments.claims`` writes from the committed
    results: a claim's status or number cannot drift from the runs behind it."""
    from ddesys.experiments import claims
    page = claims.markdown(DOCS, ROOT / "docs" / "verification")
    assert page == (DOCS / "claims.md").read_text(encoding="utf-8")
    rows = [ln for ln in page.splitlines() if ln.startswith("| §")]
    assert len(rows) == len(claims.CLAIMS) and all(any(f"**{s}**" in r for s in ("holds", "partly", "fails",
                                                                                       "untested")) for r in rows)


def test_a_missing_results_folder_reads_untested(tmp_path):
    from ddesys.experiments import claims
    page = claims.markdown(tmp_path, tmp_path)
    rows = [ln for ln in page.splitlines() if ln.startswith("| §")]
    assert len(rows) == len(claims.CLAIMS) and all("**untested**" in r for r in rows)
