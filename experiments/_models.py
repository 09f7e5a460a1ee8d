"""One model specification for every experiment: the layer, its delayed input tap (with the tap's window
schedule), its clock and further layer options, as one small frozen value (:class:`ModelSpec`).

The family label that names a model in commands, reports and results files (``ds4d``, ``ds4d-tap``,
``s4d-gate``, ...) is derived from the specification (:attr:`ModelSpec.label`) and read back once, by
:meth:`ModelSpec.from_label`, at the command line and where stored results are loaded
(:func:`model_of`, which also reads the delay task's tap fields). Nothing else parses a label: builders
take the specification, reports ask it.

* ``layer``: ``"ds4d"`` or ``"s4d"`` (:mod:`ddesys.nn`), or a baseline built by an experiment itself
  (``"lstm"``, ``"mamba"``, ``"gpt2"``, ``"llama"``);
* ``tap``: ``None``, or a :class:`TapSchedule` (DS4D only): the delayed input tap, its delay on the
  optimizer's base learning rate, read through a window whose half-width falls from ``w0`` to 1 over the
  first ``frac`` of the steps (:class:`nn.TapWidthSchedule`); label suffix ``-tap``;
* ``clock``: ``None``, ``"given"`` (:class:`nn.clock.TokenClock`: time stands still at padding tokens;
  suffix ``-clock``), ``"learned"`` (a soft gate per layer; suffix ``-gate``) or ``"binary"`` (a gate per
  layer that ticks or pauses, trained with a time cost: :class:`nn.learned_clock.TimeCost`; suffix
  ``-tick``) or ``"token"`` (one learned clock per token id, shared by the layers: :class:`nn.LearnedTokenClock`,
  trained with the same time cost; suffix ``-idclock``) or ``"flip"`` (one decision per token id learned by flip
  tests with its own time cost: :class:`nn.FlipTokenClock`; suffix ``-flipclock``) or ``"run"`` (the same with two
  decisions per id, after a tick and inside a run of pauses: :class:`nn.FlipRunClock`; suffix ``-runclock``),
  for DS4D and S4D;
* ``options``: further layer keyword arguments, as sorted ``(name, value)`` pairs (not in the label:
  an experiment that varies them names its variants itself, e.g. :data:`experiments.s4_recipe.ARMS`).
"""
from __future__ import annotations

from dataclasses import dataclass

LAYERS = ("ds4d", "s4d")                              # the project's layers (ddesys.nn)
BASELINES = ("lstm", "mamba", "gpt2", "llama")        # built by the experiments that compare against them
CLOCKS = {"given": "clock", "learned": "gate", "binary": "tick", "token": "idclock",
          "flip": "flipclock", "run": "runclock"}                                  # clock -> its label suffix
TIME_COST = {"weight": 0.3, "steps": 100, "after": 0.03}   # a learned clock's training prior (nn.TimeCost)
FLIP_TESTS = 8                                  # nn.FlipTokenClock's default flip tests per step (tested equal)
FLIP_PAUSE_BELOW = 0.0                          # nn.FlipTokenClock's default pause threshold (tested equal)
FLIP_EXPLORE = "rows"                           # nn.FlipTokenClock's default exploration rule (tested equal)
EXPLORE_RULES = {"each": "ExploreEach", "rows": "ExploreRows"}    # a rule's name -> its nn part
FLIP_EXPLORE_P = 0.2                            # the probability of nn.FlipTokenClock's default rule (tested equal)
W0, FRAC = 64.0, 0.6                  # the default window schedule: half-width 64 steps down to 1 at 60%


@dataclass(frozen=True)
class TapSchedule:
    """The delayed input tap and its window schedule: half-width ``w0`` (steps, >= 1) down to 1 over the
    first ``frac`` (in (0, 1]) of the optimizer steps."""
    w0: float = W0
    frac: float = FRAC

    def __post_init__(self):
        if not self.w0 >= 1.0:
            raise ValueError(f"tap_w0 must be >= 1, got {self.w0!r}")
        if not 0.0 < self.frac <= 1.0:
            raise ValueError(f"tap_frac must lie in (0, 1], got {self.frac!r}")

    def schedule(self, model, steps):
        """A :class:`nn.TapWidthSchedule` of ``model``'s tap layers over ``steps`` optimizer steps (it sets
        the width ``w0`` now; step it after every optimizer step), ``None`` when ``model`` has no tap."""
        from ddesys import nn as dnn

        from ._probes import tap_layers
        if not tap_layers(model):
            return None
        return dnn.TapWidthSchedule(model, w0=self.w0, steps=steps, frac=self.frac)


