"""experiments/general: file formats (IDX, LRA TSV) against hand-built bytes, ListOps against an
independent recursive evaluator, the sdigits split, matched widths and the resumable CLI."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ddesys.experiments._models import ModelSpec
from ddesys.experiments.general import data as D
from ddesys.experiments.general import listops as LO

ROOT = Path(__file__).parents[2]


def test_idx_reader_on_hand_built_bytes_and_round_trip(tmp_path):
    img = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = b"\x00\x00\x08\x03" + struct.pack(">III", 2, 3, 4) + img.tobytes()     # MNIST's layout, by hand
    (tmp_path / "a-idx3-ubyte").write_bytes(raw)
    assert np.array_equal(D.read_idx(tmp_path / "a-idx3-ubyte"), img)
    for name, arr in (("b.gz", img), ("c", np.array([3, -7, 12], dtype=np.int32)),
                      ("d", np.linspace(0, 1, 5, dtype=np.float32))):
        D.write_idx(tmp_path / name, arr)
        back = D.read_idx(tmp_path / name)
        assert back.dtype == arr.dtype and np.array_equal(back, arr)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="not an IDX"):
        D.read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(raw[:-3])
    with pytest.raises(ValueError, match="header says"):
        D.read_idx(tmp_path / "short")


def test_smnist_from_a_local_idx_folder(tmp_path):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 6), ("t10k", 3)):
        D.write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)).astype(np.uint8))
        D.write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n).astype(np.uint8))
    d = D.smnist(tmp_path)
    assert d.train.x.shape == (6, 784, 1) and d.test.x.shape == (3, 784, 1) and d.row == 28
    img = D.read_idx(tmp_path / "train-images-idx3-ubyte.gz")
    assert np.allclose(d.train.x[2, 28 * 5 + 7, 0], img[2, 5, 7] / 255.0)              # row-major pixel order
    p = D.smnist(tmp_path, permute=True)
    assert np.allclose(np.sort(p.train.x[:, :, 0], 1), np.sort(d.train.x[:, :, 0], 1))  # same pixels, reordered
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        D.smnist(tmp_path / "missing")


def test_sdigits_is_a_stratified_pixel_sequence_split():
    pytest.importorskip("sklearn")
    d = D.sdigits()
    assert d.train.x.shape[1:] == (64, 1) and len(d.train.y) + len(d.test.y) == 1797
    assert d.train.x.min() >= 0 and d.train.x.max() <= 1
    counts = np.bincount(d.test.y, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37                                    # ~20% of each class


def _recursive_value(tokens, i=0):
    """Independent evaluator: recursive descent, returns (value, next index)."""
    tok = tokens[i]
    if tok.isdigit():
        return int(tok), i + 1
    args, i = [], i + 1
    while tokens[i] != "]":
        v, i = _recursive_value(tokens, i)
        args.append(v)
    if tok == "[MAX":
        v = max(args)
    elif tok == "[MIN":
        v = min(args)
    elif tok == "[SM":
        v = sum(args) % 10
    else:                                                   # median, truncated (LRA's generator)
        s = sorted(args)
        m = len(s) // 2
        v = s[m] if len(s) % 2 else (s[m - 1] + s[m]) // 2
    return v, i + 1


def test_listops_values_by_hand_and_against_a_recursive_evaluator():
    assert LO.evaluate("[MAX 2 9 [MIN 4 7 ] 0 ]".split()) == 9
    assert LO.evaluate("[MED 1 2 3 8 ]".split()) == 2                        # median 2.5 -> 2
    assert LO.evaluate("[SM 5 7 [MAX 1 9 ] ]".split()) == 1                  # 21 mod 10
    with pytest.raises(ValueError):
        LO.evaluate("[MAX 2 9".split())
    exprs, y = LO.generate(300, np.random.default_rng(1), max_depth=5, max_args=4, min_length=10, max_length=60)
    assert all(10 <= len(e) <= 60 for e in exprs)
    assert [_recursive_value(e)[0] for e in exprs] == y.tolist()
    assert len(set(y.tolist())) == 10


def test_listops_tsv_round_trip_and_lra_parentheses(tmp_path):
    exprs, y = LO.generate(20, np.random.default_rng(2), max_length=40)
    LO.write_tsv(tmp_path / "basic_train.tsv", exprs, y)
    with open(tmp_path / "basic_test.tsv", "w") as f:                       # LRA's own style, by hand
        f.write("Source\tTarget\n( ( [MAX 2 ) 9 ) ]\t9\n( [SM 5 7 ] )\t2\n")
    back, yb = LO.read_tsv(tmp_path / "basic_train.tsv")
    assert back == exprs and np.array_equal(yb, y)
    d = LO.listops(folder=tmp_path)
    assert d.test.y.tolist() == [9, 2] and d.vocab == len(LO.TOKENS)
    ids = d.test.x[0]
    assert [LO.TOKENS[i] for i in ids if i] == ["[MAX", "2", "9", "]"]


def test_ds4d_width_matches_s4d_parameters():
    from ddesys.experiments.general.__main__ import matched_width
    from ddesys.experiments.general.train import RunConfig, build
    d = LO.listops(64, 16, 48)
    cfg = RunConfig(model=ModelSpec("ds4d"), width=64, n_layers=2, d_state=32, bidirectional=True)
    w = matched_width(cfg, d)
    n = lambda c: sum(p.numel() for p in build(c, d).parameters())       # noqa: E731
    s4d = n(RunConfig(model=ModelSpec("s4d"), width=64, n_layers=2, d_state=32, bidirectional=True))
    assert w < 64 and abs(n(RunConfig(model=ModelSpec("ds4d"), width=w, n_layers=2, d_state=32,
                                      bidirectional=True)) - s4d) <= 0.02 * s4d


def test_cli_smoke_run_and_resume(tmp_path):
    cmd = [sys.executable, "-m", "ddesys.experiments.general", "--scale", "smoke", "--tasks", "listops", "--quiet",
           "--out", str(tmp_path)]
    env = dict(os.environ, MPLBACKEND="Agg")
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert [r["config"]["family"] for r in runs] == ["ds4d", "s4d"]
    assert all(0 <= r["final_acc"] <= 1 and len(r["curve"]) == 1 and "best_acc" not in r for r in runs)
    assert all(r["config"]["val_fraction"] == 0.1 and r["data"]["n_val"] == round(0.1 * 256) for r in runs)
    assert all(r["data"]["n_train"] == 256 - r["data"]["n_val"] and "val_acc" in r["curve"][0] for r in runs)
    assert runs[0]["mean_delay"]["init"] > 1 and (tmp_path / "curves.png").stat().st_size > 0
    text = (tmp_path / "report.md").read_text()
    assert "| listops | ds4d |" in text and "test acc at the chosen epoch" in text and "best test" not in text
    mtime = (tmp_path / "results.json").stat().st_mtime_ns
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and (tmp_path / "results.json").stat().st_mtime_ns == mtime   # nothing rerun
