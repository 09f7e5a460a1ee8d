"""Long Range Arena from its released files (``lra_release``; IMDB from ``aclImdb``), no network.

* :func:`lra_listops`: ``listops/basic_{train,val,test}.tsv`` (``Source\\tTarget``; ``basic_val.tsv``
  optional), tokens as :mod:`.listops` encodes them.
* :func:`text`: byte-level IMDB from ``aclImdb/{train,test}/{neg,pos}/*.txt`` (label 0 neg, 1 pos):
  UTF-8 bytes ``b`` as ids ``b + 1`` (0 pads), at most ``max_length`` (S4: 4096) per review.
* :func:`retrieval`: AAN pairs ``new_aan_pairs.{train,eval,test}.tsv`` (no header; ``label, id1, id2,
  text1, text2``), byte-level like :func:`text`, ``x`` int64 ``(n, 2, max_length)`` (S4: 4000 each).
* :func:`pathfinder`: ``pathfinder<R>/<level>/{imgs/,metadata/*.npy}`` (the metadata files are text:
  one row per image, ``<dir> <file> <..> <label> ...`` with the image at ``<level>/<dir>/<file>``),
  grayscale pixels scaled to ``[-1, 1]`` as S4 does, ``R * R`` steps (32: Pathfinder, 128: Path-X),
  split 80/10/10 by ``seed`` (S4's fractions; its split is drawn by torch, this one by NumPy).
* LRA Image is :func:`~.loaders.scifar` with ``grayscale=True``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import listops as LO
from .data import Dataset, Split
from .loaders import need, subfolder
from .png import read_gray

BYTE_VOCAB = 257                                         # 0 pads, byte b is b + 1


def encode_bytes(texts, max_length):
    """Strings -> int64 ``(n, max_length)`` of UTF-8 bytes + 1, truncated, right-padded with 0."""
    out = np.zeros((len(texts), max_length), np.int64)
    for i, t in enumerate(texts):
        b = np.frombuffer(t.encode("utf-8")[:max_length], np.uint8)
        out[i, :len(b)] = b.astype(np.int64) + 1
    return out


# -------------------------------------------------------------------------------------------- ListOps
def lra_listops(folder):
    """LRA ListOps from ``folder`` (or ``folder/listops``): ``basic_train.tsv``, ``basic_test.tsv`` and,
    if present, ``basic_val.tsv``; padded to the longest expression. 10 classes, token ids below
    ``len(listops.TOKENS)``."""
    folder = subfolder(folder, "listops")
    layout = "LRA's ListOps TSVs listops/basic_{train,val,test}.tsv with a Source\\tTarget header"
    names = ["train", "test"] + (["val"] if (folder / "basic_val.tsv").exists() else [])
    parts = {s: LO.read_tsv(need(folder / f"basic_{s}.tsv", layout)) for s in names}
    for s, (exprs, _) in parts.items():
        if not exprs:
            raise ValueError(f"{folder / f'basic_{s}.tsv'}: no rows")
    length = max(len(e) for exprs, _ in parts.values() for e in exprs)
    sp = {s: Split(LO.encode(e, length), y) for s, (e, y) in parts.items()}
    return Dataset("lra-listops", sp["train"], sp["test"], 10, "tokens", vocab=len(LO.TOKENS), val=sp.get("val"))


# ----------------------------------------------------------------------------------------------- Text
def text(folder, max_length=4096, limit=None):
    """IMDB reviews byte by byte from ``folder`` (or ``folder/aclImdb``): ``{train,test}/{neg,pos}/*.txt``.
    Returns a :class:`Dataset` of tokens ``(n, max_length)`` below 257, 2 classes (neg 0, pos 1), files
    in sorted order. ``limit``: at most ``limit`` reviews per split and class."""
    folder = subfolder(folder, "aclImdb")
    layout = "IMDB's aclImdb/{train,test}/{neg,pos}/*.txt"
    splits = []
    for split in ("train", "test"):
        texts, labels = [], []
        for label, cls in enumerate(("neg", "pos")):
            files = sorted(need(folder / split / cls, layout).glob("*.txt"))[:limit]
            if not files:
                raise FileNotFoundError(f"{folder / split / cls} has no .txt files: expected {layout}")
            texts += [f.read_text(encoding="utf-8", errors="replace") for f in files]
            labels += [label] * len(files)
        splits.append(Split(encode_bytes(texts, max_length), np.array(labels, np.int64)))
    return Dataset("lra-text", splits[0], splits[1], 2, "tokens", vocab=BYTE_VOCAB)


# ------------------------------------------------------------------------------------------ Retrieval
def read_aan(path):
    """Rows of an AAN pairs TSV as ``(labels int64 (n,), text1 list, text2 list)``."""
    labels, t1, t2 = [], [], []
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for i, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            cols = line.split("\t")
            if len(cols) != 5:
                raise ValueError(f"{path}, line {i}: {len(cols)} tab-separated fields, expected 5 "
                                 "(label, id1, id2, text1, text2)")
            try:
                y = float(cols[0])
            except ValueError:
                raise ValueError(f"{path}, line {i}: label {cols[0]!r} is not a number") from None
            if y not in (0.0, 1.0):
                raise ValueError(f"{path}, line {i}: label {cols[0]!r} must be 0 or 1")
            labels.append(int(y))
            t1.append(cols[3])
            t2.append(cols[4])
    return np.array(labels, np.int64), t1, t2


def retrieval(folder, max_length=4000, limit=None):
    """AAN document-pair retrieval from ``folder`` (or ``folder/tsv_data``): ``new_aan_pairs.train.tsv``,
    ``.eval.tsv`` (the validation split) and ``.test.tsv``. Returns a :class:`Dataset` of kind
    ``"token_pairs"``: ``x`` int64 ``(n, 2, max_length)`` (bytes + 1, 0 pads), 2 classes. ``limit``: the
    first ``limit`` rows of each file."""
    folder = subfolder(folder, "tsv_data")
    layout = "LRA's AAN pairs new_aan_pairs.{train,eval,test}.tsv (label, id1, id2, text1, text2)"
    sp = {}
    for split in ("train", "eval", "test"):
        y, t1, t2 = read_aan(need(folder / f"new_aan_pairs.{split}.tsv", layout))
        y, t1, t2 = y[:limit], t1[:limit], t2[:limit]
        if not len(y):
            raise ValueError(f"{folder / f'new_aan_pairs.{split}.tsv'}: no rows")
        sp[split] = Split(np.stack([encode_bytes(t1, max_length), encode_bytes(t2, max_length)], 1), y)
    return Dataset("lra-retrieval", sp["train"], sp["test"], 2, "token_pairs", vocab=BYTE_VOCAB, val=sp["eval"])


# ----------------------------------------------------------------------------------------- Pathfinder
def pathfinder_samples(root, level):
    """``[(image path, label)]`` from ``root/level/metadata/*.npy`` (sorted by file, then row)."""
    layout = f"LRA's pathfinder{{32,128}}/{level}/{{imgs/,metadata/*.npy}}"
    files = sorted(need(Path(root) / level / "metadata", layout).glob("*.npy"))
    if not files:
        raise FileNotFoundError(f"{Path(root) / level / 'metadata'} has no *.npy metadata files: expected {layout}")
    out = []
    for m in files:
        for i, row in enumerate(m.read_text().splitlines(), 1):
            cols = row.split()
            if not cols:
                continue
            if len(cols) < 4 or cols[3] not in ("0", "1"):
                raise ValueError(f"{m}, row {i}: expected '<dir> <file> <..> <label 0|1> ...', got {row!r}")
            out.append((Path(root) / level / cols[0] / cols[1], int(cols[3])))
    return out


def pathfinder(folder, resolution=32, level="curv_contour_length_14", val_fraction=0.1, test_fraction=0.1,
               seed=42, limit=None):
    """Pathfinder (``resolution`` 32) or Path-X (128) from ``folder`` (or ``folder/pathfinder<R>``).

    Returns a :class:`Dataset` of pixels float32 ``(n, R * R, 1)`` in ``[-1, 1]`` (``(v / 255 - 0.5) /
    0.5``), 2 classes, ``row`` R, with ``val`` / ``test`` drawn by ``seed`` (80/10/10). ``limit``: the
    first ``limit`` images listed. Memory: Path-X's 200,000 images are 13 GB of float32."""
    root = subfolder(folder, f"pathfinder{resolution}")
    samples = pathfinder_samples(root, level)[:limit]
    x = np.empty((len(samples), resolution * resolution, 1), np.float32)
    for i, (path, _) in enumerate(samples):
        img = read_gray(need(path, f"the image named in {root / level / 'metadata'}"))
        if img.shape != (resolution, resolution):
            raise ValueError(f"{path}: {img.shape[1]}x{img.shape[0]} pixels, expected {resolution}x{resolution}")
        x[i, :, 0] = img.reshape(-1) / 255.0
    x = (x - 0.5) / 0.5
    y = np.array([s[1] for s in samples], np.int64)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_val, n_test = int(val_fraction * len(y)), int(test_fraction * len(y))
    idx = {"val": perm[:n_val], "test": perm[n_val:n_val + n_test], "train": perm[n_val + n_test:]}
    sp = {k: Split(x[np.sort(v)], y[np.sort(v)]) for k, v in idx.items()}
    name = "lra-pathfinder" if resolution == 32 else f"lra-path{'x' if resolution == 128 else resolution}"
    return Dataset(name, sp["train"], sp["test"], 2, "pixels", row=resolution, val=sp["val"] if n_val else None)


__all__ = ["BYTE_VOCAB", "encode_bytes", "lra_listops", "pathfinder", "pathfinder_samples", "read_aan",
           "retrieval", "text"]
