"""experiments/general: every Table 2 loader reads tiny files written here in its data set's exact
layout (CIFAR-10 python batches, Speech Commands wav folders, S4's BIDMC arrays, LRA's TSVs, aclImdb
folders, Pathfinder PNGs with metadata), checked against the values written; missing files are named."""
import pickle
import struct
import sys
import wave
import zlib

import numpy as np
import pytest

from ddesys.experiments.general import loaders as L
from ddesys.experiments.general import lra
from ddesys.experiments.general.png import decode_png
from ddesys.experiments.general.tasks import TASKS, run_config


# ---------------------------------------------------------------------------------------------- CIFAR
def _cifar(folder, n_per_batch=2, seed=0):
    """CIFAR-10's python batches: pickled dicts with bytes keys, data uint8 (N, 3072) channel-major."""
    rng = np.random.default_rng(seed)
    d = folder / "cifar-10-batches-py"
    d.mkdir(parents=True)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (n_per_batch, 3072)).astype(np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, n_per_batch)]
        with open(d / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                         b"filenames": [b"x.png"] * n_per_batch}, f, protocol=2)
        written[name] = (data, labels)
    return written


def test_scifar_reads_the_python_batches_as_1024_steps_of_3_channels(tmp_path):
    w = _cifar(tmp_path)
    d = L.scifar(tmp_path, val_fraction=0.2)
    assert d.train.x.shape == (8, 1024, 3) and d.val.x.shape == (2, 1024, 3) and d.test.x.shape == (2, 1024, 3)
    assert d.train.x.dtype == np.float32 and d.train.y.dtype == np.int64 and d.row == 32 and d.n_classes == 10
    img = w["test_batch"][0][1].reshape(3, 32, 32)                          # channel-major 3 x 32 x 32
    r, c = 5, 17
    for ch, (m, s) in enumerate(zip((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))):
        assert d.test.x[1, 32 * r + c, ch] == pytest.approx((img[ch, r, c] / 255 - m) / s, rel=1e-5)
    assert d.test.y.tolist() == w["test_batch"][1]
    every = np.concatenate([w[f"data_batch_{i}"][0] for i in range(1, 6)])  # train + val = the five batches
    raw = L.scifar(tmp_path, normalize=False, val_fraction=0.2)
    got = np.concatenate([raw.train.x, raw.val.x]).transpose(0, 2, 1).reshape(10, 3072)
    assert sorted(map(bytes, np.round(got * 255).astype(np.uint8))) == sorted(map(bytes, every))
    assert sorted(np.concatenate([d.train.y, d.val.y]).tolist()) == sorted(
        sum((w[f"data_batch_{i}"][1] for i in range(1, 6)), []))


def test_lra_image_is_grayscale_cifar_with_pils_luma(tmp_path):
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    img = np.zeros((3, 3, 32, 32), np.uint8)
    img[0, 0], img[1, 1], img[2, 2] = 255, 255, 255                          # pure red, green, blue images
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(d / name, "wb") as f:
            pickle.dump({b"data": img.reshape(3, 3072), b"labels": [3, 1, 4]}, f, protocol=2)
    t = TASKS["lra-image"].load(tmp_path)
    assert t.name == "lra-image" and t.test.x.shape == (3, 1024, 1) and t.row == 32
    raw = L.scifar(tmp_path, grayscale=True, normalize=False)
    assert np.round(raw.test.x[:, 0, 0] * 255).tolist() == [76, 150, 29]     # PIL: L of red, green, blue
    assert t.test.x[0, 0, 0] == pytest.approx((76 / 255 - 122.6 / 255) / (61 / 255), rel=1e-5)
    assert TASKS["scifar"].load(tmp_path).test.x.shape == (3, 1024, 3)


def test_luma_is_pils_grayscale_conversion():
    Image = pytest.importorskip("PIL.Image")
    rgb = np.random.default_rng(5).integers(0, 256, (4, 3, 32, 32)).astype(np.uint8)
    want = np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(im.transpose(1, 2, 0)), "RGB").convert("L"))
                     for im in rgb])
    assert np.array_equal(L.luma(rgb), want)


def test_cifar_missing_or_bad_batch_is_named(tmp_path):
    _cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3.*cifar-10-batches-py"):
        L.scifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="data_batch_3: not a CIFAR-10 python batch"):
        L.scifar(tmp_path)


# ------------------------------------------------------------------------------------ Speech Commands
def _wav(path, samples, rate=16000):
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, "<i2").tobytes())


