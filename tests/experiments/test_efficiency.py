"""experiments/efficiency: the paper's Figure 3 protocol runs end to end and sizes what it should."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from ddesys.experiments import efficiency as eff


def test_parameter_matched_width_follows_the_block_count():
    """Per block, by hand: S4D 2H^2 + 4H + (6 N/2 + 2) H (LayerNorm, GLU projection, layer), DS4D
    2H^2 + 4H + (8 N/2 + 3) H; with N = 64 and S4D at H = 256 (181,760 per block) the closest DS4D
    width is 243 (182,007; 242 gives 180,774)."""
    assert eff.n_params(eff.backbone(eff.S4D, 256).blocks) == 4 * 181_760
    assert eff.n_params(eff.backbone(eff.DS4D, 243, 1024).blocks) == 4 * 182_007
    assert eff.matched_width(256) == 243


def _block_params(layer, H, N=64):
    """Parameters of one block, by hand (see the test above)."""
    return 2 * H * H + 4 * H + ((6 * N // 2 + 2) if layer == "s4d" else (8 * N // 2 + 3)) * H


def _model_params(layer, H):
    """4 blocks + input and output projections (H x H + H each) + final LayerNorm (2H)."""
    return 4 * _block_params(layer, H) + 2 * (H * H + H) + 2 * H


def _ds4d_slots(H, L):
    """Decode ring-buffer slots ``k_max + 1`` of a DS4D layer with ``l_max = L`` at initialization: the
    delays are the grid ``linspace(1, L - 1, H + 2)[1:-1]`` (docs/theory.md §7), so ``k_max`` is the floor
    of its largest point; both neighbours are allowed when that point is an integer (rounding)."""
    top = 1 + (L - 2) * H / (H + 1)
    k = math.floor(top)
    return {k + 1, k} if abs(top - round(top)) < 1e-6 else {k + 1}


def test_smoke_run_writes_json_and_figure(tmp_path):
    res = subprocess.run([sys.executable, "-m", "ddesys.experiments.efficiency", "--scale", "smoke", "--quiet", "--out",
                          str(tmp_path)], cwd=Path(__file__).parents[2], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, MPLBACKEND="Agg"))
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((tmp_path / "efficiency.json").read_text())
    assert data["program"] == "ddesys.experiments.efficiency" and data["meta"]["commands"]
    assert (tmp_path / "efficiency.png").stat().st_size > 0
    smoke = eff.SCALES["smoke"]
    records = data["runs"]                                  # one per length, in the order they were timed
    assert [r["config"]["L"] for r in records] == list(smoke["Ls"])
    for r in records:
        assert r["status"] == "done" and r["seconds"] > 0
        assert r["config"] == {"scale": "smoke", "device": "cpu", "L": r["config"]["L"], "n_layers": 4, "d_state": 64,
                               **{k: v for k, v in smoke.items() if k != "Ls"}}
    out = {"rows": [row for r in records for row in r["rows"]]}
    H, N2 = smoke["H"], 32
    Hm = min(range(H // 2, H + 1), key=lambda w: abs(_block_params("ds4d", w) - _block_params("s4d", H)))
    widths = {"S4D": ("s4d", H), "DS4D hidden-matched": ("ds4d", H), "DS4D param-matched": ("ds4d", Hm)}
    rows = out["rows"]
    assert [(r["model"], r["L"]) for r in rows] == [(m, L) for L in smoke["Ls"] for m in widths]
    for r in rows:
        layer, w = widths[r["model"]]
        assert r["H"] == w and r["params"] == _model_params(layer, w), r
        for key in ("train_tokens_per_s", "decode_tokens_per_s"):
            assert math.isfinite(r[key]) and r[key] > 0, r
        assert r["train_peak_bytes"] is None and r["decode_peak_bytes"] is None      # CUDA only
        per_slot = 4 * w * N2 * 8                                        # 4 layers x H x N/2 complex64, batch 1
        if layer == "s4d":
            assert r["decode_cache_bytes"] == per_slot                   # one state per mode
        else:                                                            # ring buffer: k_max + 1 slots
            assert r["decode_cache_bytes"] in {R * per_slot for R in _ds4d_slots(w, r["L"])}, r
    # parameter matching (the rows' widths were checked against Hm, the closest by the formula): the
    # matched backbone's blocks are within 5 % of S4D's at this small width (0.14 % at H = 256)
    assert abs(_block_params("ds4d", Hm) - _block_params("s4d", H)) <= 0.05 * _block_params("s4d", H)


def test_runs_without_matplotlib(tmp_path):
    """The GPU image may lack matplotlib: the benchmark still writes its JSON (no figure) and exits 0."""
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from ddesys.experiments.efficiency import main\n"
            f"sys.exit(main(['--scale', 'smoke', '--quiet', '--out', {str(tmp_path)!r}]))")
    res = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "no figure" in res.stdout and json.loads((tmp_path / "efficiency.json").read_text())["runs"][0]["rows"]
    assert not (tmp_path / "efficiency.png").exists()
