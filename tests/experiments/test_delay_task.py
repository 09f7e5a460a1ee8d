"""experiments/delay: the band-limited input (spectrum, RMS, start), the delayed targets, parameter
matching, the diagnostics on a hand-built delay line, and the resumable CLI (merge, exact resume)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ddesys.experiments import _train
from ddesys.experiments._ckpt import SIGNAL_AT_ENV
from ddesys.experiments.delay import models as M
from ddesys.experiments.delay.__main__ import main as delay_main
from ddesys.experiments.delay.data import RMS, Task, delayed, n_band, whitesignal
from ddesys.experiments.delay.train import RunConfig, delay_summary, response, train_run

SMOKE = ["--scale", "smoke", "--quiet"]


def _runs_of(out):
    return json.loads((Path(out) / "results.json").read_text())["runs"]


def _strip(run):
    return {k: v for k, v in run.items() if k != "seconds"}


# ------------------------------------------------------------------------------------------ data
@pytest.mark.parametrize("L,freq", [(1024, 50.0), (1000, 30.0), (256, 500.0), (64, 100.0)])
def test_signal_is_band_limited_with_rms_half_starting_at_zero(L, freq):
    dt = 1e-3
    x = whitesignal(16, L, dt, freq, np.random.default_rng(0))
    assert x.shape == (16, L) and x.dtype == np.float64
    np.testing.assert_allclose(np.sqrt(np.mean(x ** 2, axis=-1)), RMS, rtol=1e-12)
    assert np.all(x[:, 0] == 0)
    F = np.abs(np.fft.rfft(x, axis=-1))                    # (16, L//2+1)
    f = np.fft.rfftfreq(L, d=dt)
    above, band = f > freq, (f > 0) & (f <= freq)
    if above.any():
        assert F[:, above].max() < 1e-12 * F.max()         # zero above the cutoff, to rounding
    assert band.sum() == n_band(L, dt, freq) and np.all(F[:, band] > 0)   # every bin in the band is used
    # the same through Task (float32): zero above the cutoff to float32 rounding
    task = Task(L, (L // 4,), freq, dt)
    xs, _ = task.sample(4, np.random.default_rng(1))
    F32 = np.abs(np.fft.rfft(xs[..., 0].astype(np.float64), axis=-1))
    if above.any():
        assert F32[:, above].max() < 1e-5 * F32.max()


def test_bandwidth_sets_the_spectrum_and_draws_are_reproducible():
    lo = whitesignal(8, 512, 1e-3, 20.0, np.random.default_rng(5))
    hi = whitesignal(8, 512, 1e-3, 200.0, np.random.default_rng(5))
    f = np.fft.rfftfreq(512, d=1e-3)
    # mean frequency weighted by power grows with the band
    P_lo, P_hi = np.abs(np.fft.rfft(lo)) ** 2, np.abs(np.fft.rfft(hi)) ** 2
    assert (P_lo * f).sum() / P_lo.sum() < 20 < (P_hi * f).sum() / P_hi.sum() < 200
    np.testing.assert_array_equal(lo, whitesignal(8, 512, 1e-3, 20.0, np.random.default_rng(5)))
    with pytest.raises(ValueError, match="Nyquist"):
        whitesignal(1, 64, 1e-3, 600.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="below the lowest frequency"):
        Task(64, (8,), 10.0)                               # 1 / (64 ms) = 15.6 Hz > 10 Hz


def test_targets_are_the_input_shifted_by_each_lag_with_zeros_before():
    task = Task(200, (1, 37, 150), 100.0)
    x, y = task.sample(5, np.random.default_rng(2))
    assert x.shape == (5, 200, 1) and y.shape == (5, 200, 3) and task.n_out == 3
    for i, lag in enumerate(task.lags):
        for t in range(200):                               # written out position by position
            want = x[:, t - lag, 0] if t >= lag else np.zeros(5, np.float32)
            assert np.array_equal(y[:, t, i], want)
    assert np.array_equal(delayed(np.arange(6.0)[None], [2])[0, :, 0], [0, 0, 0, 1, 2, 3])
    for bad in [(), (0,), (200,), (5, 5)]:
        with pytest.raises(ValueError):
            Task(200, bad, 100.0)


# ------------------------------------------------------------------------------------------ models
def test_models_map_one_feature_to_one_output_per_lag_with_matched_parameters():
    task = Task(64, (8, 16), 100.0)
    ref = M.build(M.Arch(M.ModelSpec("s4d"), d_state=8), 12, task)
    budget = M.n_params(ref)
    for arch in [M.Arch(M.ModelSpec("ds4d"), d_state=8),
                 M.Arch(M.ModelSpec("ds4d"), d_state=8, delay_init="lag", p0=0.9),
                 M.Arch(M.ModelSpec("ds4d"), d_state=8, glu=False, norm="none")]:
        w = M.match_width(arch, budget, task)
        counts = {h: M.n_params(M.build(arch, h, task)) for h in (w - 1, w, w + 1)}
        assert abs(counts[w] - budget) <= min(abs(counts[w - 1] - budget), abs(counts[w + 1] - budget))
        assert abs(counts[w] - budget) / budget < 0.1
        model = M.build(arch, w, task, seed=0)
        x = torch.randn(2, 64, 1)
        assert model(x).shape == (2, 64, 2)
        layers = [m for m in model.modules() if hasattr(m, "nu_tau")]
        assert len(layers) == 2 and all(layer.l_max == 64 for layer in layers)
        if arch.delay_init == "lag":                       # every channel starts at the first lag
            for layer in layers:
                torch.testing.assert_close(layer.discrete(torch.float64).delay,
                                           torch.full((w,), 8.0, dtype=torch.float64))
                torch.testing.assert_close(torch.sigmoid(layer.r.double()), torch.full_like(layer.r, 0.9).double())
        if arch.norm == "none":
            assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
        y = model(torch.cat([x, torch.randn(2, 5, 1)], 1)[:, :64])    # causal: the future does not leak
        assert y.shape == (2, 64, 2)


def test_diagnostics_on_known_delays_and_a_perfect_delay_line():
    s = [torch.tensor([10.0, 40.5, 63.0], dtype=torch.float64), torch.tensor([20.0, 99.0], dtype=torch.float64)]
    (d,) = delay_summary(s, [40])
    assert d["layers"][0]["nearest"] == 0.5 and d["layers"][1]["nearest"] == 20.0
    assert d["within_1"] == pytest.approx(1 / 5) and d["nearest"] == 0.5
    (d,) = delay_summary(s, [30])                           # 10 + 20: a chain through both layers
    assert d["nearest_chain"] == 0.0 and d["nearest"] == 10.0

    class Shift(torch.nn.Module):                            # y[t] = x[t - 25]: the ideal model
        def forward(self, x):
            return torch.nn.functional.pad(x, (0, 0, 25, 0))[:, :x.shape[1]]
    x = torch.randn(3, 100, 1)
    (r,) = response(Shift(), x, [25], freq=100.0, dt=1e-3)
    assert r["g_at_lag"] == 1.0 and r["at_lag"] == 1.0 and r["peak"] == 25
    assert r["echoes"] == r["before"] == r["elsewhere"] == 0.0
    assert r["in_band_error"] < 1e-12 and r["in_band_gain"] == pytest.approx(1.0)
    (r,) = response(Shift(), x, [24], freq=100.0, dt=1e-3)                 # one step off: an in-band error
    assert r["at_lag"] == 1.0 and r["in_band_error"] > 0.1

    class Smooth(torch.nn.Module):                           # the delay seen through a band-limited kernel
        def forward(self, x):
            L = x.shape[1]
            h = np.zeros(L)
            h[25] = 1.0
            H = np.fft.rfft(h)
            H[np.fft.rfftfreq(L, 1e-3) > 100.0] = 0          # exact in the band, nothing above it
            k = torch.as_tensor(np.fft.irfft(H, n=L), dtype=x.dtype)
            X = torch.fft.rfft(torch.nn.functional.pad(x[..., 0], (0, L)), n=2 * L)   # linear, not circular
            K = torch.fft.rfft(torch.nn.functional.pad(k, (0, L)), n=2 * L)
            return torch.fft.irfft(X * K, n=2 * L)[:, :L, None]
    (r,) = response(Smooth(), x, [25], freq=100.0, dt=1e-3)
    assert r["at_lag"] < 0.9 and r["in_band_error"] < 1e-6                 # smeared, yet an exact delay in band


# ------------------------------------------------------------------------------------------ training and CLI
def test_training_run_records_curve_delays_and_diagnosis():
    task = Task(64, (16,), 100.0)
    cfg = RunConfig(task, M.Arch(M.ModelSpec("ds4d"), d_state=8, delay_init="lag"), 6, steps=4, batch=2, eval_every=2,
                    val_size=4)
    res = train_run(cfg)
    assert [p["step"] for p in res["curve"]] == [2, 4] and res["status"] == "done"
    assert res["rel_rmse"] == res["curve"][-1]["val_rel_rmse"] > 0
    dg = res["diagnosis"]
    assert len(dg["delays"]) == 2 and len(dg["delays"][0]) == 6
    assert dg["delay_summary"][0]["lag"] == 16 and sum(dg["delay_summary"][0]["hist_over_lag"]) == 12
    assert {"rel_rmse_tau_min", "rel_rmse_mu_zero", "kernels", "response"} <= set(dg)
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))).key() == cfg.key()


def test_cli_smoke_writes_results_and_report_and_reruns_merge(tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    args = SMOKE + ["--out", str(tmp_path)]
    assert delay_main(args) == 0
    runs = _runs_of(tmp_path)
    assert [r["config"]["arch"]["family"] for r in runs] == ["s4d", "ds4d"]
    assert runs[0]["n_params"] == pytest.approx(runs[1]["n_params"], rel=0.1)
    text = (tmp_path / "report.md").read_text()
    assert "## Relative RMSE at the end of training" in text and "## Where the DS4D delays ended" in text
    for fig in ("curves.png", "delays.png", "response.png"):
        assert (tmp_path / fig).stat().st_size > 0
    assert delay_main(args + ["--seeds", "1", "--models", "ds4d"]) == 0          # another seed: merged
    runs2 = _runs_of(tmp_path)
    assert [(r["config"]["arch"]["family"], r["config"]["seed"]) for r in runs2] == [("s4d", 0), ("ds4d", 0),
                                                                                    ("ds4d", 1)]
    assert runs2[:2] == runs
    assert "| 2 |" in (tmp_path / "report.md").read_text()                        # ds4d over 2 seeds
    assert delay_main(args + ["--models", "ds4d", "--delay-init", "lag", "--p0", "0.9"]) == 0   # a variant: kept
    assert len(_runs_of(tmp_path)) == 4
    assert delay_main(args) == 0 and len(_runs_of(tmp_path)) == 4                 # same configs: skipped


def test_bad_arguments_stop_at_parse_time(tmp_path, capsys):
    for bad in (["--lags", "64"], ["--freq", "600"], ["--p0", "1.0"], ["--delay-init", "constant"],
                ["--freq", "5"]):
        with pytest.raises(SystemExit) as exc:
            delay_main(SMOKE + ["--out", str(tmp_path)] + bad)
        assert exc.value.code == 2
    assert not (tmp_path / "results.json").exists()


def _final_state(out):
    (path,) = list((Path(out) / "checkpoints").glob("*.pt"))
    return torch.load(path, map_location="cpu", weights_only=True)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_interrupted_run_resumes_to_identical_final_metrics(tmp_path, monkeypatch):
    """SIGINT after step 3 through the shared test hook: the CLI checkpoints and exits 130; the same
    command resumes at step 4 and ends with the uninterrupted run's weights and results, bit for bit."""
    args = SMOKE + ["--models", "ds4d", "--steps", "7", "--eval-every", "2", "--keep-checkpoints",
                    "--checkpoint-every", "1000"]
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    assert delay_main(args + ["--out", str(ref)]) == 0
    monkeypatch.setenv(SIGNAL_AT_ENV, "3")
    assert delay_main(args + ["--out", str(cut)]) == 130
    assert _final_state(cut)["run"]["step"] == 3 and _runs_of(cut) == []         # claimed, nothing recorded
    monkeypatch.delenv(SIGNAL_AT_ENV)
    steps = []
    step = _train.Trainer.step
    monkeypatch.setattr(_train.Trainer, "step", lambda self, *a: (steps.append(a[-1]), step(self, *a))[1])
    assert delay_main(args + ["--out", str(cut)]) == 0
    assert steps == [4, 5, 6, 7]                                                   # resumed, not restarted
    a, b = _final_state(ref), _final_state(cut)
    assert _same(a["trainer"]["model"], b["trainer"]["model"])
    assert _same(a["trainer"]["optimizer"], b["trainer"]["optimizer"])
    (ra,), (rb,) = _runs_of(ref), _runs_of(cut)
    assert _strip(ra) == _strip(rb) and ra["rel_rmse"] == rb["rel_rmse"]
