"""Loaders for Table 2's sequence data sets in the layouts their users have them (no network).

Each takes the folder given as ``--data-dir`` and returns a :class:`~.data.Dataset`; a missing file
raises :class:`FileNotFoundError` naming it and the layout expected, a malformed one :class:`ValueError`.

* :func:`scifar`: CIFAR-10's python batches (``cifar-10-batches-py/data_batch_1..5``, ``test_batch``:
  pickled dicts with ``b"data"`` uint8 ``(N, 3072)``, channel-major 3x32x32, and ``b"labels"``), read
  as 1024-step sequences of 3 channels (row-major pixels), or 1 channel with ``grayscale=True`` (LRA
  Image). Normalised as S4's loader does (per-channel CIFAR mean / std; grayscale: PIL's luma
  conversion, mean 122.6/255, std 61/255). A validation split of ``val_fraction`` of the training
  images (S4: 0.1).
* :func:`speech_commands`: Speech Commands v0.02's wav folders (``<label>/<file>.wav``, 16 kHz mono
  16-bit, ``validation_list.txt`` / ``testing_list.txt`` naming ``label/file.wav``; every other file of
  the chosen labels is training data), as raw 16000-step waveforms in ``[-1, 1)`` (shorter clips
  zero-padded at the end), 35 classes (S4's SC35) or the 10-word subset.
* :func:`bidmc`: S4's preprocessed BIDMC arrays (``<RR|HR|SpO2>/{train,valid,test}{x,y}.npy``,
  ``x`` ``(N, 4000, 2)``, ``y`` ``(N,)`` or ``(N, 1)``): regression targets.
"""
from __future__ import annotations

import pickle
import wave
from pathlib import Path

import numpy as np

from .data import Dataset, Split


