"""The paper's six synthetic delay tasks (the paper's appendix C.2) as teacher-forced token prediction.

Vocabulary of ``V`` tokens: ``0`` = padding, ``1..m`` = data, ``V-1`` = go. One sequence is

    data (T) | filler (G) | padding (P) | go | target[:-1] | padding (P_max - P)

and the model predicts ``target[i]`` at the position of go (``i = 0``) or of ``target[i-1]``: the label
of position ``T + G + P + i`` is ``target[i]``, every other label is ``IGNORE``. Reading ``data[i]`` from
there is a look-back of exactly ``T + G + P`` steps: a fixed delay in the fixed protocol (one ``P`` for
every sequence), a per-sequence delay in the variable protocol (``P`` uniform in ``[P_min, P_max]``).
The filler (``G = gap`` tokens of id ``V-2``, default none) is content that carries time: a clocked model
(pause at padding) sees a look-back of ``T + G`` of its ticks whatever ``P``.

Padding that is not one id (the clock's harder case: whitespace, separators, silence come as many tokens):
``pads = k`` draws each padding token (the gap's and the trailing one's) from ``k`` ids (``0`` and the
``k - 1`` ids below go, or below the filler), uniformly or with Zipf frequencies (``pad_dist``); ``noise``
replaces each padding token by a random data value with that probability (data-like tokens in the
padding, which carry no time for the task but are not padding by their id). Targets never change: the
data are where they were.

Targets (``d`` = data, ``i`` = 0..T-1, windows truncated at the start of the data):

* copy: ``target_i = d_i``;
* select (selective copying, Mamba's paper, section 4.1.1): ``target_i = d_i`` as copy, but the ``T`` data
  tokens stand at random positions (in order) among the first ``T + P`` tokens, padding elsewhere: each
  token's look-back differs, and a model must find the data by content (a clock that pauses at the
  padding sees plain copy);
* sum: ``target_i = sum_{j=0}^{w-1} d_{i-j}`` (sliding window of width ``w``);
* weighted sum: ``target_i = round(sum_{j=0}^{w-1} g_j d_{i-j})``, ``g_j = exp(-j^2 / (2 sigma^2))``
  (Gaussian in the lag, weight 1 on the newest token, so every target is >= 1), rounded half up.

``m`` is the largest data value that keeps every target inside ``1..V-2``; a configuration with no
such ``m`` >= 2 is rejected. The paper's tables of T, P, w and V were lost with its text: the presets
below are ours, sized from its context lengths (1088 = 2 T + P with T = 32, P = 1024; 576 with
P <= 512) and marked as such.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

IGNORE = -100          # label of unsupervised positions (torch cross_entropy's ignore_index)
KINDS = ("copy", "sum", "wsum", "select")
PAPER_KINDS = KINDS[:3]  # the paper's tasks (a scale's default); select is Mamba's selective copying
COPY_KINDS = ("copy", "select")  # targets are the data themselves (no window)
PAD_DISTS = ("uniform", "zipf")  # how the padding ids are drawn
#: each kind's vocabulary (:func:`preset`); a task with another one says so in its name
VOCAB = {"copy": 16, "select": 16, "sum": 32, "wsum": 32}


@dataclass(frozen=True)
class Task:
    """One synthetic task. ``kind`` in ``copy | sum | wsum | select``; ``T`` data length; lag ``P`` in
    ``[P_min, P_max]`` (equal: fixed protocol); ``vocab`` ``V``; ``window`` ``w`` and ``sigma`` for
    sum / weighted sum; ``gap`` ``G`` filler tokens (id ``V-2``, then one data value fewer) before the
    padding (not with select, whose data are spread over the padding); ``pads`` padding ids (``k - 1``
    data values fewer), drawn ``"uniform"`` or ``"zipf"`` (``pad_dist``, frequency ``1 / rank``, id 0
    the most frequent); ``noise`` the probability that a padding token is a random data value instead."""
    kind: str
    T: int
    P_min: int
    P_max: int
    vocab: int
    window: int = 1
    sigma: float = 1.0
    gap: int = 0
    pads: int = 1
    pad_dist: str = "uniform"
    noise: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.T < 1 or self.P_min < 0 or self.P_max < self.P_min:
            raise ValueError(f"need T >= 1 and 0 <= P_min <= P_max, got T={self.T}, P=[{self.P_min}, {self.P_max}]")
        if self.kind not in COPY_KINDS and not 1 <= self.window <= self.T:
            raise ValueError(f"window must lie in [1, T={self.T}], got {self.window}")
        if self.gap < 0 or (self.gap and self.kind == "select"):
            raise ValueError(f"gap must be >= 0 (0 for select: its data are spread over the padding), got {self.gap}")
        if self.kind == "wsum" and not self.sigma > 0:
            raise ValueError(f"sigma must be positive, got {self.sigma}")
        if not (isinstance(self.pads, int) and self.pads >= 1) or self.pad_dist not in PAD_DISTS:
            raise ValueError(f"pads must be an integer >= 1 and pad_dist one of {PAD_DISTS}, got {self.pads!r}, "
                             f"{self.pad_dist!r}")
        if not 0.0 <= self.noise < 1.0:
            raise ValueError(f"noise must lie in [0, 1), got {self.noise}")
        self.data_max                                     # raises on a vocabulary too small

    @property
    def protocol(self):
        return "fixed" if self.P_min == self.P_max else "variable"

    @property
    def name(self):
        """``kind-protocol``, then ``-v<V>`` for a vocabulary other than the kind's (:data:`VOCAB`),
        ``-pads<k>`` (``-zipf``) and ``-noise<p>`` for the padding variants."""
        out = f"{self.kind}-{self.protocol}"
        if self.vocab != VOCAB[self.kind]:
            out += f"-v{self.vocab}"
        if self.pads > 1:
            out += f"-pads{self.pads}" + ("-zipf" if self.pad_dist == "zipf" else "")
        return out + (f"-noise{self.noise:g}" if self.noise else "")

    @property
    def pad_ids(self):
        """The padding ids: ``0`` and the ``pads - 1`` ids below go (below the filler with a gap)."""
        top = self.vocab - 2 - (1 if self.gap else 0)               # the highest id left to data
        return (0,) + tuple(range(top - self.pads + 2, top + 1))

    def pad_probs(self):
        """The frequency of each of :attr:`pad_ids` in the padding."""
        w = 1.0 / np.arange(1, self.pads + 1) if self.pad_dist == "zipf" else np.ones(self.pads)
        return w / w.sum()

    @property
    def length(self):
        """Context length ``2 T + G + P_max`` of every sequence."""
        return 2 * self.T + self.gap + self.P_max

    @property
    def ticks(self):
        """Tokens other than padding per sequence, ``2 T + G`` (data, filler, go, targets): a clocked
        model's horizon (with ``noise``, whose tokens are not padding by their id, the context length)."""
        return self.length if self.noise else 2 * self.T + self.gap

    @property
    def filler(self):
        """Token id of the filler (``V - 2``; only with ``gap > 0``)."""
        return self.vocab - 2

    @property
    def go(self):
        return self.vocab - 1

    def weights(self):
        """Window weights over the lags ``0..w-1`` (newest first): ones for sum, Gaussian for wsum."""
        j = np.arange(self.window if self.kind not in COPY_KINDS else 1, dtype=np.float64)
        return np.exp(-j ** 2 / (2 * self.sigma ** 2)) if self.kind == "wsum" else np.ones_like(j)

    @property
    def data_max(self):
        """``m``: the largest data token with every target inside ``1..V-2``."""
        top = self.vocab - 2 - (1 if self.gap else 0) - (self.pads - 1)   # the filler and the pads take ids
        if self.kind in COPY_KINDS:
            m = top
        else:
            total = float(self.weights().sum())
            m = int(top // total)
            while m >= 1 and math.floor(m * total + 0.5) > top:   # rounding can push past the top
                m -= 1
        if m < 2:
            raise ValueError(f"{self.kind} with window {self.window} needs a larger vocabulary than {self.vocab}: "
                             f"targets up to {self.vocab - 2} leave fewer than 2 data values")
        return m

    def targets(self, data):
        """``data`` int ``(B, T)`` -> targets int ``(B, T)`` (vectorized; windows truncated at the start)."""
        if self.kind in COPY_KINDS:
            return data.copy()
        g = self.weights()
        acc = np.zeros(data.shape, dtype=np.float64)
        for j, gj in enumerate(g):                        # lag j: d_{i-j}, zero before the start
            acc[:, j:] += gj * data[:, :data.shape[1] - j]
        return np.floor(acc + 0.5).astype(np.int64)

    def sample(self, batch, rng):
        """``(tokens, labels, lags)``: int64 ``(B, 2T + P_max)`` inputs and labels (``IGNORE`` off the target
        segment), and the lag ``P`` of each sequence ``(B,)``. ``rng``: a ``numpy.random.Generator``."""
        T, L = self.T, self.length
        data = rng.integers(1, self.data_max + 1, size=(batch, T))          # (B, T)
        tgt = self.targets(data)                                            # (B, T)
        P = rng.integers(self.P_min, self.P_max + 1, size=batch)            # (B,)
        tokens = np.zeros((batch, L), dtype=np.int64)
        labels = np.full((batch, L), IGNORE, dtype=np.int64)
        rows = np.arange(batch)[:, None]
        if self.kind == "select":                                          # T of the first T + P positions
            keys = rng.random((batch, T + self.P_max))
            keys[np.arange(T + self.P_max)[None, :] >= (T + P)[:, None]] = np.inf
            tokens[rows, np.sort(np.argsort(keys, axis=1)[:, :T], axis=1)] = data
        else:
            tokens[:, :T] = data
        tokens[:, T:T + self.gap] = self.filler
        go_at = T + self.gap + P                                            # (B,)
        if self.pads > 1 or self.noise:                                     # every padding token, redrawn
            pad = tokens == 0
            ids = np.asarray(self.pad_ids)[rng.choice(self.pads, size=(batch, L), p=self.pad_probs())]
            if self.noise:
                noisy = rng.random((batch, L)) < self.noise
                ids = np.where(noisy, rng.integers(1, self.data_max + 1, size=(batch, L)), ids)
            tokens = np.where(pad, ids, tokens)
        tokens[np.arange(batch), go_at] = self.go
        cols = go_at[:, None] + 1 + np.arange(T - 1)                        # (B, T-1)
        tokens[rows, cols] = tgt[:, :-1]
        labels[rows, go_at[:, None] + np.arange(T)] = tgt
        return tokens, labels, P

    def to_dict(self):
        d = {**asdict(self), "name": self.name, "data_max": self.data_max, "length": self.length}
        if not self.gap:                                  # runs without a filler keep their keys
            d.pop("gap")
        for k, default in (("pads", 1), ("pad_dist", "uniform"), ("noise", 0.0)):
            if d[k] == default:                           # runs with one padding id keep their keys
                d.pop(k)
        return d


def preset(kind, protocol, scale="cpu"):
    """Task settings of ours (the paper's tables were lost): ``scale="paper"`` matches its context
    lengths (T = 32; fixed P = 1024; variable P in [128, 512]); ``"cpu"`` is sized for two CPU cores
    (T = 16; fixed-delay copy at the paper's lag P = 1024, where a 2-layer S4D needs several hundred steps
    more than DS4D (at P = 256 both solve it at once); fixed sum / weighted sum at P = 256 (3 layers,
    N = 128: four times cheaper); variable P in [64, 256]); ``"control"`` the short-lag control (T = 16,
    fixed P = 16: a look-back of 32 steps, context 48, that every baseline must learn before its long-lag
    results mean anything; variable P in [8, 24]); ``"smoke"`` a tiny one (T = 4, lags up to 12) for tests
    and the smoke scale's pipeline check. Selective copying (``"select"``) takes copy's vocabulary and
    the lags of the sums (fixed P = 256 at CPU scale: Mamba's setting, 16 tokens spread over 272
    positions, scaled from its 4096)."""
    if protocol not in ("fixed", "variable"):
        raise ValueError(f"protocol must be 'fixed' or 'variable', got {protocol!r}")
    T, P_fixed, P_var = {"paper": (32, 1024, (128, 512)), "cpu": (16, 256, (64, 256)),
                         "control": (16, 16, (8, 24)), "smoke": (4, 12, (6, 12))}[scale]
    if scale == "cpu" and kind == "copy":
        P_fixed = 1024
    P_min, P_max = (P_fixed, P_fixed) if protocol == "fixed" else P_var
    extra = {"copy": {}, "select": {}, "sum": {"window": 4}, "wsum": {"window": 4, "sigma": 1.5}}[kind]
    return Task(kind, T, P_min, P_max, vocab=VOCAB[kind], **extra)
