"""A clock per token id learned from flip tests: the objective with an id paused against it ticking.

:class:`nn.LearnedTokenClock` trains its per-id logits by the straight-through derivative of the loss at
the binary clock. At a paused padding id that derivative is not the discrete preference: measured on
variable-delay copy with padding from several ids, the model already copying under the paused padding, the
derivative pushed the padding back to ticking (docs/experiments/clock-pads-select/notes.md), and the logits
sat at the threshold. :class:`FlipTokenClock` asks the discrete question directly. A training step draws
an id ``v`` of the batch, runs the model without gradients with ``v``'s decision as it is and flipped, and
compares the objective, the task loss per supervised token plus a time cost per tick, under
the two (a "flip test"): ``delta = d - cost * f_v``, ``d`` the loss with ``v`` paused minus with it ticking,
``f_v`` the share of the batch's tokens that are ``v`` (the ticks a pause saves). ``v``'s logit moves by
``delta``: an id pauses unless its ticks lower the loss by more than they cost. Several tests share the
same two passes: the rows split into groups, each group tests its own id on its own rows (the second pass
flips each row's own id), so an id of share ``f`` is tested on about ``tests * f`` of the steps rather than
``f`` (with one test per step, rare filler ids were still ticking at the budget).

The parts around the test (each was needed in the runs of clock-pads-select and clock-flip-first): the
decisions are a state with hysteresis (a ticking id pauses once its logit falls below ``pause_below``, a
paused id ticks again above ``+hysteresis``), so the layers train under one clock at a time rather than one
that flips every step; the tested id is the id at a random position of the batch (a frequent id, such as
the padding, is tested as often as it occurs), or half of the time one of the paused ids present, so a
wrongly paused id is tested often (each group draws from its own rows); and in training a fifth of the
batch's rows tick at every paused id (``explore``, :class:`nn.ExploreRows`), so the layers see paused ids
written and a flip test can find an id the task reads even after it paused, while the other rows show the
layers the clean gap they will be run on (ticking each paused id in each row with probability 0.2 instead,
:class:`nn.ExploreEach`, left 3% of the rows clean with 16 padding ids, and the layers did not learn to copy
within the budget: docs/experiments/clock-explore-select).

The system is the given clock's (:class:`nn.TokenClock` with the current decisions): exact between ticks,
LTI in ticks, O(1) decoding per token, a parallel training path equal to the recurrence; nothing is told
which ids are fillers. Cost: two forward passes without gradients per training step, for every test.
"""
from __future__ import annotations

import math

import torch

from .flip_explore import Explore, ExploreEach, ExploreRows, as_explore
from .learned_token_clock import TokenLogits

__all__ = ["FlipTokenClock"]


