"""Checks on the neural layer: FFT vs recurrent (Table 7), reductions, decoding (checks 1, 5, 6)."""
from __future__ import annotations

import numpy as np
import torch

from ddesys import nn as dnn
from ddesys.verification import reference
from ddesys.verification.reference import rel_err, rel_max, rel_rmse
from ddesys.nn.timing import decoder, flat_in_position

ANCHOR = "anchor: float64 recurrent vs independent NumPy recurrence (seed 0)"
PAPER, AUTO32, AUTO64 = "paper eps=1e-3 f32 synthesis", "auto (default)", "float64 auto"
INFORMATIONAL = "informational (paper's setting)"
#: setting -> what the row is judged against (the check's pass rule below, in words)
CRITERION = {PAPER: INFORMATIONAL, AUTO32: "rel. RMSE mean + std <= 1e-5, max abs <= 1.2e-4",
             AUTO64: "rel. RMSE <= 1e-9", ANCHOR: "rel. RMSE <= 1e-12"}


def _model(H, seed, L):
    torch.manual_seed(seed)
    return dnn.SequenceModel(d_input=H, d_output=H, d_model=H, n_layers=4, layer="ds4d",
                             layer_kw=dict(d_state=64, l_max=L, seed=seed), glu=True)


def _set_contour(model, eps, kernel_dtype):
    for blk in model.blocks:
        blk.layer.eps, blk.layer.kernel_dtype = eps, kernel_dtype


def forward_fft_length(model, L, dtype):
    """The FFT length ``M`` the model's DS4D layers synthesize their kernels at in a length-``L`` forward in
    ``dtype``, as the layers report it (:meth:`DS4D.contour` with the forward's ``out_dtype``); one int
    when every layer agrees, else their values joined by ``"/"``."""
    Ms = sorted({blk.layer.contour(L, out_dtype=dtype)[0] for blk in model.blocks})
    return Ms[0] if len(Ms) == 1 else "/".join(map(str, Ms))


@torch.no_grad()
def check_fft_vs_recurrent(cfg, plot_dir, progress):
    """Check 1: the paper's Table 7 protocol on a 4-layer DS4D model (state 64, explicit B, pre-norm,
    GLU), eps = 1e-3, M = nextpow2(2L) (informational), next to the automatic setting and float64 (judged).
    Each row's ``M`` is the FFT length its forward used, asked of the layers (:func:`forward_fft_length`).

    The measured quantity is the paper's: the FFT path against the model's own recurrent path. That
    reference is anchored once per length (seed 0, float64) to an independent NumPy recurrence
    (:func:`verification.reference.model_forward`), so the check does not rest on the library alone."""
    rows = []
    settings = [(PAPER, torch.float32, 1e-3, torch.float32),
                (AUTO32, torch.float32, "auto", torch.float64),
                (AUTO64, torch.float64, "auto", torch.float64)]
    for L in cfg["Ls"]:
        for name, dtype, eps, kdt in settings:
            rr, ma = [], []
            for seed in range(cfg["seeds"]):
                model = _model(cfg["H"], seed, L).to(dtype)
                _set_contour(model, eps, kdt)
                x = torch.randn(1, L, cfg["H"], dtype=dtype, generator=torch.Generator().manual_seed(100 + seed))
                y_fft = model(x)
                y_rec = model(x, mode="recurrent")
                # in the model's precision, as the paper's protocol (these numbers are the report's)
                rr.append(float((y_fft - y_rec).pow(2).mean().sqrt() / y_rec.pow(2).mean().sqrt()))
                ma.append(float((y_fft - y_rec).abs().max()))
                if dtype == torch.float64 and seed == 0:
                    y_ref = reference.model_forward(model, x)
                    anchor = dict(L=L, setting=ANCHOR, criterion=CRITERION[ANCHOR], M=None,
                                  rel_rmse_mean=rel_rmse(y_rec, y_ref), rel_rmse_std=0.0,
                                  max_abs_mean=float((y_rec - y_ref).abs().max()), max_abs_std=0.0)
                progress()
            rows.append(dict(L=L, setting=name, criterion=CRITERION[name], M=forward_fft_length(model, L, dtype),
                             rel_rmse_mean=np.mean(rr),
                             rel_rmse_std=np.std(rr), max_abs_mean=np.mean(ma), max_abs_std=np.std(ma)))
        rows.append(anchor)
        progress()
    auto32 = [r for r in rows if r["setting"] == AUTO32]
    f64 = [r for r in rows if r["setting"] == AUTO64]
    ok = all(r["rel_rmse_mean"] + r["rel_rmse_std"] <= 1e-5 and r["max_abs_mean"] <= 1.2e-4 for r in auto32) \
        and all(r["rel_rmse_mean"] <= 1e-9 for r in f64) \
        and all(r["rel_rmse_mean"] <= 1e-12 for r in rows if r["setting"] == ANCHOR)
    plot = _plot_table7([r for r in rows if r["setting"] != ANCHOR], plot_dir)
    return dict(name="FFT vs recurrent (Table 7 protocol)", passed=ok, rows=rows, plots=[plot],
                criterion="default float32: relative RMSE <= 1e-5 and max abs error <= 1.2e-4 (the paper's "
                          "figures); float64: relative RMSE <= 1e-9; anchor: the float64 recurrent path (the "
                          "reference above) within relative RMSE 1e-12 of an independent NumPy recurrence "
                          "(verification.reference); the paper's own setting is shown for comparison, not judged "
                          "(column criterion)",
                setup=f"4 layers, H={cfg['H']}, state 64, explicit B, pre-norm, GLU, {cfg['seeds']} seeds, "
                      f"batch 1, L in {cfg['Ls']}; column M: the FFT length each row's forward used, as the "
                      "layer reports it (DS4D.contour for the row's dtype and contour settings): nextpow2(2L) "
                      "for the paper's eps = 1e-3 and for float64, nextpow2(L) for the default float32 forward "
                      "(float64 synthesis delivered in float32, docs/theory.md §5.4)",
                notes=["The rows \"paper eps=1e-3 f32 synthesis\" run the paper's own contour (eps = 1e-3, "
                       "M = nextpow2(2L), float32 synthesis) for comparison: they are informational and not "
                       "judged, so their error may exceed 1e-5, the bound the library default is held to. "
                       "PASS rests on the rows whose criterion column gives a bound.",
                       "M — on the anchor rows: they compare two recurrences, no FFT is involved."])


