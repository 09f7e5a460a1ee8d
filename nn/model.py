"""Blocks and sequence models around DS4D / S4D layers."""
from __future__ import annotations

from operator import is_

import torch
from torch import nn

from .block import SequenceBlock, clock_parts, named_clock, norm_layer
from .decode.cache import allocate_caches, refuse_dtype_as_max_seqlen, reset_caches
from .generate import generate
from .inputs import check_carry, check_owned_caches, checked_input, warn_dropout
from .lengths import left_align, right_align, valid_mask, zero_padding
from .model_step import StepPlan

__all__ = ["SequenceBlock", "SequenceModel"]



class SequenceModel(nn.Module):
    """Encoder -> ``n_layers`` blocks -> final norm -> pooling -> decoder.

    Parameters
    ----------
    d_input : int
        Input features (or vocabulary size with ``embedding=True``).
    d_output : int
        Outputs per position (``pool=None``) or per sequence; a token LM uses
        ``embedding=True, pool=None``.
    d_model : int, default 128
        Channels ``H`` of the blocks.
    n_layers : int, default 4
        Number of :class:`SequenceBlock`.
    layer : "ds4d", "s4d" or callable, default "ds4d"
        Every block's layer: a name (built with ``layer_kw``) or a factory ``(d_model, index) -> module``
        called once per block (``index`` 0 .. ``n_layers - 1``), e.g. to give each block its own branches.
    layer_kw, dropout, glu, activation :
        Passed to every :class:`SequenceBlock`.
    pool : {None, "mean", "last"}
        Pooling over the sequence before the decoder.
    embedding : bool, default False
        ``nn.Embedding`` encoder for token ids instead of ``nn.Linear``.
    prenorm : bool, default True
        Pre-norm blocks; ``False``: post-norm (see :class:`SequenceBlock`).
    norm : {"layer", "none"}, default "layer"
        The blocks' and the final normalization: ``nn.LayerNorm`` or the identity.
    clock : given clock, part, "learned", "binary" or None
        A selective clock (docs/theory.md §10). A *given clock* maps the model's input ``(B, L)`` token
        ids (or ``(B,)`` for a step) to bool ticks, e.g. :class:`nn.clock.TokenClock` ``(pause_tokens=(0,))``
        or any callable: every block's layer then runs in its own time (:class:`nn.clock.Clocked`): frozen
        at pauses, its delays counted in ticks; build its layers with ``layer_kw["l_max"]`` the longest
        tick count (None: from the first batch); ``lengths=`` marks the right padding as pauses. A *part*
        (an object with ``wrap(layer, index)``, :class:`nn.clocked_layer.ClockPart`) clocks each block's
        layer itself: :class:`nn.learned_clock.BinaryClock` (``"binary"``: each layer's gate ticks or
        pauses per token, trained by the scan with a straight-through gradient, validated by the FFT on
        the ticks, decoded in O(1); train it with :class:`nn.learned_clock.TimeCost`),
        :class:`nn.selective.SoftClock` (``"learned"``: each layer's own gate sets its clock, trained by a
        scan, §10.4; decoding needs ``max_seqlen``), or a clock of your own
        (:class:`nn.clocked_layer.ClockedLayer`).
    device, dtype : optional
        Where and in which floating dtype the parameters live. The model is built on the CPU in
        float32 and then moved, so a seed gives the same weights on every device.

    Raises
    ------
    ValueError
        An unknown ``pool``, ``layer``, ``norm`` or clock name, ``layer_kw["branches"]`` shared by several
        blocks, or a ``dtype`` that is not a floating dtype.
    TypeError
        A ``clock`` or ``layer`` of another kind.

    See Also
    --------
    param_groups : optimizer groups for the model's parameters.

    Notes
    -----
    Shapes: ``(B, L, d_input)`` (or ``(B, L)`` token ids) -> ``(B, L, d_output)`` / ``(B, d_output)``.

    Examples
    --------
    A sequence classifier:

    >>> import torch
    >>> from ddesys.nn import SequenceModel
    >>> model = SequenceModel(d_input=1, d_output=10, d_model=16, n_layers=2, pool="mean")
    >>> model(torch.randn(2, 32, 1)).shape
    torch.Size([2, 10])

    A token model, prompted in parallel then decoded one token at a time:

    >>> lm = SequenceModel(d_input=50, d_output=50, d_model=16, n_layers=2, embedding=True,
    ...                    layer_kw={"l_max": 12}).eval()     # delay range fixed before decoding
    >>> ids = torch.randint(0, 50, (2, 12))
    >>> caches = lm.allocate_inference_cache(2)
    >>> with torch.no_grad():
    ...     y_prompt = lm.prefill(ids[:, :8], caches)      # (B, 8, d_output)
    ...     y_next = lm.step(ids[:, 8], caches)            # (B, d_output)
    ...     y_full = lm(ids)
    >>> y_prompt.shape, y_next.shape
    (torch.Size([2, 8, 50]), torch.Size([2, 50]))
    >>> torch.allclose(y_next, y_full[:, 8], atol=1e-4)
    True

    Or let :meth:`generate` run the prefill / step / sample loop:

    >>> out = lm.generate(ids[:, :4], max_new_tokens=6, temperature=0)   # greedy
    >>> out.shape
    torch.Size([2, 10])
    """

    def __init__(self, d_input, d_output, d_model=128, n_layers=4, layer="ds4d", layer_kw=None,
                 dropout=0.0, pool=None, embedding=False, glu=True, activation="gelu", *, prenorm=True,
                 norm="layer", clock=None, device=None, dtype=None):
        super().__init__()
        clock = named_clock(clock, (layer_kw or {}).get("seed"))
        ticks, _ = clock_parts(clock)                        # TypeError for a clock of another kind
        if isinstance(layer, nn.Module):
            raise TypeError("layer must be a name or a factory (d_model, index) -> module: one module cannot be "
                            "every block's layer")
        if n_layers > 1 and (layer_kw or {}).get("branches"):
            raise ValueError("layer_kw['branches'] would put the same branch objects (one set of parameters) in "
                             "every block: pass a factory, layer=lambda d_model, i: DS4D(d_model, branches=[...])")
        if pool not in (None, "mean", "last"):
            raise ValueError(f"pool must be None, 'mean' or 'last', got {pool!r}")
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"dtype must be a floating torch.dtype (torch.float32, torch.float64, ...), got {dtype!r}")
        if device is not None:
            try:
                device = torch.device(device)
            except (RuntimeError, TypeError) as err:
                raise ValueError(f"device must name a torch device ('cpu', 'cuda:0', ...), got {device!r}") from err
        self.encoder = nn.Embedding(d_input, d_model) if embedding else nn.Linear(d_input, d_model)
        self.blocks = nn.ModuleList(SequenceBlock(d_model, layer, layer_kw, activation, dropout, glu,
                                                  prenorm=prenorm, norm=norm, clock=clock, index=i)
                                    for i in range(n_layers))
        self.clock = ticks                                   # the given clock (ticks from the input), or None
        self.norm = norm_layer(norm, d_model)
        self.decoder = nn.Linear(d_model, d_output)
        self.pool = pool
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    # ------------------------------------------------------------------ inputs
    def _embed(self, x, n=None):
        """The encoder's output ``(B, L, H)`` for checked input ``x`` (:func:`nn.inputs.checked_input`), zero
        at the padding of a right-padded batch (lengths ``n``)."""
        h = self.encoder(x)
        return h if n is None else zero_padding(h, n)

    def _ticks(self, x, n=None, hard=False, previous=None):
        """The clock's ticks for input ``x`` (None without a clock); right padding (``n``) pauses (also for
        layers with their own learned clock: the padding is then a forced pause). A learned given clock
        (:class:`nn.LearnedTokenClock`) gives float ticks under autograd (values 0 / 1 with a gradient);
        ``hard``: bool ticks whatever the clock (decoding). ``previous`` ``(B,)`` bool: the tick of the token
        before ``x``, for a clock that reads it (:meth:`_previous`)."""
        if self.clock is None:
            if n is not None and all(getattr(blk.layer, "takes_ticks", False) for blk in self.blocks):
                return valid_mask(n, x.shape[1])
            return None
        ticks = self.clock(x) if previous is None else self.clock(x, previous=previous)
        if ticks.is_floating_point() and hard:
            ticks = ticks > 0.5
        if n is not None:
            valid = valid_mask(n, ticks.shape[1])
            ticks = ticks * valid.to(ticks.dtype) if ticks.is_floating_point() else ticks & valid
        return ticks

    def _previous(self, caches):
        """The tick of the last token ``caches`` hold, for a given clock that reads it (its
        ``reads_previous_tick``, :class:`nn.FlipRunClock`); None for other clocks, without caches and
        before the first token."""
        if caches is None or not getattr(self.clock, "reads_previous_tick", False) or caches[0].t == 0:
            return None
        last = getattr(caches[0], "last_tick", None)
        if last is None:
            raise ValueError(f"{type(self.clock).__name__} continues from the tick of the token before, but these "
                             "caches keep none (made by another layer or an earlier version): allocate them "
                             "with allocate_inference_cache")
        return last

    def _keep_ticks(self, caches, ticks, n):
        """After a right-padded prompt or chunk (lengths ``n``): each cache's ``last_tick`` is its row's tick
        at its own last token (the padding after it is a forced pause), for a clock that reads it."""
        if n is None or ticks is None or not getattr(self.clock, "reads_previous_tick", False):
            return
        rows = torch.arange(ticks.shape[0], device=ticks.device)
        last = ticks[rows, (n - 1).clamp(min=0)].bool()                    # (B,) the row's own last token
        for c in caches:
            keep = c.last_tick if c.last_tick is not None else last
            c.last_tick = torch.where(n > 0, last, keep)

    def _head(self, h):
        return self.decoder(self.norm(h))

    def forward(self, x, mode="fft", lengths=None, state=None, return_state=False):
        """``(B, L, d_input)`` (or ``(B, L)`` ids) -> ``(B, L, d_output)``, or ``(B, d_output)`` pooled.

        Parameters
        ----------
        x : Tensor ``(B, L, d_input)`` or ``(B, L)`` token ids
            Ids must lie in ``[0, d_input)`` (at valid positions; ``ValueError`` naming the first other).
        mode : {"fft", "recurrent"}
            The layers' path (see :meth:`SequenceBlock.forward`).
        lengths : Tensor or sequence ``(B,)`` of ints, optional
            A right-padded batch: sequence ``b`` holds ``lengths[b]`` tokens. Each sequence gets the
            outputs it would get alone at its valid positions (bidirectional layers included), and
            pooling covers its valid positions only. The padding is replaced before anything reads it
            (ids by a valid id, inputs by zeros; it may hold anything, NaN or ids outside the vocabulary
            included), and the outputs there are zero.
        state : list, optional
            One state per block, each its layer's cache (from :meth:`allocate_inference_cache`,
            :meth:`prefill`, decoding, or a previous ``return_state``): the sequences continue from it
            (read, never modified), as each layer's ``forward(state=)``. Not with ``lengths`` (except
            with a clock: the padding is a pause). Clocked layers carry their decode state exactly but
            without gradients (under autograd they refuse: carry under ``torch.no_grad()``).
        return_state : bool, default False
            Also return the state after the sequence, one new cache per block: differentiable (autograd
            flows across chunks; ``cache.detach()`` truncates it), it continues a later ``forward``
            (chunks forwarded state to state give the whole sequence's outputs, to the kernels'
            synthesis error) and decodes like any cache (:meth:`step`; under autograd detach it first).
            With ``lengths``: each sequence's state after its own last token.

        Returns
        -------
        Tensor ``(B, L, d_output)`` or ``(B, d_output)``; with ``return_state`` the pair ``(y, state)``.

        Raises
        ------
        ValueError, TypeError
            ``x`` of another shape or dtype, ids outside the vocabulary, a state that is not one cache
            per block (each named); ``state`` / ``return_state`` with layers that carry none.
        RuntimeError
            A state of another model's layers; a clocked layer's carry under autograd.
        """
        x, _, n = checked_input(self, x, "forward", lengths=lengths)   # padding replaced
        carry = state is not None or return_state
        if carry:
            check_carry(self)                                        # layers that carry state (no clock)
            if self.pool == "mean":
                raise ValueError("state= / return_state= with pool='mean': a chunk's mean is not the whole "
                                 "sequence's, so chunks would not give the whole sequence's output; use "
                                 "pool=None and average the outputs over the chunks yourself, or pool='last'")
            if state is not None:
                self._check_caches(state, "forward")
        h = self._embed(x, n)                                        # (B, L, H)
        ticks = self._ticks(x, n, hard=carry, previous=self._previous(state))   # (B, L) or None
        new = []
        for i, blk in enumerate(self.blocks):
            kw = {"state": None if state is None else state[i], "return_state": return_state} if carry else {}
            h = blk(h, mode=mode, lengths=None if ticks is not None else n, ticks=ticks, **kw)
            if return_state:
                h, s_i = h
                new.append(s_i)
        h = self.norm(h)
        if self.pool == "mean":
            h = h.mean(dim=1) if n is None else zero_padding(h, n).sum(dim=1) / n[:, None].to(h.dtype)
        elif self.pool == "last":
            h = h[:, -1] if n is None else h[torch.arange(h.shape[0], device=h.device), n - 1]
        y = self.decoder(h)
        if self.pool is None and n is not None:
            y = zero_padding(y, n)                                   # nothing at the padding
        if return_state:
            self._keep_ticks(new, ticks, n)
        return (y, new) if return_state else y

    def __setstate__(self, state):
        """Unpickling (``torch.load`` of a whole model): a model pickled before clocks existed has none."""
        super().__setstate__({"clock": None, **state})

    # ------------------------------------------------------------------ decoding
    def allocate_inference_cache(self, batch_size, max_seqlen=None, dtype=None, **kwargs):
        """Fresh decode caches for ``batch_size`` sequences: a list, one per block (Mamba's signature).

        Parameters
        ----------
        batch_size : int
        max_seqlen : int, optional
            The longest sequence (prompt plus generated tokens) the caches will see; validated and
            passed to layers that take it (a DS4D cache is sized by the layer's delays, not by it).
        dtype : torch.dtype, optional
            ``torch.float64`` for complex128 states (default complex64).
        **kwargs
            Passed to every layer's ``allocate_inference_cache``, e.g. ``history_dtype=torch.bfloat16``
            for DS4D; a keyword a layer does not take raises ``TypeError`` naming it.

        Returns
        -------
        list
            One layer cache per block, for :meth:`step`, :meth:`prefill` and :meth:`reset_cache`.

        Raises
        ------
        TypeError
            A dtype given second (where ``max_seqlen`` is): pass it as ``dtype=``.
        """
        refuse_dtype_as_max_seqlen(max_seqlen, "SequenceModel")
        return allocate_caches([blk.layer for blk in self.blocks], batch_size, max_seqlen, dtype, kwargs)

    def reset_cache(self, caches):
        """Put used caches back to the empty state, in place, to decode new sequences without allocating
        again.

        Parameters
        ----------
        caches : list
            From :meth:`allocate_inference_cache`, one per block.

        Raises
        ------
        ValueError
            ``caches`` not a list of one cache per block.
        RuntimeError
            A cache not allocated by this model's layer at its place (another model's, or out of order):
            refused before any is reset, as :meth:`step` and :meth:`prefill` refuse them.
        """
        self._check_caches(caches, "reset_cache")
        check_owned_caches([blk.layer for blk in self.blocks], caches, "reset_cache")
        reset_caches(caches)

    def _check_caches(self, caches, what):
        if not isinstance(caches, (list, tuple)) or len(caches) != len(self.blocks):
            got = f"{len(caches)} caches" if isinstance(caches, (list, tuple)) else type(caches).__name__
            raise ValueError(f"SequenceModel.{what} needs one cache per layer ({len(self.blocks)}, from "
                             f"allocate_inference_cache), got {got}")

    def step_input(self, x_t, caches):
        """The checks and the clock of :meth:`step`.

        Parameters
        ----------
        x_t : Tensor ``(B, d_input)`` or ``(B, 1, d_input)``, or token ids ``(B,)`` or ``(B, 1)``
        caches : list
            One cache per block.

        Returns
        -------
        x : Tensor ``(B, d_input)`` or ids ``(B,)``
        tick : Tensor ``(B,)`` bool or None
            The given clock's ticks (None without one).
        seq_axis : bool
            Whether ``x_t`` had the length axis.

        Raises
        ------
        ValueError, TypeError
            As :meth:`step`.
        """
        self._check_caches(caches, "step")
        x, seq_axis, _ = checked_input(self, x_t, "step", step=True)   # (B, d_input) or ids (B,)
        tick = None
        if self.clock is not None:                                   # the clock sees a length-1 sequence
            xs = x_t.reshape(x_t.shape[0], 1, -1) if x_t.is_floating_point() else x_t.reshape(x_t.shape[0], 1)
            tick = self._ticks(xs, hard=True, previous=self._previous(caches))[:, 0]   # (B,) bool
        return x, tick, seq_axis

    def step(self, x_t, caches):
        """One position of decoding (no pooling).

        Parameters
        ----------
        x_t : Tensor ``(B, d_input)`` or ``(B, 1, d_input)``, or token ids ``(B,)`` or ``(B, 1)``
        caches : list
            From :meth:`allocate_inference_cache`, one per block; updated in place.

        Returns
        -------
        Tensor ``(B, d_output)``
            ``(B, 1, d_output)`` for an input with the length axis.

        Raises
        ------
        ValueError
            ``caches`` not a list of one cache per block, ``x_t`` of another shape, or ids outside the
            vocabulary (named).
        TypeError
            Float token ids, or integer inputs to a model without ``embedding``.

        Notes
        -----
        The step runs the compiled plan of the model over these caches (:meth:`compile_step`: on the CPU one
        compiled pass per block and each layer's fused step) whenever it applies, and through the modules otherwise
        (:meth:`module_step`; ``model.compile_step(caches).reason`` says why). The plan is made at the first
        step over a list of caches, kept with them (``caches[0].plan``) and made again when the model
        changes (its mode, a module, a hook, a parameter object; values written in place, such as an
        optimizer step, are read directly) or a cache's state is replaced; both paths give the same
        numbers to the model dtype's rounding.

        Decoding is inference: ``step`` runs without autograd in every mode, as the layers' own steps
        do, and as Mamba's ``step`` and Hugging Face's ``generate`` are used (a graph through the
        encoder and decoder alone would give gradients that skip every layer's state; train with
        :meth:`forward`, chunks carrying ``state``). In training mode with active dropout it warns
        (once per call site, as :meth:`generate` does): dropout then makes identical steps differ;
        call ``model.eval()``.
        """
        plan = self._plan(caches, "step")
        with torch.no_grad():
            return plan.step(x_t) if plan is not None else self.module_step(x_t, caches)

    def module_step(self, x_t, caches):
        """:meth:`step` through the modules (each block's :meth:`SequenceBlock.step`), never compiled: the
        reference the compiled plan is tested against, and the path for what the plan does not cover.

        Parameters
        ----------
        x_t : Tensor ``(B, d_input)`` or ``(B, 1, d_input)``, or token ids ``(B,)`` or ``(B, 1)``
        caches : list
            One cache per block; updated in place.

        Returns
        -------
        Tensor ``(B, d_output)`` or ``(B, 1, d_output)``
            As :meth:`step`.

        Raises
        ------
        ValueError, TypeError
            As :meth:`step`.

        Warns
        -----
        UserWarning
            Active dropout (training mode), as :meth:`step`.
        """
        warn_dropout(self, "step")
        with torch.no_grad():
            x, tick, seq_axis = self.step_input(x_t, caches)
            h = self.encoder(x)                                      # (B, H)
            for blk, c in zip(self.blocks, caches):
                h = blk.step(h, c, tick)
            y = self._head(h)                                        # (B, d_output)
        return y[:, None] if seq_axis else y

    def _plan(self, caches, what):
        """The :class:`StepPlan` kept with ``caches`` (made now if there is none for this model and list),
        or None when the caches cannot keep one (objects without a ``plan`` field)."""
        self._check_caches(caches, what)
        head = caches[0]
        plan = getattr(head, "plan", None)
        if plan is not None and plan.model is self and len(plan.caches) == len(caches) \
                and all(map(is_, plan.caches, caches)):
            return plan
        if not hasattr(type(head), "plan"):
            return None
        plan = StepPlan(self, caches)
        head.plan = plan
        return plan

    def compile_step(self, caches):
        """The compiled plan of :meth:`step` over ``caches``, the one :meth:`step` runs (made now if it does
        not exist yet): ``plan.step(x_t)`` equals ``model.step(x_t, caches)``; ``plan.reason`` says why
        it steps through the modules (None while compiled); ``plan.fused_tokens`` counts compiled tokens.

        On the CPU, with blocks that publish a fused form (:meth:`SequenceBlock.fused_form`: LayerNorm
        or none, GELU), the plan runs one compiled pass per block for the norm, GELU, GLU linear and
        residual (:mod:`nn.model_step`), and each layer's compiled step (a DS4D layer without a
        tap on a ``"fused"`` cache) or its own ``step`` (any other layer: S4D, a tap, a given or learned
        clock); otherwise, and per token under autograd, it steps through the modules.

        Parameters
        ----------
        caches : list
            From :meth:`allocate_inference_cache`, one per block.

        Returns
        -------
        StepPlan

        Raises
        ------
        ValueError
            ``caches`` not a list of one cache per block.

        Examples
        --------
        >>> import torch
        >>> lm = SequenceModel(d_input=50, d_output=50, d_model=16, n_layers=2, embedding=True,
        ...                    layer_kw={"l_max": 12}).eval()
        >>> plan = lm.compile_step(lm.allocate_inference_cache(1))
        >>> with torch.no_grad():
        ...     logits = plan.step(torch.tensor([3]))          # (B, d_output), the caches advanced
        >>> logits.shape
        torch.Size([1, 50])
        """
        plan = self._plan(caches, "compile_step")
        return plan if plan is not None else StepPlan(self, caches)

    def prefill(self, x, caches, lengths=None):
        """Consume a prompt in parallel: fills ``caches`` and returns the outputs at every position (no
        pooling).

        Parameters
        ----------
        x : Tensor ``(B, L, d_input)`` or token ids ``(B, L)``
        caches : list
            From :meth:`allocate_inference_cache`, one per block; moved on by ``L`` tokens in place.
        lengths : Tensor or sequence ``(B,)`` of ints, optional
            A right-padded batch (fresh caches only): see Notes.

        Returns
        -------
        Tensor ``(B, L, d_output)``
            With ``lengths``, right-aligned as ``x`` (``y[b, lengths[b] - 1]`` is the last token's).

        Raises
        ------
        ValueError
            ``caches`` not a list of one cache per block, ``x`` of another shape, or ids outside the
            vocabulary at valid positions (named); ``lengths`` with caches that hold tokens.

        Notes
        -----
        With ``lengths`` the prompts are left-aligned and every layer's input at the padding is zeroed, so
        each sequence's states after prefill are those after its own ``lengths[b]`` tokens, and decoding
        continues every sequence from its own end; the outputs come back right-aligned. The padding of a
        padded prompt is never read (ids there are not looked up; whatever it holds, NaN included, never
        reaches a valid output or a state).
        """
        self._check_caches(caches, "prefill")
        x, _, n = checked_input(self, x, "prefill", lengths=lengths)   # padding replaced
        h = self._embed(x, n)                                        # (B, L, H)
        if self.clock is not None:                                   # padding = pauses: no re-alignment
            if n is not None and any(c.t != 0 for c in caches):
                raise ValueError("prefill(lengths=...) needs fresh caches (t = 0)")
            ticks = self._ticks(x, n, hard=True, previous=self._previous(caches))
            for blk, c in zip(self.blocks, caches):
                h = blk.prefill(h, c, ticks=ticks)
            self._keep_ticks(caches, ticks, n)
            y = self._head(h)
            return y if n is None else zero_padding(y, n)
        if n is None:
            for blk, c in zip(self.blocks, caches):
                h = blk.prefill(h, c)
            return self._head(h)
        if any(c.t != 0 for c in caches):
            raise ValueError("prefill(lengths=...) needs fresh caches (t = 0): in caches that already hold "
                             "tokens the padding would sit between them and the prompt")
        h = left_align(h, n)                                         # (B, L, H), each prompt ends at L - 1
        mask = left_align(valid_mask(n, h.shape[1]), n)              # (B, L) its tokens, left-aligned
        for blk, c in zip(self.blocks, caches):
            h = blk.prefill(h, c, mask=mask)
        return right_align(self._head(h), n)

    def generate(self, prompt, max_new_tokens, temperature=1.0, top_k=None, sampler=None, generator=None, *,
                 return_logits=False, cache_kwargs=None, lengths=None):
        """Continue token prompts: prefill, then one :meth:`step` per new token (a token model:
        ``embedding=True, pool=None``; :func:`nn.generate.generate`).

        Parameters
        ----------
        prompt : Tensor ``(B, L)`` int
            Token ids, ``L >= 1``, on the model's device.
        max_new_tokens : int
            Tokens to add (``0``: the prompt is returned).
        temperature : float, default 1.0
            ``0``: greedy; else sampling from ``softmax(logits / temperature)``.
        top_k : int, optional
            Sample only among the ``top_k`` most likely tokens.
        sampler : callable, optional
            ``sampler(logits)``, ``logits`` ``(B, d_output)`` -> ids ``(B,)``; replaces ``temperature`` /
            ``top_k``.
        generator : torch.Generator, optional
            Random stream of the sampling (the global RNG is left untouched).
        return_logits : bool, default False
            Also return the logits every new token was drawn from.
        cache_kwargs : dict, optional
            Passed to :meth:`allocate_inference_cache` (e.g. ``history_dtype``).
        lengths : Tensor or sequence ``(B,)`` of ints, optional
            Right-padded prompts: each continues from its own last token (zeros after its new tokens).

        Returns
        -------
        ids : Tensor ``(B, L + max_new_tokens)`` int64
            The prompt followed by the new tokens.
        logits : Tensor ``(B, max_new_tokens, d_output)``
            Only with ``return_logits=True``.

        Raises
        ------
        ValueError, TypeError
            A model that is not a token model, a prompt of another shape or dtype, ids outside the
            vocabulary, bad sampling arguments (each named), before any work.
        FloatingPointError
            Non-finite logits (the new token's index is named).
        """
        return generate(self, prompt, max_new_tokens, temperature, top_k, sampler, generator,
                        return_logits=return_logits, cache_kwargs=cache_kwargs, lengths=lengths)