@dataclass(frozen=True)
class ModelSpec:
    """One model of an experiment (module docstring); ``label`` names it."""
    layer: str = "ds4d"
    tap: TapSchedule | None = None
    clock: str | None = None
    options: tuple = ()

    def __post_init__(self):
        if self.layer not in LAYERS + BASELINES:
            raise ValueError(f"layer must be one of {LAYERS + BASELINES}, got {self.layer!r}")
        if self.tap is not None and (self.layer != "ds4d" or not isinstance(self.tap, TapSchedule)):
            raise ValueError(f"tap must be None or a TapSchedule, on a ds4d layer (got {self.tap!r} on {self.layer})")
        if self.clock is not None and (self.clock not in CLOCKS or self.layer not in LAYERS):
            raise ValueError(f"clock must be None or one of {tuple(CLOCKS)}, on a layer of {LAYERS} "
                             f"(got {self.clock!r} on {self.layer})")
        object.__setattr__(self, "options", tuple(sorted(dict(self.options).items())))

    @property
    def label(self):
        """The family label: the layer, ``-tap`` with the tap, ``-clock`` / ``-gate`` with a clock."""
        return self.layer + ("-tap" if self.tap is not None else "") + \
            (f"-{CLOCKS[self.clock]}" if self.clock is not None else "")

    @classmethod
    def from_label(cls, label, tap=None):
        """The specification a family label names (its inverse: :attr:`label`); ``tap``: the
        :class:`TapSchedule` of a ``-tap`` label (default :class:`TapSchedule()`). Raises ``ValueError``
        for a label no specification has. Meant for the command line and stored results only."""
        layer, *parts = str(label).split("-")          # parser: the one place a label is read
        suffix = {v: k for k, v in CLOCKS.items()}
        kw = {}
        if parts[:1] == ["tap"]:
            kw["tap"], parts = tap if tap is not None else TapSchedule(), parts[1:]
        if len(parts) == 1 and parts[0] in suffix:
            kw["clock"], parts = suffix[parts[0]], []
        if parts:
            raise ValueError(f"not a model label: {label!r} (e.g. {', '.join(FAMILIES)})")
        spec = cls(layer, **kw)
        if spec.label != label:                                      # pragma: no cover - guards the inverse
            raise ValueError(f"not a model label: {label!r}")
        return spec

    @property
    def is_ds4d(self):
        """Whether the model's layers are DS4D (delays, a mechanism to probe)."""
        return self.layer == "ds4d"

    @property
    def is_baseline(self):
        """Whether the model is a baseline built by the experiment itself (not :class:`nn.SequenceModel`)."""
        return self.layer in BASELINES

    def layer_kw(self, **kw):
        """The layer keyword arguments: ``kw`` (the experiment's), then ``options``, then the tap's
        (``tap=True``, its delay on the optimizer's base rate: ``tap_lr=None``)."""
        out = {**kw, **dict(self.options)}
        if self.tap is not None:
            out.update(tap=True, tap_lr=None)
        return out

    @property
    def counts_ticks(self):
        """Whether the layers' delays count ticks of a clock that pauses (given, binary or per id), not steps."""
        return self.clock in ("given", "binary", "token", "flip", "run")

    @property
    def flip_tested(self):
        """Whether the model's clock is learned by flip tests (per id, or per id and context)."""
        return self.clock in ("flip", "run")

    def flip_clock(self, vocab, **options):
        """The clock of a flip-tested model (:attr:`flip_tested`) over ``vocab`` ids, with ``options``."""
        from ddesys import nn as dnn
        if not self.flip_tested:
            raise ValueError(f"{self.label} has no clock learned by flip tests")
        return (dnn.FlipRunClock if self.clock == "run" else dnn.FlipTokenClock)(vocab, **options)

    @property
    def time_cost(self):
        """Whether the model's clock is learned by ticking or pausing under a time cost (binary, per id)."""
        return self.clock in ("binary", "token")

    def sequence_model(self, d_input, d_output, layer_kw, pad=(), **model_kw):
        """The :class:`nn.SequenceModel` of a DS4D / S4D specification: ``layer_kw`` completed by
        :meth:`layer_kw`; the clock ``"given"`` pauses at the token ids ``pad``; ``model_kw`` go to the
        model (``d_model``, ``n_layers``, ``embedding``, ...)."""
        from ddesys import nn as dnn
        if self.layer not in LAYERS:
            raise ValueError(f"{self.label} is not built by nn.SequenceModel")
        if self.clock is not None:                 # a configured part given for a learned clock wins
            clock = {"given": lambda: dnn.TokenClock(tuple(pad)),
                     "token": lambda: dnn.LearnedTokenClock(d_input),
                     "flip": lambda: self.flip_clock(d_input),
                     "run": lambda: self.flip_clock(d_input)}.get(self.clock, lambda: self.clock)
            if "clock" not in model_kw:
                model_kw["clock"] = clock()
        return dnn.SequenceModel(d_input, d_output, layer=self.layer, layer_kw=self.layer_kw(**layer_kw), **model_kw)


FAMILIES = ("ds4d", "ds4d-tap", "s4d", "lstm", "mamba", "gpt2", "llama", "ds4d-clock", "s4d-clock", "ds4d-gate",
            "s4d-gate", "ds4d-tick", "s4d-tick", "ds4d-idclock", "s4d-idclock",
            "ds4d-flipclock", "s4d-flipclock", "ds4d-runclock", "s4d-runclock")   # every label an experiment runs


def model_of(config):
    """The :class:`ModelSpec` of a stored run's ``config``: the migration of results files, whose runs
    name their model by its label (``config["family"]``; the delay task: ``config["arch"]["family"]``
    with the tap's schedule in ``tap_w0`` / ``tap_frac``). Labels stay what results files store, so
    their keys and reports are unchanged."""
    arch = config.get("arch", config)
    tap = TapSchedule(arch["tap_w0"], arch["tap_frac"]) if "tap_w0" in arch and "tap_frac" in arch else None
    return ModelSpec.from_label(arch["family"], tap=tap)


def parse_models(labels):
    """argparse helper: the :class:`ModelSpec` of each label given on the command line."""
    return tuple(ModelSpec.from_label(x) for x in labels)


__all__ = ["BASELINES", "CLOCKS", "TIME_COST", "FAMILIES", "LAYERS", "ModelSpec", "TapSchedule", "model_of",
           "parse_models"]