def need(path, layout):
    """``path`` as a :class:`Path` if it exists, else :class:`FileNotFoundError` naming it and ``layout``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: expected {layout} (a local copy given by --data-dir; "
                                "nothing is downloaded)")
    return path


def subfolder(folder, name):
    """``folder/name`` if that exists, else ``folder`` itself (a user may point at either level)."""
    folder = Path(folder)
    return folder / name if (folder / name).is_dir() else folder


def split_off(x, y, fraction, seed):
    """``(train, val)`` :class:`Split` objects: ``fraction`` of the rows drawn for validation by ``seed``."""
    n_val = int(round(fraction * len(y)))
    perm = np.random.default_rng(seed).permutation(len(y))
    val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    return Split(x[train], y[train]), (Split(x[val], y[val]) if n_val else None)


# ---------------------------------------------------------------------------------------------- CIFAR
CIFAR_LAYOUT = "CIFAR-10's python batches cifar-10-batches-py/{data_batch_1..data_batch_5,test_batch}"
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)       # S4's basic.py
GRAY_MEAN, GRAY_STD = 122.6 / 255.0, 61.0 / 255.0


def read_cifar_batch(path):
    """One CIFAR-10 python batch: images uint8 ``(N, 3, 32, 32)`` and labels int64 ``(N,)``."""
    with open(need(path, CIFAR_LAYOUT), "rb") as f:
        try:
            d = pickle.load(f, encoding="bytes")
        except Exception as exc:                                     # noqa: BLE001 - any unpickling failure
            raise ValueError(f"{path}: not a CIFAR-10 python batch ({exc})") from None
    if not isinstance(d, dict) or b"data" not in d or b"labels" not in d:
        raise ValueError(f"{path}: a CIFAR-10 batch is a dict with b'data' and b'labels'")
    data, labels = np.asarray(d[b"data"]), np.asarray(d[b"labels"], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"{path}: b'data' must be uint8 (N, 3072) with N labels, got {data.dtype} {data.shape} "
                         f"and {labels.shape} labels")
    if len(labels) and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{path}: labels must lie in 0..9")
    return data.reshape(-1, 3, 32, 32), labels


def luma(images):
    """PIL's ``convert("L")`` of uint8 RGB ``(N, 3, H, W)``: ``(19595 R + 38470 G + 7471 B + 2^15) >> 16``."""
    r, g, b = (images[:, c].astype(np.uint32) for c in range(3))
    return ((19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16).astype(np.uint8)


def cifar_sequences(images, grayscale=False, normalize=True):
    """uint8 ``(N, 3, 32, 32)`` -> float32 ``(N, 1024, C)``, pixels in row-major order (C = 3 or 1)."""
    if grayscale:
        x = luma(images).reshape(len(images), -1, 1).astype(np.float32) / 255.0
        return (x - GRAY_MEAN) / GRAY_STD if normalize else x
    x = images.reshape(len(images), 3, -1).transpose(0, 2, 1).astype(np.float32) / 255.0
    if normalize:
        x = (x - np.array(CIFAR_MEAN, np.float32)) / np.array(CIFAR_STD, np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)


def scifar(folder, grayscale=False, normalize=True, val_fraction=0.1, seed=42, limit=None):
    """Sequential CIFAR-10 from the python batches in ``folder`` (or ``folder/cifar-10-batches-py``).

    Returns a :class:`Dataset` of pixels ``(n, 1024, 3)`` (``grayscale``: ``(n, 1024, 1)``, the LRA Image
    task), ``row`` 32, 10 classes; ``val`` holds ``val_fraction`` of the 50,000 training images drawn by
    ``seed``. ``limit``: read only the first ``limit`` images of each batch (quick runs)."""
    folder = subfolder(folder, "cifar-10-batches-py")
    parts = [read_cifar_batch(folder / f"data_batch_{i}") for i in range(1, 6)]
    test = read_cifar_batch(folder / "test_batch")
    if limit is not None:
        parts, test = [(a[:limit], b[:limit]) for a, b in parts], (test[0][:limit], test[1][:limit])
    x = cifar_sequences(np.concatenate([p[0] for p in parts]), grayscale, normalize)
    y = np.concatenate([p[1] for p in parts])
    train, val = split_off(x, y, val_fraction, seed)
    return Dataset("lra-image" if grayscale else "scifar", train,
                   Split(cifar_sequences(test[0], grayscale, normalize), test[1]), 10, "pixels", row=32, val=val)


# ------------------------------------------------------------------------------------ Speech Commands
SC10 = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
SC35 = ("bed", "cat", "down", "five", "forward", "go", "house", "left", "marvin", "no", "on", "right", "sheila",
        "tree", "up", "visual", "yes", "backward", "bird", "dog", "eight", "follow", "four", "happy", "learn",
        "nine", "off", "one", "seven", "six", "stop", "three", "two", "wow", "zero")    # S4's order (labels)
SC_LAYOUT = ("Speech Commands' wav folders speech_commands/<label>/<file>.wav (16 kHz mono 16-bit) with "
             "validation_list.txt and testing_list.txt")


def read_wav(path, rate=16000, length=16000):
    """A 16-bit mono WAV at ``rate`` Hz as float32 ``(length,)`` in ``[-1, 1)``, zero-padded at the end
    (a longer one is refused)."""
    try:
        with wave.open(str(path), "rb") as w:
            if w.getnchannels() != 1 or w.getsampwidth() != 2 or w.getframerate() != rate:
                raise ValueError(f"{path}: expected mono 16-bit PCM at {rate} Hz, got {w.getnchannels()} channel(s), "
                                 f"{8 * w.getsampwidth()}-bit at {w.getframerate()} Hz")
            frames = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"{path}: not a PCM WAV file ({exc})") from None
    a = np.frombuffer(frames, dtype="<i2")
    if len(a) > length:
        raise ValueError(f"{path}: {len(a)} samples, more than {length}")
    out = np.zeros(length, np.float32)
    out[:len(a)] = a / 32768.0
    return out


def _name_list(path):
    return {line.strip() for line in need(path, SC_LAYOUT).read_text().splitlines() if line.strip()}


