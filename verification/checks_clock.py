"""Check 9: DS4D with the selective clock (docs/theory.md §10): the training path (the FFT on the
compacted sequence) vs the recurrent path vs decoding vs prefill, anchored to the independent real-time
loop :func:`verification.reference.clocked_recurrence`."""
from __future__ import annotations

import numpy as np
import torch

from ddesys import nn as dnn
from ddesys.verification import reference
from ddesys.verification.reference import rel_rmse

VOCAB, PAUSE_FRACTIONS = 32, (0.0, 0.5, 0.9)


def _tokens(B, L, frac, seed):
    """Random ids ``(B, L)`` with about ``frac`` of them the pause token 0 (placed at random)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (B, L), generator=g)
    return torch.where(torch.rand(B, L, generator=g) < frac, torch.zeros_like(ids), ids)


def _model(H, seed, ticks_max, dtype):
    torch.manual_seed(seed)                              # the model's torch modules (embedding, linears)
    return dnn.SequenceModel(VOCAB, VOCAB, d_model=H, n_layers=2, embedding=True, clock=dnn.TokenClock((0,)),
                             layer_kw=dict(d_state=64, l_max=ticks_max, seed=seed)).to(dtype).eval()


@torch.no_grad()
def check_clock(cfg, plot_dir, progress):
    """Per pause fraction: float32 and float64 FFT (compacted) vs the model's recurrent path, float64
    recurrent vs the NumPy real-time loop, float64 decoding and prefill + decoding vs recurrent."""
    rows = []
    L, B, H = min(cfg["Ls"][0], 512), 2, cfg["H"]
    for frac in PAUSE_FRACTIONS:
        ids = _tokens(B, L, frac, 300 + int(100 * frac))
        T = max(8, int((ids != 0).sum(1).max()))                    # the longest tick count: the delay horizon
        for name, dtype in (("float32 FFT (compacted) vs recurrent", torch.float32),
                            ("float64 FFT (compacted) vs recurrent", torch.float64)):
            rr = []
            for seed in range(cfg["seeds"]):
                model = _model(H, seed, T, dtype)
                rr.append(rel_rmse(model(ids), model(ids, mode="recurrent")))
            rows.append(dict(pauses=frac, setting=name, L=L, rel_rmse_mean=float(np.mean(rr)),
                             rel_rmse_std=float(np.std(rr))))
        model = _model(H, 0, T, torch.float64)
        y_rec = model(ids, mode="recurrent")
        anchor = rel_rmse(y_rec, reference.model_forward(model, ids))
        n = min(L, 128)
        caches = model.allocate_inference_cache(B, dtype=torch.float64)
        plan = model.compile_step(caches)                             # the compiled model step
        dec = rel_rmse(torch.stack([plan.step(ids[:, t]) for t in range(n)], 1), y_rec[:, :n])
        caches = model.allocate_inference_cache(B, dtype=torch.float64)
        plan = model.compile_step(caches)
        half = n // 2
        y_pre = torch.cat([model.prefill(ids[:, :half], caches),
                           torch.stack([plan.step(ids[:, t]) for t in range(half, n)], 1)], 1)
        pre = rel_rmse(y_pre, y_rec[:, :n])
        for setting, v in (("anchor: float64 recurrent vs NumPy real-time loop", anchor),
                           (f"float64 decode (first {n} tokens) vs recurrent", dec),
                           (f"float64 prefill {half} + decode {n - half} vs recurrent", pre)):
            rows.append(dict(pauses=frac, setting=setting, L=L, rel_rmse_mean=v, rel_rmse_std=0.0))
        progress()
    ok = all(r["rel_rmse_mean"] + r["rel_rmse_std"] <= 1e-5 for r in rows if r["setting"].startswith("float32")) \
        and all(r["rel_rmse_mean"] <= 1e-10 for r in rows
                if r["setting"].startswith(("float64 FFT", "float64 prefill"))) \
        and all(r["rel_rmse_mean"] <= 1e-12 for r in rows if r["setting"].startswith(("anchor", "float64 decode")))
    return dict(name="DS4D with the selective clock (compacted FFT vs recurrent vs decode)", passed=ok, rows=rows,
                plots=[],
                criterion="float32 relative RMSE <= 1e-5 (check 1's bound), float64 FFT <= 1e-10; the float64 "
                          "recurrent path within 1e-12 of an independent NumPy loop in real time with a tick "
                          "counter per row (verification.reference.clocked_recurrence); decoding within 1e-12 of "
                          "it, prefill (an FFT) + decoding within 1e-10",
                setup=f"2-layer token model (vocabulary {VOCAB}, pause token 0), H={H}, state 64, l_max the longest "
                      f"tick count, {cfg['seeds']} seeds, batch {B}, L={L}, pause fractions {list(PAUSE_FRACTIONS)}")


@torch.no_grad()
def check_soft_clock(cfg, plot_dir, progress):
    """The learned clock (§10.4): the scan of a gated layer vs an independent NumPy loop (float64), its
    float32 scan vs the float64 one, decoding and prefill + decoding vs the scan."""
    from ddesys.nn.selective import SoftClocked
    from ddesys.nn.selective import GateClock
    rows = []
    L, B, H = min(cfg["Ls"][0], 256), 2, min(cfg["H"], 16)
    for init in (0.2, 0.6, 0.95):                                # the gates' mean clock at initialization
        rr = {}
        for seed in range(cfg["seeds"]):
            inner = dnn.DS4D(H, d_state=16, l_max=L, seed=seed).double()
            gate = GateClock(H, init=init, seed=seed).double()
            with torch.no_grad():
                gate.w.mul_(20.0)                               # clocks that vary along the sequence
            layer = SoftClocked(inner, gate).eval()
            x = torch.randn(B, L, H, dtype=torch.float64, generator=torch.Generator().manual_seed(400 + seed))
            y = layer(x)
            lam, mu, bbar, c, k, alpha, delay = (v.numpy() for v in inner.discrete(torch.float64))
            ref = reference.soft_clock_recurrence(lam, mu, bbar, c, delay, inner.D.double().numpy(),
                                               x.transpose(1, 2).numpy(), gate(x).numpy())
            rr.setdefault("anchor: float64 scan vs NumPy loop", []).append(rel_rmse(y.transpose(1, 2), ref))
            lay32 = SoftClocked(dnn.DS4D(H, d_state=16, l_max=L, seed=seed), GateClock(H, init=init, seed=seed))
            lay32.load_state_dict(layer.state_dict())
            rr.setdefault("float32 scan vs float64 scan", []).append(rel_rmse(lay32(x.float()).double(), y))
            cache = layer.allocate_inference_cache(B, max_seqlen=L, dtype=torch.float64)
            n = min(L, 128)
            yd = torch.stack([layer.step(x[:, t], cache) for t in range(n)], 1)
            rr.setdefault(f"float64 decode (first {n} tokens) vs scan", []).append(rel_rmse(yd, y[:, :n]))
            cache = layer.allocate_inference_cache(B, max_seqlen=L, dtype=torch.float64)
            yp = torch.cat([layer.prefill(x[:, :n // 2], cache),
                            torch.stack([layer.step(x[:, t], cache) for t in range(n // 2, n)], 1)], 1)
            rr.setdefault(f"float64 prefill {n // 2} + decode {n - n // 2} vs scan", []).append(rel_rmse(yp, y[:, :n]))
        for setting, v in rr.items():
            rows.append(dict(clock_init=init, setting=setting, L=L, rel_rmse_mean=float(np.mean(v)),
                             rel_rmse_std=float(np.std(v))))
        progress()
    ok = all(r["rel_rmse_mean"] + r["rel_rmse_std"] <= 1e-5 for r in rows if r["setting"].startswith("float32")) \
        and all(r["rel_rmse_mean"] <= 1e-12 for r in rows if not r["setting"].startswith("float32"))
    return dict(name="DS4D with a learned (soft) clock (scan vs loop vs decode)", passed=ok, rows=rows, plots=[],
                criterion="the float64 scan within 1e-12 of an independent NumPy loop (verification.reference."
                          "soft_clock_recurrence), decoding and prefill + decoding within 1e-12 of the scan, "
                          "the float32 scan within 1e-5 (relative RMSE)",
                setup=f"one gated layer (nn.selective.SoftClocked with nn.selective.GateClock, weights x20 so the "
                      f"clock varies), H={H}, state 16, l_max={L}, {cfg['seeds']} seeds, batch {B}, L={L}, mean "
                      "clock at initialization 0.2 / 0.6 / 0.95")
