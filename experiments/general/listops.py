"""ListOps (Nangia & Bowman 2018; the Long Range Arena version): nested list operations over digits,
classify the value (10 classes). Example: ``[MAX 2 9 [MIN 4 7 ] 0 ]`` -> 9.

Operators: ``MAX``, ``MIN``, ``MED`` (median, truncated to an integer as LRA's generator does), ``SM``
(sum mod 10). Generated here with LRA's recipe (a node is a value with probability ``value_p``, else an
operator with 2 to ``max_args`` children, up to ``max_depth``; expressions outside the length bounds are
redrawn), or read from LRA's TSV files (``Source``/``Target`` columns; their parentheses are dropped).
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from .data import Dataset, Split

OPS = ("[MAX", "[MIN", "[MED", "[SM")
TOKENS = ("<pad>",) + tuple(str(d) for d in range(10)) + OPS + ("]",)
ID = {t: i for i, t in enumerate(TOKENS)}
_APPLY = {"[MAX": max, "[MIN": min, "[MED": lambda a: int(np.median(a)), "[SM": lambda a: sum(a) % 10}


def evaluate(tokens):
    """Value of an expression given as tokens (strings), by a stack machine; raises on malformed input."""
    stack = []
    for tok in tokens:
        if tok in OPS:
            stack.append([tok])
        elif tok == "]":
            if not stack or len(stack[-1]) < 2:
                raise ValueError("']' without an operator and at least one argument")
            op, *args = stack.pop()
            val = _APPLY[op](args)
            if not stack:
                return val
            stack[-1].append(val)
        elif tok.isdigit() and len(tok) == 1:
            if not stack:
                return int(tok)
            stack[-1].append(int(tok))
        else:
            raise ValueError(f"unknown ListOps token {tok!r}")
    raise ValueError("unterminated expression")


def _tree(rng, depth, max_depth, max_args, value_p):
    if depth >= max_depth or (depth > 0 and rng.random() < value_p):
        return [str(int(rng.integers(10)))]
    out = [OPS[int(rng.integers(len(OPS)))]]
    for _ in range(int(rng.integers(2, max_args + 1))):
        out += _tree(rng, depth + 1, max_depth, max_args, value_p)
    return out + ["]"]


def generate(n, rng, max_depth=4, max_args=5, min_length=8, max_length=128, value_p=0.25):
    """``n`` random expressions (token lists) with ``min_length <= len <= max_length`` and their values."""
    exprs, labels, tries = [], [], 0
    while len(exprs) < n:
        tries += 1
        if tries > 1000 * n + 1000:
            raise ValueError(f"cannot draw expressions of length {min_length}..{max_length} with depth {max_depth} "
                             f"and up to {max_args} arguments: widen the bounds")
        e = _tree(rng, 0, max_depth, max_args, value_p)
        if min_length <= len(e) <= max_length:
            exprs.append(e)
            labels.append(evaluate(e))
    return exprs, np.array(labels, dtype=np.int64)


def encode(exprs, length):
    """Token lists -> int64 ids ``(n, length)``, right-padded with 0; raises if one is longer."""
    out = np.zeros((len(exprs), length), dtype=np.int64)
    for i, e in enumerate(exprs):
        if len(e) > length:
            raise ValueError(f"expression {i} has {len(e)} tokens, more than length {length}")
        out[i, :len(e)] = [ID[t] for t in e]
    return out


def write_tsv(path, exprs, labels):
    """LRA's layout: a ``Source\\tTarget`` header, one expression per line."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["Source", "Target"])
        for e, y in zip(exprs, labels):
            w.writerow([" ".join(e), int(y)])


def read_tsv(path):
    """Expressions and labels from an LRA ListOps TSV (parentheses dropped, labels checked in 0..9)."""
    exprs, labels = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            exprs.append([t for t in row["Source"].split() if t not in ("(", ")")])
            labels.append(int(row["Target"]))
    y = np.array(labels, dtype=np.int64)
    if len(y) and (y.min() < 0 or y.max() > 9):
        raise ValueError(f"{path}: targets must lie in 0..9")
    return exprs, y


def listops(n_train=2000, n_test=500, max_length=128, seed=0, folder=None, **gen):
    """ListOps as a :class:`Dataset` of token ids. ``folder``: read LRA's ``basic_train.tsv`` and
    ``basic_test.tsv`` there (``max_length`` then pads/limits to the longest); otherwise generate
    ``n_train`` / ``n_test`` expressions (``gen``: :func:`generate`'s bounds)."""
    if folder is not None:
        tr, te = (read_tsv(Path(folder) / f"basic_{s}.tsv") for s in ("train", "test"))
        max_length = max(max(map(len, tr[0])), max(map(len, te[0])))
    else:
        rng = np.random.default_rng(seed)
        tr = generate(n_train, rng, max_length=max_length, **gen)
        te = generate(n_test, rng, max_length=max_length, **gen)
    return Dataset("listops", Split(encode(tr[0], max_length), tr[1]), Split(encode(te[0], max_length), te[1]),
                   10, "tokens", vocab=len(TOKENS))