def _speech(folder, labels):
    root = folder / "speech_commands"
    for k, label in enumerate(labels):                                      # one training clip per word
        _wav(root / label / "a.wav", [k, -k, 100])
    _wav(root / "yes" / "b.wav", [-32768, 32767])
    _wav(root / "no" / "c.wav", np.full(16000, 7))
    _wav(root / "_background_noise_" / "noise.wav", [1, 2, 3])             # not a label: never read
    (root / "validation_list.txt").write_text("yes/b.wav\n")
    (root / "testing_list.txt").write_text("no/c.wav\n")
    return root


def test_speech_commands_wav_folders_and_lists(tmp_path):
    _speech(tmp_path, L.SC10)
    d = L.speech_commands(tmp_path, classes=10)
    assert d.train.x.shape == (10, 16000, 1) and d.val.x.shape == (1, 16000, 1) and d.test.x.shape == (1, 16000, 1)
    assert d.train.x.dtype == np.float32 and d.n_classes == 10 and d.row == 0
    assert d.train.y.tolist() == list(range(10))                            # yes no up down left right on off stop go
    assert d.train.x[3, :4, 0].tolist() == [3 / 32768, -3 / 32768, 100 / 32768, 0.0]   # zero-padded at the end
    assert d.val.y.tolist() == [0] and d.val.x[0, :2, 0].tolist() == [-1.0, 32767 / 32768]
    assert d.test.y.tolist() == [1] and np.all(d.test.x[0, :, 0] == 7 / 32768)
    assert len(L.speech_commands(tmp_path, classes=10, limit=1).train.y) == 10


def test_speech_commands_35_classes_in_s4s_order_and_errors(tmp_path):
    root = _speech(tmp_path, L.SC35)
    t = TASKS["sc35-ar"].load(tmp_path)
    assert t.name == "sc35-ar" and t.n_classes == 35 and len(t.train.y) == 35
    assert t.val.y.tolist() == [L.SC35.index("yes")] == [16] and t.test.y.tolist() == [9]    # "no" is S4's 10th
    assert TASKS["sc35-ar"].preset.bidirectional is False and TASKS["sc35"].preset.bidirectional is True
    _wav(root / "yes" / "slow.wav", [1, 2], rate=8000)
    with pytest.raises(ValueError, match="slow.wav: expected mono 16-bit PCM at 16000 Hz"):
        L.speech_commands(tmp_path)
    (root / "yes" / "slow.wav").unlink()
    (root / "testing_list.txt").unlink()
    with pytest.raises(FileNotFoundError, match="testing_list.txt not found"):
        L.speech_commands(tmp_path)


