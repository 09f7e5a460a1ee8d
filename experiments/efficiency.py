"""The paper's efficiency benchmark (section 5.2, Figure 3; appendix C.3) on this machine.

    python -m ddesys.experiments.efficiency                      # CPU scale (batch 2, few steps), ~5 min
    python -m ddesys.experiments.efficiency --scale paper        # the paper's protocol (CUDA: batch 32, ...)
    python -m ddesys.experiments.efficiency --scale quick        # seconds

Models: 4-layer backbones (state size 64, explicit B, pre-norm, GLU output, float32): S4D at H = 256,
DS4D hidden-matched (H = 256) and DS4D parameter-matched (the width whose blocks' parameter count is
closest to S4D's: 243 here, 241 in the paper, whose per-channel parameter count differs slightly).
For L in {1024, ..., 8192}:

* training throughput, tokens/s (forward + backward + AdamW step; the models are timed interleaved, so a
  shared machine's drifting load hits all alike) and, on CUDA, peak allocated memory;
* decoding throughput, tokens/s at batch 1 after prefilling L tokens, retained history fixed at 8192
  (``l_max``) so the trend shows per-token compute, not cache growth;
* decoding memory with the retained history equal to L: resident cache bytes (and, on CUDA, the peak).

Writes ``efficiency.json`` and ``efficiency.png`` (Figure 3's four panels, of the scale just run) to
``--out``. ``efficiency.json`` holds one record per (scale, device, length), saved as each length
finishes: a rerun into the same folder keeps the other scales' records and times only the lengths not
yet there, so Ctrl-C keeps the finished lengths and the same command resumes; a length another process
is timing is skipped. Older single-run ``efficiency.json`` files are read as such records.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import torch

from ddesys.experiments._models import ModelSpec
from ddesys.experiments._runs import RunSchema, add_store_arguments, config_key, open_results, run_records
from ddesys.experiments._sizes import closest_width
from ddesys.experiments._sizes import n_params as _count
from ddesys.io import provenance
from ddesys.nn.timing import decoder, interleaved, trainer

PROGRAM = "ddesys.experiments.efficiency"      # the owner named in efficiency.json
RESULTS = "efficiency.json"

SCALES = {  # H, batch, lengths, timed train steps, decode warmup, timed decode tokens, retained history
    "smoke": dict(H=16, batch=1, Ls=(64, 128), train_reps=1, dec_warm=1, dec_tokens=2, history=128),
    "quick": dict(H=32, batch=1, Ls=(256, 512), train_reps=2, dec_warm=4, dec_tokens=8, history=512),
    "cpu": dict(H=256, batch=2, Ls=(1024, 2048, 4096, 8192), train_reps=3, dec_warm=8, dec_tokens=32,
                history=8192),
    "paper": dict(H=256, batch=32, Ls=(1024, 2048, 4096, 8192), train_reps=50, dec_warm=32, dec_tokens=256,
                  history=8192),
}
N_LAYERS, D_STATE = 4, 64


S4D, DS4D = ModelSpec("s4d"), ModelSpec("ds4d")


def backbone(spec, H, l_max=None):
    """The benchmark's 4-layer model ``(B, L, H) -> (B, L, H)`` of ``spec`` (a
    :class:`~experiments._models.ModelSpec`; DS4D's delays up to ``l_max``)."""
    kw = {"d_state": D_STATE}
    if spec.is_ds4d:
        kw["l_max"] = l_max
    return spec.sequence_model(H, H, kw, d_model=H, n_layers=N_LAYERS)


def n_params(model):
    return _count(model, trainable=False)