def _plot_table7(rows, plot_dir):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name in dict.fromkeys(r["setting"] for r in rows):
        rs = [r for r in rows if r["setting"] == name]
        ax.errorbar([r["L"] for r in rs], [r["rel_rmse_mean"] for r in rs], [r["rel_rmse_std"] for r in rs],
                    marker="o", capsize=3, label=name + (" (informational)" if name == PAPER else ""))
    ax.axhline(1e-5, color="k", ls=":", lw=1, label="1e-5: the paper's float32 level, the default's bound")
    ax.set(xscale="log", yscale="log", xlabel="sequence length L (tokens)", ylabel="relative RMSE (output)",
           title="DS4D model: FFT path vs exact recurrence (mean +- std over seeds)")
    Ls = sorted(set(r["L"] for r in rows))
    ax.set_xticks(Ls, [str(v) for v in Ls])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    path = plot_dir / "fft_vs_recurrent.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


@torch.no_grad()
def check_reductions(cfg, plot_dir, progress):
    """Check 5: p = 0 gives S4D; mu = 0 gives the diagonal SSM; to_ddesys() round trip."""
    H, N, L = 16, 64, 1024
    out = []
    ds = dnn.DS4D(H, N, l_max=L, p0=0.0, seed=1).double()
    s4 = dnn.S4D(H, N, seed=1).double()
    s4.load_state_dict({k: v for k, v in ds.state_dict().items() if k in s4.state_dict()})
    K_ds = ds.kernel(L, M=8 * L).numpy()                          # M = 8L: contour error ~1e-14
    # independent closed form: K_t = 2 Re sum_n C_n bbar_n exp(t dt a_n), numpy, no library code
    dt = np.exp(ds.log_dt.numpy())[:, None]
    a = -np.exp(ds.nu_re.numpy()) + 1j * ds.nu_im.numpy()
    Bc = ds.B.numpy()[..., 0] + 1j * ds.B.numpy()[..., 1]
    Cc = ds.C.numpy()[..., 0] + 1j * ds.C.numpy()[..., 1]
    cb = Cc * Bc * (np.exp(a * dt) - 1) / a
    K_ref = 2 * np.real(np.einsum("hn,hnl->hl", cb, np.exp(a[..., None] * dt[..., None] * np.arange(L))))
    e1 = rel_err(K_ds, K_ref)
    e2 = rel_err(s4.kernel(L, torch.float64), K_ref)
    out.append(dict(case="p = 0: DS4D kernel vs closed-form S4D kernel", error=e1, bound=1e-12))
    out.append(dict(case="S4D layer kernel vs closed form", error=e2, bound=1e-12))
    progress()
    # zero delayed branch of a ddesys system == pure diagonal SSM
    sys_ = dnn.DS4D(H, N, l_max=L, seed=2).to_ddesys()
    import ddesys
    plain = ddesys.DiscreteDelaySystem(sys_.lam, np.zeros_like(sys_.mu), sys_.bbar, sys_.c, sys_.delay)
    K0 = plain.kernel(L)
    Kc = 2 * np.real(np.einsum("hn,hnl->hl", sys_.c * sys_.bbar, sys_.lam[..., None] ** np.arange(L)))
    out.append(dict(case="ddesys: mu = 0 kernel vs lam^t closed form", bound=1e-12, error=rel_err(K0, Kc)))
    progress()
    # to_ddesys round trip: the layer's and the system's kernels and recurrences, each against the
    # independent impulse response and recurrence of verification.reference (on the layer's raw parameters)
    layer = dnn.DS4D(H, N, l_max=L, seed=3).double()
    sysd = layer.to_ddesys()
    ref = reference.ds4d_params(layer)                              # lam, mu, bbar, c, delay, d
    K_ref = reference.recurrence_kernel(*ref[:5], L)
    # one contour for both; M = 4L keeps the restoration's amplification of FFT rounding near 1e3
    # instead of 1e5 at M = 2L
    M, rho = layer.contour(L, M=4 * L)
    out.append(dict(case="layer kernel (M = 4L) vs independent impulse response", bound=1e-12,
                    error=rel_err(layer.kernel(L, M=M), K_ref)))
    out.append(dict(case="to_ddesys(): kernel (same contour) vs independent impulse response", bound=1e-12,
                    error=rel_err(sysd.kernel(L, eps=rho ** M, M=M), K_ref)))
    x = torch.randn(2, L, H, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    xb = np.swapaxes(x.numpy(), 1, 2)                            # (B, H, L)
    y_ref = reference.recurrence(*ref, xb)
    out.append(dict(case="layer recurrent path vs independent recurrence", bound=1e-12,
                    error=rel_max(np.swapaxes(layer(x, mode="recurrent").numpy(), 1, 2), y_ref)))
    out.append(dict(case="to_ddesys(): simulate vs independent recurrence", bound=1e-12,
                    error=rel_max(sysd.simulate(xb), y_ref)))
    progress()
    ok = all(r["error"] <= r["bound"] for r in out)
    return dict(name="Reductions and round trips", passed=ok, rows=out, plots=[],
                criterion="each error <= its bound (relative to the kernel / output scale, float64); "
                          "references independent of the library: closed forms and verification.reference",
                setup=f"H={H}, N={N}, L={L}, S4D-Inv init")


def _load():
    """The 1-, 5- and 15-minute load averages as text (``"n/a"`` where the OS has none)."""
    import os

    try:
        return " / ".join(f"{v:.2f}" for v in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


@torch.no_grad()
def check_decode(cfg, plot_dir, progress):
    """Check 6: prefill then step-by-step decoding equals the exact recurrence (an independent NumPy loop,
    :func:`verification.reference.recurrence`); per-token time vs position."""
    H, N, l_max = cfg["decode_H"], 64, cfg["decode_lmax"]
    layer = dnn.DS4D(H, N, l_max=l_max, seed=0).double()
    T = cfg["decode_len"]
    x = torch.randn(1, T, H, dtype=torch.float64)
    y_ref = reference.recurrence(*reference.ds4d_params(layer), x.numpy().transpose(0, 2, 1))   # (1, H, T)
    cache = layer.allocate_inference_cache(1, dtype=torch.float64)
    p = T // 2
    y_pre = layer.prefill(x[:, :p], cache)
    y_steps = torch.stack([layer.step(x[:, t], cache) for t in range(p, T)], dim=1)
    err = rel_max(torch.cat([y_pre, y_steps], dim=1).numpy().transpose(0, 2, 1), y_ref)
    progress()
    # per-token time against position (float32 cache, batch 1), positions timed in alternation
    layer32 = dnn.DS4D(H, N, l_max=l_max, seed=0)
    positions = cfg["decode_positions"]
    runs = [decoder(layer32, H, pos, 32)[0] for pos in positions]
    load0 = _load()
    times, ratio, flat, attempts = flat_in_position(runs, bound=1.5)
    times = [t / 32 for t in times]
    progress(len(positions))
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(positions, np.array(times) * 1e3, "o-")
    ax.set(xlabel="position after prefill (tokens)", ylabel="time per token (ms)", xscale="log",
           title=f"DS4D decode step, H={H}, N={N}, l_max={l_max}, batch 1", ylim=(0, max(times) * 1.5e3))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(plot_dir / "decode_time.png", dpi=110)
    plt.close(fig)
    rows = [dict(case="prefill + step vs independent recurrence (relative max error, float64)", value=err,
                 bound=1e-9),
            dict(case=f"per-token time at {positions[-1]} / at {positions[0]}", value=ratio, bound=1.5)]
    rows += [dict(case=f"time per token at position {p_} (s)", value=t, bound=None) for p_, t in zip(positions, times)]
    return dict(name="Decoding after prefill", passed=err <= 1e-9 and flat, rows=rows,
                plots=["decode_time.png"],
                criterion="decode equals the exact recurrence (independent NumPy loop) to 1e-9 (float64); "
                          "per-token time flat in position: the fastest of 15 interleaved timings per position, "
                          "ratio <= 1.5, measured up to 3 times (load only adds time; a cost growing with the "
                          "position fails every attempt)",
                setup=f"H={H}, N={N}, l_max={l_max}, sequence {T}, prefill {p}; timing attempts {attempts}, "
                      f"load averages {load0} at the start",
                notes=["bound — on the time-per-token rows: they are informational (machine-dependent); "
                       "the judged quantity is their ratio, the row above them."])


__all__ = ["check_fft_vs_recurrent", "check_reductions", "check_decode"]
