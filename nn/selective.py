"""The learned clock: a gate on the layer's input sets how far its time advances at each step.

The mathematics is :mod:`ddesys.selective` (docs/theory.md §10.4): internal time ``tau_t = sum c_j``,
``h_t = lam^{c_t} h_{t-1} + c_t mu H(tau_t - s) + c_t bbar x_t``, delayed reads interpolated in internal
time. ``c = 1`` is the paper's DS4D, ``c`` in ``{0, 1}`` the binary clock of :mod:`nn.clock`; every clock
keeps the layer stable. The gate is Mamba's selection with a delay line behind it: a token with ``c``
near zero neither decays the state nor moves the delays' clock.

* :class:`GateClock`: ``c_t = sigmoid(w . x_t + b)`` per row and step (one clock per layer), ``(B, L, H)
  -> (B, L)``;
* :class:`SoftScan`: the autograd function of the scan (float64 on the CPU; other devices round-trip);
* :func:`soft_forward`: a DS4D (or S4D) layer's outputs under a soft clock;
* :class:`SoftClocked`: a DS4D / S4D layer run in the time its gate sets (``SoftClocked(inner, GateClock(H))``);
* :class:`SoftClock`: the same as a part of a model (``SequenceModel(clock=SoftClock())``).

No FFT path: the system is time-varying; the scan is ``O(B H N L)`` (compiled, parallel over (row,
channel) pairs). Decoding (:class:`SoftClockCache`, the engine :class:`nn.decode.clocked.SoftEngine`)
runs the same recurrence one token at a time: ``O(H N)`` work per token plus a binary search of the
internal times for each delayed read, and memory for every state of the sequence (``max_seqlen``),
since with a slow clock a read can reach back any number of real steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import torch
from torch import nn

from ddesys.selective import soft_scan, soft_scan_grad

from .clocked_layer import ClockedLayer
from .common import NonFiniteInputError, check_clocked_cache, check_clocked_step, check_ticks
from .decode.cache import RingCache
from .decode.clocked import soft_constants
from .decode.engine import StepMemo
from .decode.select import select_engine

__all__ = ["GateClock", "SoftClock", "SoftClockCache", "SoftClocked", "SoftScan", "soft_forward"]


class GateClock(nn.Module):
    """``c_t = sigmoid(w . x_t + b)``: how far a layer's time advances at step ``t``.

    Parameters
    ----------
    d_model : int
        Channels ``H`` of the layer input.
    init : float, default 0.9
        Initial clock value (``b = logit(init)``, ``w`` small: the layer starts near the paper's DS4D,
        whose clock is 1).
    seed : int or None
        Seeds ``w`` (the global RNG is untouched when given).

    Notes
    -----
    Shapes: ``x (B, L, H) -> c (B, L)``; ``x_t (B, H) -> (B,)``.
    """

    def __init__(self, d_model, init=0.9, seed=None):
        super().__init__()
        if not 0.0 < init < 1.0:
            raise ValueError(f"init must lie in (0, 1), got {init}")
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        self.w = nn.Parameter(torch.randn(d_model, generator=g) / d_model ** 0.5 * 0.1)   # (H,)
        self.b = nn.Parameter(torch.logit(torch.tensor(float(init))))

    def forward(self, x):
        """The clock ``c = sigmoid(w . x + b)``.

        Parameters
        ----------
        x : Tensor ``(B, L, H)`` or ``(B, H)``

        Returns
        -------
        Tensor ``(B, L)`` or ``(B,)``
            In ``(0, 1)``, in ``x``'s dtype.
        """
        return torch.sigmoid(x @ self.w.to(x.dtype) + self.b.to(x.dtype))


class SoftScan(torch.autograd.Function):
    """``y = scan(loglam, mu, bbar, cout, s, x, c)``: complex ``(H, N2)`` x4, ``s (H,)``, ``x (B, H, L)``,
    ``c (B, L)`` -> ``y = 2 Re(sum_n cout_n h_n)`` ``(B, H, L)`` in ``x``'s dtype
    (:func:`ddesys.selective.soft_scan`; float32 arithmetic for a float32 ``x``, else float64)."""

    @staticmethod
    def forward(ctx, loglam, mu, bbar, cout, s, x, c):
        args = [a.detach().cpu().numpy() for a in (loglam, mu, bbar, cout, s, x, c)]
        y, fwd = soft_scan(*args, dtype=np.float32 if x.dtype == torch.float32 else np.float64)
        ctx.args, ctx.fwd, ctx.dev = args, fwd, x.device
        ctx.dtypes = [a.dtype for a in (loglam, mu, bbar, cout, s, x, c)]
        return torch.from_numpy(y).to(x.device)

    @staticmethod
    def backward(ctx, G):
        g = soft_scan_grad(*ctx.args, ctx.fwd, G.detach().cpu().numpy())
        return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device=ctx.dev, dtype=dt)
                     for a, dt in zip(g, ctx.dtypes))


def soft_forward(layer, x, c):
    """A causal DS4D / S4D ``layer``'s outputs under the soft clock ``c`` ``(B, L)``: ``x`` ``(B, H, L)``
    -> ``(B, H, L)`` in ``x``'s dtype. The scan runs in float32 for float32 / 16-bit inputs, else float64
    (the parameters are discretized in float64 and rounded). Differentiable in the layer's parameters,
    ``x`` and ``c``."""
    rdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    cdt = torch.complex128 if rdt == torch.float64 else torch.complex64
    if not bool(torch.isfinite(c).all()):                   # a diverged gate: what a NaN loss is to training
        raise NonFiniteInputError(f"the learned clock is not finite ({int((~torch.isfinite(c)).sum())} of {c.numel()} "
                                  "values NaN or inf): the gate's parameters or its input diverged")
    layer.prepare(x.shape[-1])                              # l_max=None: the range from the first sequence
    lam, mu, bbar, cout, s = layer.delay_form(torch.float64)
    y = SoftScan.apply(torch.log(lam).to(cdt), mu.to(cdt), bbar.to(cdt), cout.to(cdt), s.double(),
                       x.to(rdt), c.to(rdt))                                    # (B, H, L)
    return (y + layer.D.to(rdt)[:, None] * x.to(rdt)).to(x.dtype)


# ---------------------------------------------------------------------------------------------- the layer
@dataclass(eq=False)
class SoftClockCache(RingCache):
    """Decode state of a :class:`SoftClocked` layer: every state so far ``buf`` ``(B, R, H, N2)`` complex and
    its internal time ``tau`` ``(B, R)`` float64 (``R = max_seqlen``: a delayed read may reach back any
    number of real steps, however few ticks), and the number ``t`` of tokens consumed."""
    buf: torch.Tensor
    tau: torch.Tensor
    t: int = 0
    max_seqlen: int | None = field(default=None, repr=False)

    def tensors(self):
        """The states, their times and any tensor a subclass adds (a clock's own state)."""
        return [v for v in (getattr(self, f.name) for f in fields(self)) if torch.is_tensor(v)]


class SoftClocked(ClockedLayer):
    """A DS4D / S4D layer run in the time its learned clock sets: ``c_t = gate(x_t)`` in ``(0, 1)``.

    Parameters
    ----------
    inner : nn.DS4D or nn.S4D
        The layer (``transposed=False``; any :class:`nn.clocked_layer.InnerLayer`).
    gate : nn.Module
        The clock, ``(B, L, H) -> (B, L)`` (and ``(B, H) -> (B,)`` per token): :class:`GateClock`.

    Notes
    -----
    Training: the scan (:func:`soft_forward`); a given clock's ``ticks`` multiply the learned one.
    Decoding: :class:`SoftClockCache` (``max_seqlen`` required), engine :class:`nn.decode.clocked.SoftEngine`;
    forced pauses (``tick=False``) are not supported: the layer sets its own clock.
    """

    cache_type = SoftClockCache

    def __init__(self, inner, gate):
        super().__init__(inner)
        self.gate = gate
        self._memo = StepMemo()

    def run(self, x, ticks, mode):
        """The training path: the scan under the gate's clock (:func:`soft_forward`).

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        ticks : Tensor ``(B, L)`` bool or None
            Pauses forced on top of the learned clock.
        mode : str
            Ignored: the system is time-varying, there is no FFT path.

        Returns
        -------
        Tensor ``(B, L, H)``

        Raises
        ------
        NonFiniteInputError
            A clock holding NaN or inf (a diverged gate).
        """
        c = self.gate(x)                                                # (B, L) in (0, 1)
        if ticks is not None:
            c = c * ticks.to(c.dtype)
        return soft_forward(self.inner, x.transpose(1, 2), c).transpose(1, 2)

    def new_cache(self, batch_size, max_seqlen, rdt):
        """A fresh :class:`SoftClockCache`, which keeps every state of the sequence.

        Parameters
        ----------
        batch_size : int
        max_seqlen : int
            Required: the cache's length ``R``.
        rdt : torch.dtype
            Real precision of the update, ``torch.float32`` or ``torch.float64``.

        Returns
        -------
        SoftClockCache
            ``buf`` ``(B, max_seqlen, H, N2)`` complex, ``tau`` ``(B, max_seqlen)`` float64.

        Raises
        ------
        ValueError
            ``max_seqlen`` None.
        """
        if max_seqlen is None:
            raise ValueError("a gated Clocked layer's decode cache keeps every state (a delayed read may reach back "
                             "any number of real steps): pass max_seqlen to allocate_inference_cache")
        dev = self.inner.D.device
        eng = select_engine("soft", dev)
        buf = eng.allocate((batch_size, max_seqlen, self.H, self.N2), self.inner.cache_dtype(rdt), dev)
        tau = torch.zeros(batch_size, max_seqlen, dtype=torch.float64, device=dev)
        return SoftClockCache(buf, tau, **self.clock_state(batch_size, dev)).bind(self, eng, max_seqlen)

    def decode_constants(self, rdt):
        """:func:`nn.decode.clocked.soft_constants` of the inner layer, memoized.

        Parameters
        ----------
        rdt : torch.dtype
            Real precision, ``torch.float32`` or ``torch.float64``.

        Returns
        -------
        object
            The soft engine's constants.
        """
        return self._memo.get(self.inner, rdt, lambda r: soft_constants(self.inner, r))

    @torch.no_grad()
    def step(self, x_t, cache, tick=None):
        """One token of decoding; appends its state to ``cache``.

        Parameters
        ----------
        x_t : Tensor ``(B, H)``
        cache : SoftClockCache
            This layer's.
        tick : Tensor ``(B,)`` bool, optional
            Must be all True (or None): the layer sets its own clock.

        Returns
        -------
        Tensor ``(B, H)``
            In ``x_t``'s dtype.

        Raises
        ------
        NotImplementedError
            A forced pause (``tick`` False somewhere).
        RuntimeError
            A full cache (it holds ``max_seqlen`` tokens).
        ValueError, TypeError
            An ``x_t`` or ``tick`` of another shape or dtype, a cache of another layer or batch.
        """
        tick = check_clocked_step(self, x_t, cache, tick)
        if not bool(tick.all()):
            raise NotImplementedError("a gated layer sets its own clock: forced pauses (tick=False) in decoding "
                                      "are not supported")
        if cache.t >= cache.max_seqlen:
            raise RuntimeError(f"the cache is full: it holds max_seqlen = {cache.max_seqlen} tokens")
        consts = self.bind_cache(cache)
        y = cache.engine.step(cache, x_t, consts, self.gate(x_t).to(torch.float64))
        cache.t += 1
        return y.to(x_t.dtype)

    @torch.no_grad()
    def prefill(self, x, cache, ticks=None):
        """Consume a prompt: into a fresh cache one scan, its states kept; into a cache holding tokens, step
        by step.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        cache : SoftClockCache
            This layer's; moved on by ``L`` tokens.
        ticks : Tensor ``(B, L)`` bool, optional
            Must be all True (or None).

        Returns
        -------
        Tensor ``(B, L, H)``

        Raises
        ------
        NotImplementedError
            A forced pause.
        ValueError
            A prompt longer than the cache's ``max_seqlen``; a cache of another layer or batch.
        RuntimeError
            A cache filled past ``max_seqlen`` while stepping.
        """
        B, L = x.shape[0], x.shape[1]
        check_clocked_cache(self, cache, B)
        ticks = None if ticks is None else check_ticks(ticks, B, L, x.device)
        if cache.t != 0 or L == 0:
            steps = [self.step(x[:, t], cache, None if ticks is None else ticks[:, t]) for t in range(L)]
            return torch.stack(steps, dim=1) if L else x.clone()
        if ticks is not None and not bool(ticks.all()):
            raise NotImplementedError("a gated layer sets its own clock: forced pauses (ticks False) in decoding "
                                      "are not supported")
        if L > cache.max_seqlen:
            raise ValueError(f"the prompt has {L} tokens, the cache holds max_seqlen = {cache.max_seqlen}")
        y = cache.engine.prefill(self, cache, x, self.gate(x))
        cache.t = L
        return y.to(x.dtype)


class SoftClock:
    """The soft learned clock as a part of a model: ``SequenceModel(clock=SoftClock())`` runs every block's
    layer in the time its own :class:`GateClock` sets (:class:`SoftClocked`); ``clock="learned"`` is
    ``SoftClock(seed=layer_kw["seed"])``.

    Parameters
    ----------
    init : float, default 0.9
        Every gate's initial clock value (:class:`GateClock`).
    seed : int or None
        Seeds every gate's ``w`` (the same seed for each block; the global RNG is untouched when given).
    """

    def __init__(self, init=0.9, seed=None):
        self.init, self.seed = init, seed

    def wrap(self, layer, index):
        """Block ``index``'s ``layer`` in the time of a new gate.

        Parameters
        ----------
        layer : nn.DS4D or nn.S4D
            ``transposed=False``.
        index : int
            The block's place in the model (unused: every gate gets the same seed).

        Returns
        -------
        SoftClocked

        Raises
        ------
        TypeError, ValueError
            As :class:`SoftClocked` and :class:`GateClock` (an ``init`` outside ``(0, 1)``).
        """
        return SoftClocked(layer, GateClock(layer.H, init=self.init, seed=self.seed))

    def __repr__(self):
        return f"SoftClock(init={self.init}, seed={self.seed})"