def speech_commands(folder, classes=35, limit=None):
    """Speech Commands from the wav folders in ``folder`` (or ``folder/speech_commands``).

    ``classes``: 35 (all words, S4's SC35 label order) or 10 (``yes no up down left right on off stop
    go``). Returns a :class:`Dataset` of raw waveforms float32 ``(n, 16000, 1)`` with ``train`` / ``val``
    / ``test`` from the two lists (``val``: ``validation_list.txt``); files are read in sorted order per
    label. ``limit``: at most ``limit`` files per label and split (quick runs). Memory: the full SC35
    is about 6.5 GB of float32."""
    if classes not in (10, 35):
        raise ValueError(f"classes must be 10 or 35, got {classes!r}")
    folder = subfolder(folder, "speech_commands")
    val_list, test_list = _name_list(folder / "validation_list.txt"), _name_list(folder / "testing_list.txt")
    labels = SC35 if classes == 35 else SC10
    parts = {"train": ([], []), "val": ([], []), "test": ([], [])}
    for k, label in enumerate(labels):
        files = sorted(need(folder / label, SC_LAYOUT).glob("*.wav"))
        if not files:
            raise FileNotFoundError(f"{folder / label} has no .wav files: expected {SC_LAYOUT}")
        taken = dict.fromkeys(parts, 0)
        for f in files:
            rel = f"{label}/{f.name}"
            split = "val" if rel in val_list else "test" if rel in test_list else "train"
            if limit is None or taken[split] < limit:
                taken[split] += 1
                parts[split][0].append(read_wav(f))
                parts[split][1].append(k)
    splits = {}
    for name, (xs, ys) in parts.items():
        if not xs:
            raise ValueError(f"{folder}: no {name} files among the {classes} labels (check the two lists)")
        splits[name] = Split(np.stack(xs)[:, :, None], np.array(ys, np.int64))
    return Dataset(f"sc{classes}", splits["train"], splits["test"], classes, "pixels", val=splits["val"])


# ---------------------------------------------------------------------------------------------- BIDMC
BIDMC_TARGETS = ("RR", "HR", "SpO2")


def bidmc(folder, target="RR", limit=None):
    """BIDMC vital-sign regression from S4's arrays in ``folder`` (or ``folder/bidmc``):
    ``<target>/{trainx,trainy,validx,validy,testx,testy}.npy``. Returns a :class:`Dataset` with
    ``target="regression"``: ``x`` float32 ``(n, 4000, 2)`` (PPG and ECG), ``y`` float32 ``(n,)``."""
    if target not in BIDMC_TARGETS:
        raise ValueError(f"target must be one of {BIDMC_TARGETS}, got {target!r}")
    folder = subfolder(folder, "bidmc") / target
    layout = f"S4's BIDMC arrays bidmc/{target}/{{trainx,trainy,validx,validy,testx,testy}}.npy"
    splits = {}
    for split in ("train", "valid", "test"):
        x = np.load(need(folder / f"{split}x.npy", layout), allow_pickle=False)
        y = np.load(need(folder / f"{split}y.npy", layout), allow_pickle=False)
        y = y.reshape(len(y), -1) if y.ndim > 1 else y
        if x.ndim != 3 or (y.ndim == 2 and y.shape[1] != 1) or len(y) != len(x):
            raise ValueError(f"{folder}: {split}x {x.shape} and {split}y {y.shape} must be (N, L, C) and "
                             "(N,) or (N, 1)")
        if limit is not None:
            x, y = x[:limit], y[:limit]
        splits[split] = Split(np.ascontiguousarray(x, np.float32), y.reshape(-1).astype(np.float32))
    return Dataset(f"bidmc-{target.lower()}", splits["train"], splits["test"], 0, "pixels", val=splits["valid"],
                   target="regression")


__all__ = ["BIDMC_TARGETS", "SC10", "SC35", "bidmc", "cifar_sequences", "luma", "need", "read_cifar_batch",
           "read_wav", "scifar", "speech_commands", "split_off"]