# ---------------------------------------------------------------------------------------------- BIDMC
def test_bidmc_arrays_are_regression_targets(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "bidmc" / "HR"
    root.mkdir(parents=True)
    arrays = {}
    for split in ("train", "valid", "test"):
        arrays[split] = rng.standard_normal((2, 4000, 2)), rng.uniform(50, 120, (2, 1))
        np.save(root / f"{split}x.npy", arrays[split][0])
        np.save(root / f"{split}y.npy", arrays[split][1])
    d = TASKS["bidmc-hr"].load(tmp_path)
    assert d.target == "regression" and d.n_classes == 0 and d.name == "bidmc-hr"
    assert d.train.x.shape == (2, 4000, 2) and d.train.x.dtype == np.float32 and d.val.y.shape == (2,)
    assert np.allclose(d.test.x, arrays["test"][0], atol=1e-6) and np.allclose(d.val.y, arrays["valid"][1][:, 0])
    assert TASKS["bidmc-hr"].trains
    (root / "validy.npy").unlink()
    with pytest.raises(FileNotFoundError, match="HR/validy.npy not found"):
        L.bidmc(tmp_path, "HR")
    with pytest.raises(ValueError, match="target must be one of"):
        L.bidmc(tmp_path, "BP")


# -------------------------------------------------------------------------------------------------- LRA
def test_lra_listops_tsv_with_val(tmp_path):
    from ddesys.experiments.general import listops as LO
    d = tmp_path / "listops"
    d.mkdir()
    (d / "basic_train.tsv").write_text("Source\tTarget\n( ( [MAX 2 ) 9 ) ]\t9\n( [SM 5 7 ] )\t2\n[MIN 4 1 ]\t1\n")
    (d / "basic_val.tsv").write_text("Source\tTarget\n[MED 1 2 3 8 ]\t2\n")
    (d / "basic_test.tsv").write_text("Source\tTarget\n3\t3\n")
    t = TASKS["lra-listops"].load(tmp_path)
    assert t.train.x.shape == (3, 6) and t.train.x.dtype == np.int64 and t.train.y.tolist() == [9, 2, 1]
    assert [LO.TOKENS[i] for i in t.val.x[0] if i] == ["[MED", "1", "2", "3", "8", "]"] and t.test.y.tolist() == [3]
    (d / "basic_test.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="basic_test.tsv not found"):
        lra.lra_listops(tmp_path)


def test_lra_text_reads_aclimdb_bytes(tmp_path):
    reviews = {("train", "neg"): ["bad.", "no"], ("train", "pos"): ["café!"], ("test", "neg"): ["meh"],
               ("test", "pos"): ["good"]}
    for (split, cls), texts in reviews.items():
        (tmp_path / "aclImdb" / split / cls).mkdir(parents=True)
        for i, t in enumerate(texts):
            (tmp_path / "aclImdb" / split / cls / f"{i}_1.txt").write_text(t, encoding="utf-8")
    d = lra.text(tmp_path, max_length=8)
    assert d.train.x.shape == (3, 8) and d.train.x.dtype == np.int64 and d.vocab == 257
    assert d.train.y.tolist() == [0, 0, 1] and d.test.y.tolist() == [0, 1]
    assert d.train.x[2].tolist() == [ord("c") + 1, ord("a") + 1, ord("f") + 1, 0xC3 + 1, 0xA9 + 1, ord("!") + 1, 0, 0]
    assert lra.text(tmp_path, max_length=2).train.x[0].tolist() == [ord("b") + 1, ord("a") + 1]   # truncated
    for f in (tmp_path / "aclImdb" / "test" / "pos").iterdir():
        f.unlink()
    with pytest.raises(FileNotFoundError, match="test/pos has no .txt files"):
        lra.text(tmp_path)


def test_lra_retrieval_aan_pairs(tmp_path):
    d = tmp_path / "tsv_data"
    d.mkdir()
    rows = {"train": ["1\tid1\tid2\tab\tc", "0\tid3\tid4\tx\tyz", "1.0\tid5\tid6\t\tq"], "eval": ["0\ta\tb\tm\tn"],
            "test": ["1\ta\tb\tu\tv"]}
    for split, lines in rows.items():
        (d / f"new_aan_pairs.{split}.tsv").write_text("\n".join(lines) + "\n")
    t = TASKS["lra-retrieval"].load(tmp_path)
    assert t.kind == "token_pairs" and t.train.x.shape == (3, 2, 4000) and t.train.y.tolist() == [1, 0, 1]
    assert t.train.x[0, 0, :3].tolist() == [ord("a") + 1, ord("b") + 1, 0] and t.train.x[1, 1, :2].tolist() == [
        ord("y") + 1, ord("z") + 1]
    assert not t.train.x[2, 0].any() and t.val.y.tolist() == [0] and t.test.x[0, 1, 0] == ord("v") + 1
    (d / "new_aan_pairs.eval.tsv").write_text("2\ta\tb\tm\tn\n")
    with pytest.raises(ValueError, match=r"eval.tsv, line 1: label '2' must be 0 or 1"):
        lra.retrieval(tmp_path)
    (d / "new_aan_pairs.eval.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="new_aan_pairs.eval.tsv not found"):
        lra.retrieval(tmp_path)


# ----------------------------------------------------------------------------------------- Pathfinder
def _png(path, img, filters):
    """An 8-bit grayscale PNG written by hand (one filter type per row, as the PNG spec defines them)."""
    h, w = img.shape
    x = img.astype(np.int64)
    raw = b""
    for r in range(h):
        f, prev = filters[r % len(filters)], (x[r - 1] if r else np.zeros(w, np.int64))
        left = np.concatenate([[0], x[r, :-1]])
        upleft = np.concatenate([[0], prev[:-1]])
        if f == 0:
            pred = np.zeros(w, np.int64)
        elif f == 1:
            pred = left
        elif f == 2:
            pred = prev
        elif f == 3:
            pred = (left + prev) // 2
        else:
            p = left + prev - upleft
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
        raw += bytes([f]) + ((x[r] - pred) % 256).astype(np.uint8).tobytes()

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_png_decoder_every_filter_type(tmp_path):
    rng = np.random.default_rng(3)
    for high in (256, 3):                                                   # few levels: many Paeth ties
        img = rng.integers(0, high, (20, 17)).astype(np.uint8)
        _png(tmp_path / "a.png", img, filters=[0, 1, 2, 3, 4])
        assert np.array_equal(decode_png((tmp_path / "a.png").read_bytes())[:, :, 0], img)
    with pytest.raises(ValueError, match="not a PNG"):
        decode_png(b"GIF89a")


def _pathfinder(folder, n=10, res=32, pil=False):
    rng = np.random.default_rng(4)
    level = folder / f"pathfinder{res}" / "curv_contour_length_14"
    imgs, rows = {}, []
    for i in range(n):
        img = rng.integers(0, 256, (res, res)).astype(np.uint8)
        path = level / "imgs" / str(i % 2) / f"sample_{i}.png"
        if pil:
            from PIL import Image
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img, mode="L").save(path)
        else:
            _png(path, img, filters=[i % 5])
        imgs[i] = img
        rows.append(f"imgs/{i % 2} sample_{i}.png {i} {i % 3 % 2} 1.5 7")
    (level / "metadata").mkdir(parents=True)
    (level / "metadata" / "0.npy").write_text("\n".join(rows[:6]) + "\n")     # text, despite the suffix
    (level / "metadata" / "1.npy").write_text("\n".join(rows[6:]) + "\n")
    return imgs, [i % 3 % 2 for i in range(n)]


@pytest.mark.parametrize("pil", ["hand-written, read without Pillow", "hand-written", "written by Pillow"])
def test_pathfinder_images_and_metadata(tmp_path, pil, monkeypatch):
    if pil != "hand-written, read without Pillow":
        pytest.importorskip("PIL")
    imgs, labels = _pathfinder(tmp_path, pil=pil == "written by Pillow")
    if pil == "hand-written, read without Pillow":
        monkeypatch.setitem(sys.modules, "PIL", None)                      # import PIL fails: the own decoder
    d = TASKS["lra-pathfinder"].load(tmp_path)
    assert (len(d.train.y), len(d.val.y), len(d.test.y)) == (8, 1, 1) and d.train.x.shape == (8, 1024, 1)
    assert d.train.x.dtype == np.float32 and d.n_classes == 2 and d.row == 0           # grid delays (the paper)
    x = np.concatenate([d.train.x, d.val.x, d.test.x])[:, :, 0]
    y = np.concatenate([d.train.y, d.val.y, d.test.y])
    want = {bytes(img.reshape(-1)): labels[i] for i, img in imgs.items()}
    got = {bytes(np.round((v * 0.5 + 0.5) * 255).astype(np.uint8)): int(c) for v, c in zip(x, y)}
    assert got == want                                                     # every image once, with its label
    assert x.min() >= -1 and x.max() <= 1


def test_pathx_resolution_and_missing_files(tmp_path):
    _pathfinder(tmp_path, n=2, res=128)
    d = lra.pathfinder(tmp_path, resolution=128, val_fraction=0, test_fraction=0.5)
    assert d.name == "lra-pathx" and d.train.x.shape == (1, 16384, 1) and d.val is None
    png = tmp_path / "pathfinder128" / "curv_contour_length_14" / "imgs" / "1" / "sample_1.png"
    png.unlink()
    with pytest.raises(FileNotFoundError, match="sample_1.png not found"):
        lra.pathfinder(tmp_path, resolution=128)
    with pytest.raises(FileNotFoundError,
                       match="nothing/curv_contour_length_14/metadata not found: expected LRA's pathfinder"):
        lra.pathfinder(tmp_path / "nothing")


# --------------------------------------------------------------------------------- registry and CLI
def test_presets_follow_the_paper_where_it_survives():
    for name, t in TASKS.items():
        p = t.preset
        assert p.init == "inv"                                              # S4D-Inv everywhere
        assert p.bidirectional == (name not in ("smnist", "sc35-ar")), name
        assert (p.delay == "row") == (name in ("smnist", "lra-image", "scifar")), name
        assert p.source is not None or p.ours, name                         # a source, else marked ours
    assert "row" in " ".join(TASKS["scifar"].preset.ours)                   # sCIFAR's row delays: chosen here
    from ddesys.experiments.general.train import RunConfig
    c = RunConfig(**run_config(TASKS["lra-pathx"].preset))
    assert (c.width, c.n_layers, c.lr, c.batch, c.epochs) == (256, 6, 0.001, 16, 50)   # lra/s4-pathx.yaml


def test_cli_loads_a_table2_task_and_names_a_missing_folder(tmp_path):
    from ddesys.experiments.general import __main__ as M
    with pytest.raises(SystemExit, match="scifar: .*data_batch_1 not found"):
        M.load("scifar", "cpu", tmp_path / "none")
    assert {"bidmc-rr", "lra-retrieval", "sc35-ar"} <= set(M.TASKS)


def test_a_tiny_scifar_trains_through_the_run_loop(tmp_path):
    from ddesys.experiments.general import __main__ as M
    from ddesys.experiments.general.train import RunConfig, train_run
    _cifar(tmp_path, n_per_batch=1)
    data = M.load("scifar", "cpu", tmp_path)
    r = train_run(RunConfig(width=8, n_layers=1, d_state=4, epochs=1, batch=4, bidirectional=True), data)
    assert r["status"] == "done" and r["task"] == "scifar" and 0 <= r["final_acc"] <= 1
    assert r["mean_delay"]["init"] == pytest.approx(32.0, rel=0.05)         # delays start at one row
