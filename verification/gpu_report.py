"""The GPU check's report: every row printed and saved (JSON and markdown) the moment it is measured, so a
crash or a timeout later in the run loses nothing already measured.

Row kinds (``row["kind"]``): ``correctness`` (``error`` vs ``bound``, ``status`` pass/fail), ``train``
(seconds per training step per implementation), ``prefill`` (seconds), ``decode`` (tokens/s and cache
bytes per implementation, batch and position), ``error`` (a section that raised: type, message,
traceback). ``status`` is ``pass``, ``fail``, ``error`` or ``info`` (measurements).
"""
from __future__ import annotations

import contextlib
import json
import os
import traceback
from pathlib import Path

JSON_NAME, MD_NAME = "gpu_check.json", "gpu_check.md"


@contextlib.contextmanager
def env_vars(**values):
    """Set environment variables for the block (``None`` unsets one) and restore the previous values
    afterwards, whatever happens inside (the process's environment is the caller's state)."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def reference_path(on=True):
    """``DDESYS_REFERENCE=1`` (every fused path steps aside) for the block, restored afterwards."""
    return env_vars(DDESYS_REFERENCE="1" if on else "0")


class Report:
    """Collects rows; prints each and rewrites ``gpu_check.json`` / ``gpu_check.md`` under ``out_dir``
    (``None``: print only) after each one, atomically (a reader never sees half a file)."""

    def __init__(self, out_dir, meta, echo=print):
        self.out = Path(out_dir) if out_dir else None
        self.echo = echo
        self.data = {"meta": meta, "preflight": None, "status": "running", "ok": None, "rows": []}
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
        self._save()

    @property
    def rows(self):
        return self.data["rows"]

    @property
    def ok(self):
        """No failed check and no section that raised."""
        return all(r["status"] in ("pass", "info") for r in self.rows)

    def set_preflight(self, result):
        self.data["preflight"] = result
        self._save()

    def add(self, row):
        """Record one row: print it, save both files. Returns the row."""
        self.rows.append(row)
        self.echo(format_row(row), flush=True)
        self._save()
        return row

    def guarded(self, section, fn, *args, **kwargs):
        """Run ``fn``; if it raises, record an ``error`` row for ``section`` and carry on (later sections
        still run, earlier rows are already saved)."""
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the report is the place for any failure
            self.add({"kind": "error", "section": section, "status": "error",
                      "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)})
            return None

    def finish(self, status):
        self.data["status"] = status
        self.data["ok"] = self.ok and status == "done"
        self._save()

    def _save(self):
        if self.out is None:
            return
        for name, text in ((JSON_NAME, json.dumps(self.data, indent=1, default=str)), (MD_NAME, markdown(self.data))):
            tmp = self.out / (name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.out / name)


def _fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def format_row(r):
    """One printed line per row."""
    k = r["kind"]
    if k == "correctness":
        return (f"{r['check']:42s} {r['dtype']:8s} error {_fmt(r['error'], '.2e')}  bound {_fmt(r['bound'], '.2e')}"
                f"  {r['status'].upper()}")
    if k == "train":
        s = r["seconds"]
        return (f"train step L={r['L']:<6d} batch {r['batch']}: " + ", ".join(f"{n} {v:.4g} s" for n, v in s.items())
                + f"  (fused/S4D {_fmt(r.get('fused_over_s4d'), '.2f')})")
    if k == "prefill":
        return f"prefill {r['impl']:14s} L={r['L']} batch {r['batch']}: {r['seconds']:.4g} s"
    if k == "decode":
        return (f"decode {r['impl']:14s} batch {r['batch']:3d} at t={r['position']:<6d} ({r['relative_to_delay']} "
                f"the longest delay): {r['tokens_per_s']:.4g} tokens/s, cache {r['cache_bytes']} B")
    if k == "error":
        return f"ERROR in {r['section']}: {r['error']}"
    return json.dumps(r, default=str)


def markdown(data):
    """The report as markdown tables (regenerated from the rows after each one)."""
    m = data["meta"]
    lines = ["# GPU check (`python -m ddesys.verification.gpu`)", "",
             f"status: **{data['status']}**" + ("" if data["ok"] is None else f", ok: **{data['ok']}**"),
             f"device: {m.get('device')}; seed {m.get('seed')}; torch {m.get('torch')}, triton {m.get('triton')}; "
             f"started {m.get('started')}", ""]
    pre = data.get("preflight")
    if pre:
        lines += ["## Preflight", "", f"ok: {pre['ok']}", ""]
        lines += [f"* problem: {p}" for p in pre["problems"]]
        lines += [f"* {k}: {v}" for k, v in pre["info"].items()] + [""]
    rows = data["rows"]
    corr = [r for r in rows if r["kind"] == "correctness"]
    if corr:
        lines += ["## Correctness (against float64 references)", "", "| check | dtype | error | bound | result |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['check']} | {r['dtype']} | {_fmt(r['error'], '.2e')} | {_fmt(r['bound'], '.2e')} | "
                  f"{r['status']} |" for r in corr]
        lines += ["", "Bounds: " + "; ".join(sorted({f"{r['check']}: {r['bound_from']}" for r in corr})), ""]
    train = [r for r in rows if r["kind"] == "train"]
    if train:
        names = list(train[0]["seconds"])
        lines += ["## Training step (seconds, forward + backward + SGD step)", "",
                  "| L | batch | " + " | ".join(names) + " | fused / S4D | peak bytes |",
                  "|---|---|" + "---|" * len(names) + "---|---|"]
        lines += [f"| {r['L']} | {r['batch']} | " + " | ".join(f"{r['seconds'][n]:.4g}" for n in names)
                  + f" | {_fmt(r.get('fused_over_s4d'), '.2f')} | {r.get('peak_bytes')} |" for r in train]
        lines += [""]
    pre_rows = [r for r in rows if r["kind"] == "prefill"]
    if pre_rows:
        lines += ["## Prefill (seconds)", "", "| layer | L | batch | seconds |", "|---|---|---|---|"]
        lines += [f"| {r['impl']} | {r['L']} | {r['batch']} | {r['seconds']:.4g} |" for r in pre_rows] + [""]
    dec = [r for r in rows if r["kind"] == "decode"]
    if dec:
        lines += ["## Decoding (tokens/s = batch x tokens / time, CUDA events)", "",
                  "| layer | batch | position | vs longest delay | tokens/s | s/step | cache bytes |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['impl']} | {r['batch']} | {r['position']} | {r['relative_to_delay']} | "
                  f"{r['tokens_per_s']:.4g} | {r['seconds_per_step']:.3g} | {r['cache_bytes']} |" for r in dec]
        lines += [""]
    errs = [r for r in rows if r["kind"] == "error"]
    if errs:
        lines += ["## Errors", ""]
        for r in errs:
            lines += [f"* {r['section']}: `{r['error']}`", "", "```", r["traceback"].rstrip(), "```", ""]
    return "\n".join(lines) + "\n"
