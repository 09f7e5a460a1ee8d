"""Models of the delay task: :class:`nn.SequenceModel` ``(B, L, 1) -> (B, L, n_lags)`` with DS4D or
S4D layers (S4D-Lin poles by default, pool=None), widths matched to a parameter budget.

``ds4d-tap``: DS4D with the delayed input tap (``tap=True``: per channel a gain and a trainable delay
``s_tap``, output ``+ tap_e * x(t - s_tap)``), its delay on the optimizer's base learning rate
(``tap_lr=None``) and read through a hat window whose half-width falls from ``tap_w0`` to 1 over the
first ``tap_frac`` of the run's steps (the model's :class:`experiments._models.TapSchedule`, see
:func:`tap_schedule`).

The DS4D options the diagnosis needs are configuration fields (see :class:`Arch`): the initial branch
allocation ``p0``, the delay initialization (``grid``: spread over ``[1, L-1]``; ``lag``: every channel
at the task's first lag, i.e. ``delay_init="constant", tau0=lag``; ``constant``: every channel at
``tau0``), the output GLU, pre-norm or post-norm blocks, and ``norm="none"``, which replaces every
LayerNorm (the blocks' and the final one) by the identity: with one input feature, ``Linear(1, H)``
followed by a LayerNorm maps ``x`` to a bounded, nonlinear function of ``x``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .._models import ModelSpec, TapSchedule, model_of
from .._sizes import closest_width, n_params
from . import FAMILIES

DELAY_INITS = ("grid", "lag", "constant")
TAP_FIELDS = ("tap_w0", "tap_frac")          # only in a ds4d-tap arch's dict (older results keep their keys)


@dataclass(frozen=True)
class Arch:
    """Architecture of one model: its :class:`~experiments._models.ModelSpec` (``ds4d``, ``s4d``, or DS4D
    with the input tap and its window schedule; stored as ``family``, with ``tap_w0`` / ``tap_frac`` for
    the tap) and the block's settings (the DS4D fields are ignored for S4D)."""
    model: ModelSpec = ModelSpec("ds4d")
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
        if self.model.label not in FAMILIES:
            raise ValueError(f"model must be one of {FAMILIES}, got {self.model.label!r}")
        if self.norm not in ("layer", "none"):
            raise ValueError(f"norm must be 'layer' or 'none', got {self.norm!r}")
        if self.delay_init not in DELAY_INITS:
            raise ValueError(f"delay_init must be one of {DELAY_INITS}, got {self.delay_init!r}")
        if self.delay_init == "constant" and self.tau0 is None:
            raise ValueError("delay_init='constant' needs tau0")

    @property
    def family(self):
        """The model's label (``ds4d``, ``s4d``, ``ds4d-tap``)."""
        return self.model.label

    @classmethod
    def from_dict(cls, d):
        """The architecture of a stored ``config["arch"]`` (:meth:`to_dict`'s inverse; the model read by
        :func:`experiments._models.model_of`, the one migration of stored labels)."""
        rest = {k: v for k, v in d.items() if k not in ("family",) + TAP_FIELDS}
        return cls(model_of(d), **rest)

    def to_dict(self):
        """The fields that matter for this model, ``family`` (its label) first (S4D runs carry no DS4D
        options, runs without the tap no tap fields: the dicts, hence the results keys, of the older
        families are unchanged)."""
        d = {"family": self.model.label, **{k: v for k, v in asdict(self).items() if k != "model"}}
        if not self.model.is_ds4d:
            for k in ("p0", "delay_init", "tau0"):
                d.pop(k)
        elif self.delay_init != "constant":
            d.pop("tau0")
        if self.model.tap is not None:
            d.update(tap_w0=self.model.tap.w0, tap_frac=self.model.tap.frac)
        return d

    def label(self):
        """Short name: the model's label plus every setting that differs from the defaults."""
        ref = Arch(ModelSpec(self.model.layer, tap=TapSchedule() if self.model.tap is not None else None)).to_dict()
        diff = [f"{k}={v}" for k, v in self.to_dict().items() if k not in ("family",) and ref.get(k, None) != v]
        return self.family + (f" ({', '.join(diff)})" if diff else "")


def build(arch: Arch, width, task, seed=None):
    """A fresh model for ``task`` (:class:`experiments.delay.data.Task`): DS4D's ``l_max`` is the
    sequence length; ``delay_init="lag"`` puts every channel at ``task.lags[0]``."""
    kw = {"d_state": arch.d_state, "init": arch.init, "dt_lr": arch.dt_lr, "seed": seed}
    if arch.model.is_ds4d:
        kw.update(l_max=task.L, p0=arch.p0)
        if arch.delay_init == "lag":
            kw.update(delay_init="constant", tau0=float(task.lags[0]))
        elif arch.delay_init == "constant":
            kw.update(delay_init="constant", tau0=float(arch.tau0))
    return arch.model.sequence_model(1, task.n_out, kw, d_model=width, n_layers=arch.n_layers, pool=None,
                                     glu=arch.glu, prenorm=arch.prenorm, norm=arch.norm)


def tap_schedule(arch: Arch, model, steps):
    """The tap's window schedule of a ``ds4d-tap`` model trained for ``steps`` optimizer steps (its
    :meth:`~experiments._models.TapSchedule.schedule`), ``None`` for other models."""
    return arch.model.tap.schedule(model, steps) if arch.model.tap is not None else None


def match_width(arch, budget, task, lo=2, hi=1024):
    """The width whose parameter count is closest to ``budget`` (counts grow with the width; ties: the
    smaller width)."""
    return closest_width(lambda h: n_params(build(arch, h, task)), budget, lo, hi)


__all__ = ["Arch", "DELAY_INITS", "FAMILIES", "ModelSpec", "TapSchedule", "build", "match_width", "n_params",
           "tap_schedule"]
