"""A clock learned from flip tests that reads one bit of context: whether the token before paused.

:class:`nn.FlipTokenClock` decides per id, so a token that is data in one place and noise inside a gap of
padding elsewhere cannot pause only in the gap (docs/experiments/clock-ids-cpu: data-like noise defeated
every clock decided per id). :class:`FlipRunClock` keeps two decisions per id, one for a token that follows
a tick and one for a token that follows a pause (inside a run of pauses)::

    s_0 = 0 (or the carried state),   tick_t = decision[s_t, id_t],   s_{t+1} = not tick_t

so a data id can tick after data and pause inside a run of padding. The decisions are learned exactly as
:class:`nn.FlipTokenClock` learns its per-id ones (the flip tests, their cost, the hysteresis, the
exploration), over the ``2 V`` entries ``(s, id)``: a test flips one entry and compares the objective,
the flipped entry changing the states after it. Nothing is told which ids are fillers.

The system is the given clock's: bool ticks into every clocked layer (exact between ticks, LTI in ticks,
a parallel training path equal to the recurrence). Decoding stays O(1) per token: the state is the last
token's tick, which each clocked layer's cache keeps (:attr:`nn.ClockedCache.last_tick`); the model reads
it before a step, a prefill into a used cache and a forward continued from a state (the clock's
``reads_previous_tick``). In training the states of a sequence come from a parallel prefix scan over
the two-state maps of its tokens (``O(L log L)`` elementwise work, no loop over positions).
"""
from __future__ import annotations

import math

import torch

from .flip_token_clock import FlipTokenClock

__all__ = ["FlipRunClock", "run_states"]


def run_states(k0, k1, s0):
    """The state before every token of a run clock, by a prefix scan (Hillis-Steele) over two-state maps.

    Parameters
    ----------
    k0, k1 : Tensor ``(B, L)`` bool
        The tick at each token if the token before ticked (state 0) / paused (state 1).
    s0 : Tensor ``(B,)`` bool
        The state before the first token (True: the token before paused).

    Returns
    -------
    Tensor ``(B, L)`` bool
        ``s_t``: True where the token before ``t`` paused (``s_{t+1} = not tick_t``).
    """
    B, L = k0.shape
    if L == 0:
        return k0.clone()
    g0, g1 = ~k0, ~k1                          # the state after token t from the state before it, 0 / 1
    d = 1
    while d < L:                               # g[t] := g[t] o g[t - d]: the map of the window ending at t
        a0 = torch.where(g0[:, :-d], g1[:, d:], g0[:, d:])
        a1 = torch.where(g1[:, :-d], g1[:, d:], g0[:, d:])
        g0 = torch.cat([g0[:, :d], a0], 1)
        g1 = torch.cat([g1[:, :d], a1], 1)
        d *= 2
    after = torch.where(s0[:, None], g1, g0)                                # (B, L) the state after each token
    return torch.cat([s0[:, None], after[:, :-1]], 1)


class FlipRunClock(FlipTokenClock):
    """``tick_t = decision[s_t, id_t]`` with ``s_t`` whether the token before paused: two decisions per
    token id, learned by flip tests (:class:`nn.FlipTokenClock`); pass it as a model's clock
    (``SequenceModel(..., clock=FlipRunClock(vocab_size))``) and add :meth:`loss` to the task loss at every
    training step.

    Parameters
    ----------
    vocab_size : int
        Ids ``0 .. vocab_size - 1`` (the model's ``d_input`` with ``embedding=True``).
    init_after_pause : float, default 0.55
        ``sigma(z)`` at the start for every id after a pause. At the default: ticking, but undecided (its
        logit between ``pause_below`` and ``hysteresis``), so that one flip test that finds its ticks worth
        less than their cost pauses it. Below ``sigma(pause_below)`` (e.g. 0.45 at ``pause_below=0``): paused
        from the start, so that every token inside a run of pauses pauses until a test finds its ticks worth
        more than they cost (the token that ends a gap, say). The ids after a tick start at ``init``
        (ticking, decided), as in :class:`nn.FlipTokenClock`. Why: a token inside a run of padding
        (data-like noise) is rare per id, so its entry is tested a few dozen times in a run, too few to move
        a decided logit across zero (docs/experiments/clock-pads-select).
    **options
        As :class:`nn.FlipTokenClock` (``init``, ``gain``, ``hysteresis``, ``pause_below``, ``strength``,
        ``cost``, ``soft_cost``, ``explore``, ``tests``, ``by_entry``), applied to each of the ``2 vocab_size``
        entries.

    Notes
    -----
    Entries: ``e = s * vocab_size + id`` (``s = 0``: after a tick, or at the start of a sequence; ``s = 1``:
    after a pause). The decisions are the buffer ``ticking`` ``(2 vocab_size,)`` bool, saved in the state
    dict; :meth:`logits` ``(2 vocab_size,)``. Shapes: ``tokens (B, L)`` or ``(B,)`` int, ``previous``
    ``(B,)`` bool or None -> bool, the shape of ``tokens``. A flip test of entry ``(1, v)`` changes the
    ticks after it too (a pause after it makes the next token's state 1); the test's loss sees them.
    """

    contexts = 2
    #: the model passes the tick of the token before a sequence (``previous=``) when it has one
    reads_previous_tick = True

    def __init__(self, vocab_size, init_after_pause=0.55, **options):
        super().__init__(vocab_size, **options)
        if not (isinstance(init_after_pause, (int, float)) and 0.0 < init_after_pause < 1.0):
            raise ValueError(f"init_after_pause must lie in (0, 1), got {init_after_pause!r}")
        z1 = math.log(init_after_pause / (1.0 - init_after_pause))
        self.init_after_pause = float(init_after_pause)
        with torch.no_grad():
            self.u[self.vocab_size:] = z1 / self.gain                      # (V,) the entries after a pause
            self.ticking[self.vocab_size:] = z1 >= self.pause_below        # paused from the start below it

    def pauses(self, after_pause=False):
        """The ids at which the clock stands still now, after a tick (``after_pause=False``, and at the
        start of a sequence) or inside a run of pauses.

        Parameters
        ----------
        after_pause : bool, default False

        Returns
        -------
        list of int
        """
        V = self.vocab_size
        dec = self.ticking[V:] if after_pause else self.ticking[:V]
        return torch.nonzero(~dec).flatten().tolist()

    def _run(self, tokens, table, previous=None):
        """Ticks and entries ``(B, L)`` of ``tokens`` ``(B, L)`` under per-row decisions ``table``
        ``(B, 2 V)``, after ``previous`` ``(B,)`` bool (None: a tick)."""
        B, V = tokens.shape[0], self.vocab_size
        if previous is None:
            s0 = torch.zeros(B, dtype=torch.bool, device=tokens.device)
        else:
            if not torch.is_tensor(previous) or previous.dtype != torch.bool or previous.shape != (B,):
                raise ValueError(f"FlipRunClock: previous must be the bool ticks ({B},) of the token before, got "
                                 f"{getattr(previous, 'dtype', type(previous).__name__)} "
                                 f"{tuple(getattr(previous, 'shape', ()))}")
            s0 = ~previous.to(tokens.device)
        k0, k1 = table.gather(1, tokens), table.gather(1, tokens + V)       # (B, L) after a tick / a pause
        s = run_states(k0, k1, s0)
        return torch.where(s, k1, k0), tokens + V * s.long()

    def extra_repr(self):
        return (f"contexts=2 (after a tick, after a pause), init_after_pause={self.init_after_pause:g}, "
                + super().extra_repr())
