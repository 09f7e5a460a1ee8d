"""The general benchmarks' heads beyond classification, on tiny files in the real layouts: BIDMC's
regression (RMSE against numpy on the model's outputs) and LRA Retrieval's document pairs (the head's
features rebuilt from the encoder), with model selection on the validation split (never on the test split)."""
import numpy as np
import pytest

from ddesys.experiments.general import lra
from ddesys.experiments.general.tasks import TASKS


def _bidmc(folder, n=(6, 3, 3), L=40, seed=0):
    rng = np.random.default_rng(seed)
    root = folder / "bidmc" / "RR"
    root.mkdir(parents=True)
    for split, k in zip(("train", "valid", "test"), n):
        np.save(root / f"{split}x.npy", rng.standard_normal((k, L, 2)).astype(np.float32))
        np.save(root / f"{split}y.npy", rng.uniform(10, 20, (k, 1)).astype(np.float32))


def test_a_tiny_bidmc_regression_trains_and_reports_rmse(tmp_path):
    """BIDMC runs through the loop with one output and squared error: the recorded test RMSE is the RMSE of
    the model's outputs computed here, and ``test_at_best_val`` is the test RMSE at the curve's best
    validation epoch."""
    import torch

    from ddesys.experiments.general import report
    from ddesys.experiments.general.train import RunConfig, build, evaluate, train_run
    _bidmc(tmp_path)
    data = TASKS["bidmc-rr"].load(tmp_path)
    cfg = RunConfig(width=8, n_layers=1, d_state=4, epochs=3, batch=4, bidirectional=True)
    r = train_run(cfg, data)
    assert r["status"] == "done" and r["metric"] == "rmse" and "best_acc" not in r
    assert "best_rmse" not in r and "best_epoch" not in r                  # no epoch chosen on the test split
    assert "val_fraction" not in r["config"]                                # BIDMC has its own validation split
    curve = r["curve"]
    assert [c["epoch"] for c in curve] == [1, 2, 3] and all("test_rmse" in c and "val_rmse" in c for c in curve)
    assert r["final_rmse"] == curve[-1]["test_rmse"]
    best_val = min(curve, key=lambda c: c["val_rmse"])
    assert r["best_val_epoch"] == best_val["epoch"] and r["test_at_best_val"] == best_val["test_rmse"]
    torch.manual_seed(0)
    model = build(cfg, data).eval()                                         # eval: no dropout
    with torch.no_grad():
        out = model(torch.from_numpy(data.test.x)).double().numpy()        # (n, 1)
    rmse = float(np.sqrt(np.mean((out[:, 0] - data.test.y.astype(np.float64)) ** 2)))
    assert evaluate(model, data.test.x, data.test.y, "cpu", target="regression")[0] == pytest.approx(rmse, rel=1e-5)
    text = report.markdown([r], {"scale": "smoke"})
    assert "Regression (lower is better)" in text and "test RMSE at the chosen epoch" in text and "| bidmc-rr |" in text
    assert report.held_out(curve, "rmse")["epoch"] == best_val["epoch"] and "best test" not in text.lower()


def test_document_pairs_share_one_encoder_and_train(tmp_path):
    """LRA Retrieval: each document goes through the same encoder; the head sees [u, v, u*v, u-v] of the
    pair (computed here from the encoder's own outputs); the loop trains it and keeps accuracy."""
    import torch

    from ddesys.experiments.general.train import PairClassifier, RunConfig, build, train_run
    d = tmp_path / "tsv_data"
    d.mkdir()
    rows = {"train": [f"{i % 2}\ta{i}\tb{i}\t{'xy' * (i + 1)}\t{'z' * (i + 2)}" for i in range(6)],
            "eval": ["0\ta\tb\tm\tn", "1\tc\td\tmm\tnn"], "test": ["1\ta\tb\tu\tv", "0\tc\td\tuu\tvv"]}
    for split, lines in rows.items():
        (d / f"new_aan_pairs.{split}.tsv").write_text("\n".join(lines) + "\n")
    data = lra.retrieval(tmp_path, max_length=32)
    cfg = RunConfig(width=8, n_layers=1, d_state=4, epochs=2, batch=4, bidirectional=True)
    torch.manual_seed(0)
    model = build(cfg, data).eval()
    assert isinstance(model, PairClassifier)
    x = torch.from_numpy(data.train.x[:3])                                   # (3, 2, 32)
    with torch.no_grad():
        u, v = model.encoder(x[:, 0]), model.encoder(x[:, 1])                # (3, 8) each, one document at a time
        ref = model.head(torch.cat([u, v, u * v, u - v], -1))
        np.testing.assert_allclose(model(x).numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
        swapped = model(x.flip(1))                                           # the head is not symmetric ...
        assert not torch.allclose(swapped, ref)                              # ... so order is kept
    r = train_run(cfg, data)
    assert r["status"] == "done" and 0 <= r["final_acc"] <= 1 and r["data"]["n_val"] == 2
    assert data.length == 32 and r["data"]["length"] == 32                 # per document, not the pair axis
    assert r["test_at_best_val"] is not None and "val_acc" in r["curve"][0]
