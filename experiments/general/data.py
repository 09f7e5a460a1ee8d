"""Data for the general sequence benchmarks (paper section 5.3), as far as this machine can reach them.

* ``sdigits``: scikit-learn's 8x8 digits (1,797 images, shipped with the package) read pixel by pixel,
  a 64-step, CPU-sized stand-in for sequential MNIST.
* ``smnist``: sequential MNIST (784 steps) from the original IDX files in a local folder
  (``train-images-idx3-ubyte[.gz]`` and friends): nothing is downloaded.
* ``listops``: LRA's ListOps, generated (operators MAX, MIN, MED, SM over digits, nested), or read from
  LRA's TSV files (``Source``/``Target`` columns) in a local folder.

Every loader returns :class:`Split` objects: ``x`` float ``(n, L, 1)`` (pixels) or int64 ``(n, L)``
(tokens, padded with 0), ``y`` int64 ``(n,)``. The loaders of the other Table 2 data sets (sCIFAR,
Speech Commands, BIDMC, LRA) are in :mod:`.loaders` and :mod:`.lra`; the task registry in :mod:`.tasks`.
"""
from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Split:
    x: np.ndarray
    y: np.ndarray


@dataclass
class Dataset:
    """``train`` / ``test`` splits, ``n_classes``, input kind (``"pixels"``: ``(n, L, C)`` floats;
    ``"tokens"``: ``(n, L)`` ids below ``vocab``; ``"token_pairs"``: ``(n, 2, L)`` ids, two documents per
    example) and ``row`` (image width: the natural delay; 0 where none is used). ``val``: a validation
    split where the data set has one (else ``None``); ``target``: ``"class"`` (``y`` int64 ``(n,)`` below
    ``n_classes``) or ``"regression"`` (``y`` float32 ``(n,)``, ``n_classes`` 0)."""
    name: str
    train: Split
    test: Split
    n_classes: int
    kind: str
    vocab: int = 0
    row: int = 0
    val: Split | None = None
    target: str = "class"

    @property
    def length(self):
        """Steps per sequence (per document for ``"token_pairs"``)."""
        return self.train.x.shape[2] if self.kind == "token_pairs" else self.train.x.shape[1]


def sdigits(test_fraction=0.2, seed=0):
    """scikit-learn digits as 64-step pixel sequences in ``[0, 1]``; a stratified split fixed by ``seed``."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images.reshape(len(d.images), 64, 1) / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for c in range(10):                                     # stratified: the same fraction of each class
        idx = rng.permutation(np.flatnonzero(y == c))
        test[idx[:round(test_fraction * len(idx))]] = True
    return Dataset("sdigits", Split(x[~test], y[~test]), Split(x[test], y[test]), 10, "pixels", row=8)


# ------------------------------------------------------------------------------------------- IDX (MNIST)
def read_idx(path):
    """An IDX file (MNIST's format; ``.gz`` or plain) as a NumPy array of its declared type and shape."""
    path = Path(path)
    with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic {raw[:4]!r})")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in dtypes:
        raise ValueError(f"{path}: unknown IDX element type 0x{raw[2]:02x}")
    ndim = raw[3]
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    dt = np.dtype(dtypes[raw[2]])
    body = raw[4 + 4 * ndim:]
    if len(body) != dt.itemsize * int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} x {dt.itemsize} bytes, file has {len(body)} bytes of data")
    return np.frombuffer(body, dtype=dt).reshape(shape).astype(dt.newbyteorder("="))


def write_idx(path, array):
    """Write ``array`` (uint8 / int32 / float32 ...) as an IDX file (used to make test fixtures)."""
    codes = {np.dtype("uint8"): 0x08, np.dtype("int8"): 0x09, np.dtype("int16"): 0x0B, np.dtype("int32"): 0x0C,
             np.dtype("float32"): 0x0D, np.dtype("float64"): 0x0E}
    a = np.asarray(array)
    head = bytes([0, 0, codes[a.dtype], a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape)
    data = head + a.astype(a.dtype.newbyteorder(">")).tobytes()
    path = Path(path)
    with (gzip.open(path, "wb") if path.suffix == ".gz" else open(path, "wb")) as f:
        f.write(data)


def _find(folder, stem):
    for name in (stem, stem + ".gz"):
        if (Path(folder) / name).exists():
            return Path(folder) / name
    raise FileNotFoundError(f"{stem}[.gz] not found in {folder}: sequential MNIST reads the original IDX files "
                            "from a local folder (--data-dir); nothing is downloaded")


def smnist(folder, permute=False, seed=0):
    """Sequential MNIST from IDX files in ``folder``: 784-step pixel sequences in ``[0, 1]``; ``permute``
    applies one fixed pixel permutation (psMNIST)."""
    splits = []
    for prefix in ("train", "t10k"):
        img = read_idx(_find(folder, f"{prefix}-images-idx3-ubyte"))
        lab = read_idx(_find(folder, f"{prefix}-labels-idx1-ubyte"))
        if img.ndim != 3 or lab.shape != img.shape[:1]:
            raise ValueError(f"{folder}: {prefix} images {img.shape} and labels {lab.shape} do not pair up")
        splits.append(Split((img.reshape(len(img), -1, 1) / 255.0).astype(np.float32), lab.astype(np.int64)))
    if permute:
        perm = np.random.default_rng(seed).permutation(splits[0].x.shape[1])
        splits = [Split(s.x[:, perm], s.y) for s in splits]
    return Dataset("psmnist" if permute else "smnist", splits[0], splits[1], 10, "pixels",
                   row=int(round(np.sqrt(splits[0].x.shape[1]))))


__all__ = ["Dataset", "Split", "read_idx", "sdigits", "smnist", "write_idx"]
