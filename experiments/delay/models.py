"""Models of the delay task: :class:`nn.SequenceModel` ``(B, L, 1) -> (B, L, n_lags)`` with DS4D or
S4D layers (S4D-Lin poles by default, pool=None), widths matched to a parameter budget.

The DS4D options the diagnosis needs are configuration fields (see :class:`Arch`): the initial branch
allocation ``p0``, the delay initialization (``grid``: spread over ``[1, L-1]``; ``lag``: every channel
at the task's first lag, i.e. ``delay_init="constant", tau0=lag``; ``constant``: every channel at
``tau0``), the output GLU, pre-norm or post-norm blocks, and ``norm="none"``, which replaces every
LayerNorm (the blocks' and the final one) by the identity: with one input feature, ``Linear(1, H)``
followed by a LayerNorm maps ``x`` to a bounded, nonlinear function of ``x``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

import nn as dnn

DELAY_INITS = ("grid", "lag", "constant")


@dataclass(frozen=True)
class Arch:
    """Architecture of one model (``family`` ``ds4d`` / ``s4d``; the DS4D fields are ignored for S4D)."""
    family: str = "ds4d"
    n_layers: int = 2
    d_state: int = 64
    init: str = "lin"
    dt_lr: float | None = None               # None: the optimizer's learning rate
    glu: bool = True
    prenorm: bool = True
    norm: str = "layer"                      # "layer" or "none"
    p0: float = 0.1
    delay_init: str = "grid"
    tau0: float | None = None

    def __post_init__(self):
        if self.family not in ("ds4d", "s4d"):
            raise ValueError(f"family must be 'ds4d' or 's4d', got {self.family!r}")
        if self.norm not in ("layer", "none"):
            raise ValueError(f"norm must be 'layer' or 'none', got {self.norm!r}")
        if self.delay_init not in DELAY_INITS:
            raise ValueError(f"delay_init must be one of {DELAY_INITS}, got {self.delay_init!r}")
        if self.delay_init == "constant" and self.tau0 is None:
            raise ValueError("delay_init='constant' needs tau0")

    def to_dict(self):
        """The fields that matter for this family (S4D runs carry no DS4D options)."""
        d = asdict(self)
        if self.family == "s4d":
            for k in ("p0", "delay_init", "tau0"):
                d.pop(k)
        elif self.delay_init != "constant":
            d.pop("tau0")
        return d

    def label(self):
        """Short name: the family plus every setting that differs from the defaults."""
        ref = Arch(self.family).to_dict()
        diff = [f"{k}={v}" for k, v in self.to_dict().items() if k not in ("family",) and ref.get(k, None) != v]
        return self.family + (f" ({', '.join(diff)})" if diff else "")


def build(arch: Arch, width, task, seed=None):
    """A fresh model for ``task`` (:class:`experiments.delay.data.Task`): DS4D's ``l_max`` is the
    sequence length; ``delay_init="lag"`` puts every channel at ``task.lags[0]``."""
    kw = {"d_state": arch.d_state, "init": arch.init, "dt_lr": arch.dt_lr, "seed": seed}
    if arch.family == "ds4d":
        kw.update(l_max=task.L, p0=arch.p0)
        if arch.delay_init == "lag":
            kw.update(delay_init="constant", tau0=float(task.lags[0]))
        elif arch.delay_init == "constant":
            kw.update(delay_init="constant", tau0=float(arch.tau0))
    model = dnn.SequenceModel(1, task.n_out, d_model=width, n_layers=arch.n_layers, layer=arch.family,
                              layer_kw=kw, pool=None, glu=arch.glu)
    for blk in model.blocks:
        blk.prenorm = arch.prenorm              # SequenceBlock's own option (SequenceModel does not pass it)
        if arch.norm == "none":
            blk.norm = nn.Identity()
    if arch.norm == "none":
        model.norm = nn.Identity()
    return model


def n_params(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def match_width(arch, budget, task, lo=2, hi=1024):
    """The width whose parameter count is closest to ``budget`` (counts grow with the width; ties: the
    smaller width)."""
    count = lambda h: n_params(build(arch, h, task))   # noqa: E731
    a, b = lo, hi
    while b - a > 1:
        mid = (a + b) // 2
        if count(mid) < budget:
            a = mid
        else:
            b = mid
    return min((a, b), key=lambda h: (abs(count(h) - budget), h))


__all__ = ["Arch", "DELAY_INITS", "build", "match_width", "n_params"]