class FlipTokenClock(TokenLogits):
    """``tick_t = decision[id_t]``, one decision per token id, learned by flip tests; pass it as a model's
    clock (``SequenceModel(..., clock=FlipTokenClock(vocab_size))``) and add :meth:`loss` to the task loss
    at every training step.

    Parameters
    ----------
    vocab_size : int
        Ids ``0 .. vocab_size - 1`` (the model's ``d_input`` with ``embedding=True``).
    init : float, default 0.9
        ``sigma(z)`` at the start for every id (``z > hysteresis``: every id ticks).
    gain : float, default 16.0
        ``z = gain * u`` for the parameter ``u`` ``(vocab_size,)`` (:class:`nn.learned_token_clock.TokenLogits`).
    hysteresis : float, default 1.0
        A paused id ticks again once ``z > hysteresis``.
    pause_below : float, default 0.0
        A ticking id pauses once ``z < pause_below`` (at most ``hysteresis``; with both 0: the sign of
        ``z``). At ``-hysteresis`` (the first release's band) a pause could come too late: the layers learned
        to use a rare padding id's ticks while its logit fell, and it turned back before the threshold
        (docs/experiments/clock-ids-cpu).
    strength : float, default 10.0
        The flip tests' weight: the clock loss holds ``-strength / tests * delta * z[v]`` for each tested id
        ``v``, ``delta = d - cost * f_v``: ``d`` the loss per supervised token with ``v`` paused minus with it
        ticking, ``f_v`` the fraction of the tokens that are ``v`` (both over the test's rows).
    cost : float, default 0.3
        The time cost of a tick, in units of the per-token loss, inside the flip test: pausing ``v`` saves
        ``cost * f_v``, so an id pauses unless its ticks lower the loss by more.
    soft_cost : float, default 0.0
        A time cost outside the flip tests: ``soft_cost`` times the mean of ``sigma(z)`` over the batch's
        tokens, a push towards a pause on every id present at every step (its gradient only).
    explore : :class:`nn.Explore` or float, default ``ExploreRows(0.2)``
        Which paused ids tick in training (``module.training`` under autograd; drawn from the global RNG,
        as dropout): a rule, :class:`nn.ExploreEach` ``(p)`` (each row ticks each paused id with
        probability ``p``) or :class:`nn.ExploreRows` ``(p)`` (each row, with probability ``p``, ticks every
        paused id); a number ``p`` is ``ExploreEach(p)``. Validation, inference, decoding and the flip
        tests' own passes never explore.
    by_entry : float in ``[0, 1]``, default 0.0
        Of the tests not drawn among the paused ids present, the share that draws an id uniformly among the
        distinct ids present (each as often, whatever its frequency) rather than at a random position (as
        often as it occurs). A rare id that ticks is otherwise tested about as often as it occurs.
    tests : int, default 8
        Flip tests per training step, in the same two passes: the batch's rows split into ``tests`` groups
        (fewer when the batch has fewer rows), each testing its own id on its own rows. One test per step
        reaches an id of share ``f`` on about ``f`` of the steps; with many or rare filler ids the last of
        them were still ticking at the budget (docs/experiments/clock-ids-cpu).

    Notes
    -----
    Shapes: ``tokens (B, L)`` or ``(B,)`` int -> bool, the same shape (a given clock's output). The
    decisions are a buffer ``ticking`` ``(vocab_size,)`` bool, saved in the state dict: a loaded model ticks
    as it was trained. Use::

        def rows(logits):                                  # per row: summed loss, supervised count
            ce = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=-100, reduction="none")   # (B, L)
            return ce.sum(1), (y != -100).sum(1)

        s, n = rows(model(x))                              # exploring paused ids in training
        loss = s.sum() / n.sum() + clock.loss(x, lambda: rows(model(x)))
        loss.backward(); opt.step()

    ``loss`` updates the decisions from the logits at its end (the step after an optimizer step sees them).
    Under data parallelism every process must test the same id on the same loss (the same global RNG
    state, a ``loss_of`` reduced over the processes), or the processes' decisions drift apart.
    """

    def __init__(self, vocab_size, init=0.9, gain=16.0, hysteresis=1.0, strength=10.0, cost=0.3, soft_cost=0.0,
                 explore=ExploreRows(0.2), tests=8, pause_below=0.0, by_entry=0.0):
        if not 0.0 < init < 1.0:
            raise ValueError(f"init must lie in (0, 1), got {init!r}")
        for name, v in (("hysteresis", hysteresis), ("strength", strength), ("cost", cost), ("soft_cost", soft_cost)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if isinstance(tests, bool) or not (isinstance(tests, int) and tests >= 1):
            raise ValueError(f"tests must be a whole number >= 1, got {tests!r}")
        explore = as_explore(explore)
        if isinstance(by_entry, bool) or not (isinstance(by_entry, (int, float)) and 0.0 <= by_entry <= 1.0):
            raise ValueError(f"by_entry must lie in [0, 1], got {by_entry!r}")
        if not (isinstance(pause_below, (int, float)) and not isinstance(pause_below, bool)
                and math.isfinite(pause_below) and pause_below <= hysteresis):
            raise ValueError(f"pause_below must be a finite number <= hysteresis = {hysteresis!r}, got "
                             f"{pause_below!r}")
        z0 = math.log(init / (1.0 - init))
        if not z0 > hysteresis:
            raise ValueError(f"init must start every id ticking: logit(init) = {z0:.3g} must exceed hysteresis "
                             f"= {hysteresis!r}")
        if isinstance(vocab_size, bool) or not (isinstance(vocab_size, int) and vocab_size > 0):
            raise ValueError(f"vocab_size must be a whole number > 0, got {vocab_size!r}")
        super().__init__(vocab_size * self.contexts, z0, gain)                              # u (E,)
        self.hysteresis, self.pause_below, self.strength = float(hysteresis), float(pause_below), float(strength)
        self.cost, self.soft_cost = float(cost), float(soft_cost)
        self.explore, self.tests, self.by_entry = explore, tests, float(by_entry)
        self.register_buffer("ticking", torch.ones(self.u.shape[0], dtype=torch.bool))      # (E,)
        self._decisions = None               # the decisions of a flip test's pass, while it runs
        self.last_tests = []

    contexts = 1        #: decisions per id: one here; a clock that reads context has one per context

    @property
    def vocab_size(self):
        return self.u.shape[0] // self.contexts

    def __setstate__(self, state):
        """A clock pickled by an earlier version (``torch.save(model)``) keeps the rule it trained with: one
        flip test per step where it had no ``tests``, the band ``(-hysteresis, hysteresis)`` where it had no
        ``pause_below``, :class:`nn.ExploreEach` where its ``explore`` was a number, no ``by_entry``."""
        state = {"tests": 1, "last_tests": [], "_decisions": None, "by_entry": 0.0, **state}
        state.setdefault("pause_below", -state["hysteresis"])
        if not isinstance(state.get("explore"), Explore):          # a number: each row and id, as it meant
            state["explore"] = ExploreEach(state.get("explore", 0.0))
        super().__setstate__(state)

    def pauses(self):
        """The ids at which the clock stands still now.

        Returns
        -------
        list of int
        """
        return torch.nonzero(~self.ticking).flatten().tolist()

    def ticks(self, tokens, previous=None):
        """The clock's decisions at ``tokens``, never exploring.

        Parameters
        ----------
        tokens : Tensor ``(B, L)`` or ``(B,)``, integer
        previous : Tensor ``(B,)`` bool, optional
            The tick of the token before, per row (None: the start of a sequence); read only by a clock
            that decides on context (:class:`nn.FlipRunClock`), ignored here.

        Returns
        -------
        Tensor, bool, the shape of ``tokens``
        """
        t = self.check_ids(tokens)
        t2 = t if t.dim() == 2 else t[:, None]
        return self._run(t2, self.ticking.expand(t2.shape[0], -1), previous)[0].reshape(t.shape)

    def forward(self, tokens, previous=None):
        """The clock at ``tokens``: its decisions, and in training under autograd some paused ids ticking
        (``explore``).

        Parameters
        ----------
        tokens : Tensor ``(B, L)`` or ``(B,)``, integer
        previous : Tensor ``(B,)`` bool, optional
            As :meth:`ticks`.

        Returns
        -------
        Tensor, bool, the shape of ``tokens``
        """
        t = self.check_ids(tokens)
        t2 = t if t.dim() == 2 else t[:, None]                          # (B, L)
        dec = self.ticking if self._decisions is None else self._decisions
        if dec.dim() == 2:                           # a flip test's pass: decisions per row (B, E)
            if t2.shape[0] != dec.shape[0]:
                raise ValueError(f"{type(self).__name__}: the flip test's batch has {dec.shape[0]} rows, the "
                                 f"model was run on {t2.shape[0]} (loss_of must run the batch given to loss)")
            table = dec
        else:
            table = dec.expand(t2.shape[0], -1)                          # (B, E)
            if (self.explore and self.training and torch.is_grad_enabled() and self._decisions is None
                    and t.dim() == 2):
                table = table | self.explore.ticks(~dec, t2.shape[0])                      # (B, E)
        ticks, _ = self._run(t2, table, previous)
        return ticks.reshape(t.shape)

    def _run(self, tokens, table, previous=None):
        """The ticks of ``tokens`` ``(B, L)`` under per-row decisions ``table`` ``(B, E)`` and the decision
        entry of every position, ``(ticks, entries)``, both ``(B, L)``: here an entry is the token's id
        (``previous`` is not read). A clock whose decisions depend on context maps a position to its entry
        otherwise (:class:`nn.FlipRunClock`)."""
        return table.gather(1, tokens), tokens

    def _choose(self, entries):
        """The entry to test (here an id): half of the time one of the paused entries present (when any,
        uniformly), else with probability ``by_entry`` one of the entries present (uniformly), else the entry
        at a random position of ``entries`` (tested as often as they occur)."""
        flat = entries.flatten()
        present = torch.unique(flat)
        paused = present[~self.ticking[present]]
        if len(paused) and float(torch.rand(())) < 0.5:
            return int(paused[int(torch.randint(len(paused), ()))])
        if self.by_entry and float(torch.rand(())) < self.by_entry:
            return int(present[int(torch.randint(len(present), ()))])
        return int(flat[int(torch.randint(len(flat), ()))])

    def settle(self):
        """Update the decisions from the logits, with hysteresis (:meth:`loss` calls it at its end): a ticking
        id pauses below ``pause_below``, a paused id ticks again above ``hysteresis``."""
        with torch.no_grad():
            z = self.logits()
            self.ticking.copy_(torch.where(self.ticking, z >= self.pause_below, z > self.hysteresis))

    def loss(self, tokens, loss_of):
        """The clock's loss for one training step: ``tests`` flip tests on ``tokens`` and the time cost.

        The batch's rows are split into ``G = min(tests, B)`` groups (row ``r`` in group ``r % G``); each
        group draws its id from its own rows. Two passes without gradients serve every test: the
        decisions as they are, and per row the decisions with the row's group's id flipped.

        Parameters
        ----------
        tokens : Tensor ``(B, L)``, integer
            The batch the model was trained on at this step.
        loss_of : callable
            The task loss of the batch under the clock as it is now; called twice, without gradients,
            under the same RNG state (the same dropout masks); the global RNG is left as it was. It returns
            a pair ``(sums, counts)``, Tensors ``(B,)``: per row the loss summed over its supervised tokens
            and their number (the model must treat rows independently: no batch statistics); or, with
            ``tests=1`` only, a scalar, the loss per supervised token.

        Returns
        -------
        Tensor, scalar
            Zero, with the gradient of ``-strength / G * sum_g (d_g - cost * f_g) * z[v_g] + soft_cost *
            mean(sigma(z[tokens]))`` for ``u`` only (its value is 0 so that a logged loss stays the task's);
            ``d_g``: over group ``g``'s rows, the loss per supervised token with ``v_g`` paused minus with
            ``v_g`` ticking (``> 0``: ticking lowers the loss), ``f_g`` the fraction of the group's tokens
            that are ``v_g``. :attr:`last_tests` holds one ``{"id": v_g, "d": d_g, "delta": d_g - cost *
            f_g}`` per group. The decisions are then updated (:meth:`settle`).

        Raises
        ------
        ValueError
            ``tokens`` that are not a ``(B, L)`` batch of ids; ``loss_of`` returning a scalar with
            ``tests > 1``, or rows that do not match ``tokens``.
        FloatingPointError
            A non-finite loss in a test.
        """
        if not torch.is_tensor(tokens) or tokens.dim() != 2:
            raise ValueError("FlipTokenClock.loss needs the batch's token ids, a (B, L) integer tensor")
        self.check_ids(tokens)
        B, G = tokens.shape[0], min(self.tests, tokens.shape[0])
        group = torch.arange(B, device=tokens.device) % G                                    # (B,)
        base = self.ticking.clone()
        entries = self._run(tokens, base.expand(B, -1))[1]                                   # (B, L)
        ids = [self._choose(entries[group == g]) for g in range(G)]
        flipped = base.expand(B, -1).clone()                                                 # (B, V)
        for g, v in enumerate(ids):
            flipped[group == g, v] = ~base[v]
        devices = [tokens.device] if tokens.device.type == "cuda" else []
        passes = []
        with torch.no_grad():
            for dec in (base, flipped):
                with torch.random.fork_rng(devices=devices):
                    self._decisions = dec
                    try:
                        passes.append(self._rows(loss_of(), B, G))
                    finally:
                        self._decisions = None
        (s0, n), (s1, _) = passes
        z = self.logits()
        out, self.last_tests = 0.0, []
        for g, v in enumerate(ids):
            rows = group == g
            cnt = float(n[rows].sum())
            d = float((s1[rows] - s0[rows]).sum()) / cnt if cnt else 0.0     # flipped minus as is, per token
            if not math.isfinite(d):
                raise FloatingPointError(f"FlipTokenClock: the flip test of id {v} gave a non-finite loss")
            if not bool(base[v]):
                d = -d                                                         # paused minus ticking
            delta = d - self.cost * float((entries[rows] == v).double().mean())  # with the time cost
            self.last_tests.append({"id": v, "d": d, "delta": delta})
            out = out - self.strength / G * delta * z[v]
        if self.soft_cost:
            out = out + self.soft_cost * torch.sigmoid(z[entries]).mean()
        self.settle()
        return out - out.detach()                   # gradients only: a logged loss stays the task's

    @staticmethod
    def _rows(result, B, G):
        """``loss_of``'s result as per-row ``(sums, counts)``, float64 ``(B,)`` (a scalar: one row)."""
        if torch.is_tensor(result) and result.numel() != 1:
            raise ValueError(f"FlipTokenClock.loss: loss_of returned a tensor of shape {tuple(result.shape)}; it "
                             f"must return per-row (sums, counts), each ({B},), or with tests=1 a scalar")
        if torch.is_tensor(result) or isinstance(result, (int, float)):
            if G > 1:
                raise ValueError("FlipTokenClock.loss with tests > 1 needs loss_of to return per-row (sums, "
                                 "counts), each (B,), not a scalar")
            rows = torch.zeros(B, dtype=torch.float64)
            rows[0] = 1.0
            return float(result) * rows, rows                     # the whole batch as row 0
        sums, counts = (torch.as_tensor(t).detach().double().cpu() for t in result)
        if sums.shape != (B,) or counts.shape != (B,):
            raise ValueError(f"FlipTokenClock.loss: loss_of must return per-row (sums, counts) of shape ({B},), "
                             f"got {tuple(sums.shape)} and {tuple(counts.shape)}")
        return sums, counts

    def extra_repr(self):
        return (f"vocab_size={self.vocab_size}, gain={self.gain:g}, hysteresis={self.hysteresis:g}, "
                f"pause_below={self.pause_below:g}, "
                f"strength={self.strength:g}, cost={self.cost:g}, soft_cost={self.soft_cost:g}, "
                f"explore={self.explore!r}, tests={self.tests}"
                + (f", by_entry={self.by_entry:g}" if self.by_entry else ""))