def matched_width(H):
    """DS4D width whose 4 blocks (the backbone, without the input and output projections) have the
    parameter count closest to S4D's at ``H``."""
    budget = n_params(backbone(S4D, H).blocks)
    return closest_width(lambda w: n_params(backbone(DS4D, w, 1024).blocks), budget, H // 2, H)


def _peak_memory(fn, device, reps=20):
    if not device.startswith("cuda"):
        return None
    torch.cuda.reset_peak_memory_stats()
    for _ in range(reps):
        fn()
    return int(torch.cuda.max_memory_allocated())


def cache_bytes(caches):
    return sum(c.nbytes if hasattr(c, "nbytes") else c.h.numel() * c.h.element_size() for c in caches)


def _specs(H):
    """The three models of a scale at S4D width ``H``: ``(name, spec, width)``."""
    return [("S4D", S4D, H), ("DS4D hidden-matched", DS4D, H), ("DS4D param-matched", DS4D, matched_width(H))]


def measure(scale, device, L, specs=None):
    """Time the models of ``scale`` at length ``L``: one row per model (``specs``: :func:`_specs`)."""
    s = SCALES[scale]
    specs = specs or _specs(s["H"])
    B = s["batch"]
    torch.manual_seed(0)
    models = [backbone(kind, w, L).to(device) for _, kind, w in specs]
    xs = [torch.randn(B, L, w, device=device) for _, _, w in specs]
    steps = [trainer(m, x, torch.optim.AdamW, device=device) for m, x in zip(models, xs)]
    for st in steps:                                        # burn-in run (JIT, FFT plans, allocator)
        st()
    t_train = interleaved(steps, s["train_reps"])
    mem_train = [_peak_memory(st, device) for st in steps]
    # decoding: retained history fixed (l_max = history) for throughput, = L for memory
    dec = [backbone(kind, w, s["history"]).to(device).eval() for _, kind, w in specs]
    runs = [decoder(m, w, L, s["dec_tokens"], device)[0] for m, (_, _, w) in zip(dec, specs)]
    for r in runs:
        for _ in range(max(1, s["dec_warm"] // s["dec_tokens"])):
            r()
    t_dec = interleaved(runs, 3)
    mem_dec = []
    for (_, kind, w) in specs:
        m = backbone(kind, w, L).to(device).eval()
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        r, caches = decoder(m, w, L, 4, device)
        r()
        mem_dec.append((cache_bytes(caches), int(torch.cuda.max_memory_allocated())
                        if device.startswith("cuda") else None))
    return [{"model": name, "H": w, "params": n_params(models[i]), "L": L,
             "train_tokens_per_s": B * L / t_train[i], "train_peak_bytes": mem_train[i],
             "decode_tokens_per_s": s["dec_tokens"] / t_dec[i], "decode_cache_bytes": mem_dec[i][0],
             "decode_peak_bytes": mem_dec[i][1]} for i, (name, kind, w) in enumerate(specs)]


def _settings(s):
    return {k: list(v) if isinstance(v, tuple) else v for k, v in s.items()}


def _about(scale, device, rows):
    """The single-run view of ``rows`` that :func:`table` and :func:`plot` read."""
    return {"scale": scale, "device": device, "settings": _settings(SCALES.get(scale, {})), "n_layers": N_LAYERS,
            "d_state": D_STATE, "rows": rows}


def run(scale="cpu", device="cpu", progress=True):
    """Measure every length of ``scale`` at once (no results file); returns a JSON-ready dict (``rows``:
    one per model and length)."""
    from tqdm.auto import tqdm
    specs = _specs(SCALES[scale]["H"])
    rows = [row for L in tqdm(SCALES[scale]["Ls"], desc="lengths", disable=not progress)
            for row in measure(scale, device, L, specs)]
    return {**_about(scale, device, rows), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


# ------------------------------------------------------------------------------------------ results file
#: what table() and plot() read of a record: its rows, each of these types
SCHEMA = RunSchema(fields=("config", "rows"), points="rows",
                   curve=("model", "H", "params", "L", "train_tokens_per_s", "decode_tokens_per_s",
                          "decode_cache_bytes"),
                   point_types={"model": "str", "H": "int", "params": "int", "L": "int", "decode_cache_bytes": "int",
                                "train_peak_bytes": "int|null", "decode_peak_bytes": "int|null"})


def length_config(scale, device, L, settings, n_layers=N_LAYERS, d_state=D_STATE):
    """The configuration of one record: the scale and its settings (without its list of lengths), the
    device, the length ``L`` and the backbone's depth and state size."""
    return {"scale": scale, "device": device, "L": L, **{k: v for k, v in _settings(settings).items() if k != "Ls"},
            "n_layers": n_layers, "d_state": d_state}


def _rekey(run):
    c = run["config"]
    return config_key(f"{c['scale']}|{c['device']}|L{c['L']}", c)


def _legacy(data, path):
    """An ``efficiency.json`` of the earlier layout (one run of one scale: ``settings`` and ``rows``) as one
    record per length, in the current layout; ``None`` for any other layout."""
    if not isinstance(data.get("rows"), list) or not isinstance(data.get("settings"), dict):
        return None
    groups = {}
    for row in data["rows"]:
        groups.setdefault(repr(row.get("L") if isinstance(row, dict) else None), []).append(row)
    keep = {k: data[k] for k in ("date", "torch", "threads") if k in data}
    runs = [{"config": length_config(data.get("scale"), data.get("device"), rows[0].get("L") if isinstance(
                rows[0], dict) else None, data["settings"], data.get("n_layers"), data.get("d_state")),
             "status": "done", "rows": rows, **keep} for rows in groups.values()]
    meta = {k: data[k] for k in ("ddesys", "commit") if isinstance(data.get(k), str)}
    if isinstance(data.get("command"), str):
        meta["commands"] = [data["command"]]
    return {"program": PROGRAM, "meta": meta, "runs": runs}


def plot(res, path):
    """Figure 3: training / decoding throughput and memory against L, one line per model."""
    from ddesys.plot import pyplot
    plt = pyplot()
    panels = [("train_tokens_per_s", "training throughput (tokens/s)"),
              ("decode_tokens_per_s", "decoding throughput (tokens/s)"),
              ("train_peak_bytes", "training memory, peak (MiB)"), ("decode_cache_bytes", "decoding cache (MiB)")]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.4))
    models = list(dict.fromkeys(r["model"] for r in res["rows"]))
    for ax, (key, title) in zip(axes, panels):
        for m in models:
            rs = [r for r in res["rows"] if r["model"] == m and r[key] is not None]
            if rs:
                scale = 2.0 ** -20 if "bytes" in key else 1.0
                ax.plot([r["L"] for r in rs], [r[key] * scale for r in rs], "o-", label=m)
        if key == "train_peak_bytes" and not res["device"].startswith("cuda"):
            ax.text(0.5, 0.5, "peak memory is measured\non CUDA only", ha="center", va="center",
                    transform=ax.transAxes)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length L")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{res['n_layers']}-layer backbones, N = {res['d_state']}, {res['device']}, "
                 f"batch {res['settings']['batch']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(res):
    lines = [f"{'model':22s} {'H':>4s} {'params':>10s} {'L':>6s} {'train tok/s':>12s} {'decode tok/s':>13s} "
             f"{'cache MiB':>10s} {'train peak MiB':>15s}"]
    for r in res["rows"]:
        peak = f"{r['train_peak_bytes'] / 2**20:15.1f}" if r["train_peak_bytes"] is not None else f"{'-':>15s}"
        lines.append(f"{r['model']:22s} {r['H']:4d} {r['params']:10,d} {r['L']:6d} {r['train_tokens_per_s']:12.0f} "
                     f"{r['decode_tokens_per_s']:13.1f} {r['decode_cache_bytes'] / 2**20:10.2f} {peak}")
    return "\n".join(lines)


def main(argv=None):
    """The CLI (module docstring); returns the exit code: 0, or 130 when stopped by Ctrl-C (the finished
    lengths are kept; the same command resumes)."""
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.efficiency",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=tuple(SCALES), default="cpu")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path, default=Path("efficiency_out"))
    ap.add_argument("--quiet", action="store_true")
    add_store_arguments(ap)
    args = ap.parse_args(argv)
    command = " ".join(["python -m ddesys.experiments.efficiency", *(sys.argv[1:] if argv is None else argv)])
    meta = {"command": command, **provenance()}
    store = open_results(args.out, "efficiency", _rekey, args, meta, SCHEMA, files=("efficiency.png",), name=RESULTS,
                         legacy=_legacy, folders=())  # before any work: a foreign or damaged folder fails at once
    t0, s, specs = time.perf_counter(), SCALES[args.scale], []

    def job(L):
        def fn():
            if not specs:
                specs.extend(_specs(s["H"]))
            t = time.perf_counter()
            rows = measure(args.scale, args.device, L, specs)
            if not args.quiet:
                print(f"L = {L}: timed in {time.perf_counter() - t:.0f} s", flush=True)
            return {"config": length_config(args.scale, args.device, L, s), "status": "done", "rows": rows,
                    "seconds": time.perf_counter() - t, "date": datetime.date.today().isoformat(),
                    "torch": torch.__version__, "threads": torch.get_num_threads()}
        return _rekey({"config": length_config(args.scale, args.device, L, s)}), f"L = {L}", fn
    code = run_records(store, [job(L) for L in s["Ls"]], verb="timing")
    if code:
        return code
    mine = {r["config"]["L"]: r for r in store.latest() if r.get("status", "done") == "done" and r["key"] in
            {_rekey({"config": length_config(args.scale, args.device, L, s)}) for L in s["Ls"]}}
    res = _about(args.scale, args.device, [row for L in sorted(mine) for row in mine[L]["rows"]])
    figure = args.out / "efficiency.png"
    try:                                  # the figure is optional (a GPU image may lack matplotlib)
        plot(res, figure)
    except ImportError as e:
        print(f"(no figure: {e})")
        figure = None
    print(table(res))
    print(f"\nresults in {store.path}{f', figure {figure}' if figure else ''} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
