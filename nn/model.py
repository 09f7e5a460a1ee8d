"""Blocks and sequence models around DS4D / S4D layers."""
from __future__ import annotations

from torch import nn

from .ds4d import DS4D
from .s4d import S4D

LAYERS = {"ds4d": DS4D, "s4d": S4D}


class SequenceBlock(nn.Module):
    """Pre-norm residual block: ``x + Dropout(GLU(Linear(Dropout(act(layer(norm(x)))))))``.

    Parameters
    ----------
    d_model : int
        Channels ``H``.
    layer : {"ds4d", "s4d"}
        The SSM layer (:class:`nn.DS4D` or :class:`nn.S4D`).
    layer_kw : dict, optional
        Keyword arguments of the layer.
    activation : str, default "gelu"
        ``"gelu"`` or the name of any ``torch.nn`` activation class.
    dropout : float, default 0.0
        Dropout rate.
    glu : bool, default True
        Output linear ``H -> 2H`` followed by GLU (the paper's setting); else ``H -> H``.
    prenorm : bool, default True
        Normalize the layer's input; ``False``: normalize the block's output (post-norm).

    Raises
    ------
    ValueError
        An unknown ``layer``.

    Notes
    -----
    Shapes: ``(B, L, H) -> (B, L, H)``; ``step`` ``(B, H) -> (B, H)``.
    """

    def __init__(self, d_model, layer="ds4d", layer_kw=None, activation="gelu", dropout=0.0, glu=True,
                 prenorm=True):
        super().__init__()
        if layer not in LAYERS:
            raise ValueError(f"layer must be one of {sorted(LAYERS)}, got {layer!r}")
        self.norm = nn.LayerNorm(d_model)
        self.layer = LAYERS[layer](d_model, **(layer_kw or {}))
        self.act = nn.GELU() if activation == "gelu" else getattr(nn, activation)()
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, 2 * d_model if glu else d_model)
        self.glu = nn.GLU(dim=-1) if glu else nn.Identity()
        self.prenorm = prenorm

    def _post(self, z):
        return self.drop(self.glu(self.out(self.drop(self.act(z)))))

    def forward(self, x, mode="fft"):
        """``x`` ``(B, L, H)`` -> ``(B, L, H)``.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        mode : {"fft", "recurrent"}
            The layer's path: FFT convolution (training) or the exact recurrence (verification).

        Returns
        -------
        Tensor ``(B, L, H)``
        """
        z = self.norm(x) if self.prenorm else x
        y = x + self._post(self.layer(z, mode=mode))
        return y if self.prenorm else self.norm(y)

    def allocate_inference_cache(self, batch_size, dtype=None):
        """The layer's fresh decode cache for ``batch_size`` sequences (see the layer's method)."""
        return self.layer.allocate_inference_cache(batch_size, dtype)

    def step(self, x_t, cache):
        """One position ``x_t`` ``(B, H)`` -> ``(B, H)``; updates ``cache`` in place."""
        z = self.norm(x_t) if self.prenorm else x_t
        y = x_t + self._post(self.layer.step(z, cache))
        return y if self.prenorm else self.norm(y)

    def prefill(self, x, cache):
        """Consume a prompt ``x`` ``(B, L, H)``: fills ``cache``, returns the outputs ``(B, L, H)``."""
        z = self.norm(x) if self.prenorm else x
        y = x + self._post(self.layer.prefill(z, cache))
        return y if self.prenorm else self.norm(y)


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
    layer, layer_kw, dropout, glu, activation :
        Passed to every :class:`SequenceBlock`.
    pool : {None, "mean", "last"}
        Pooling over the sequence before the decoder.
    embedding : bool, default False
        ``nn.Embedding`` encoder for token ids instead of ``nn.Linear``.

    Raises
    ------
    ValueError
        An unknown ``pool`` or ``layer``.

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
    >>> from nn import SequenceModel
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
    """

    def __init__(self, d_input, d_output, d_model=128, n_layers=4, layer="ds4d", layer_kw=None,
                 dropout=0.0, pool=None, embedding=False, glu=True, activation="gelu"):
        super().__init__()
        if pool not in (None, "mean", "last"):
            raise ValueError(f"pool must be None, 'mean' or 'last', got {pool!r}")
        self.encoder = nn.Embedding(d_input, d_model) if embedding else nn.Linear(d_input, d_model)
        self.blocks = nn.ModuleList(SequenceBlock(d_model, layer, layer_kw, activation, dropout, glu)
                                    for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.decoder = nn.Linear(d_model, d_output)
        self.pool = pool

    def forward(self, x, mode="fft"):
        """``(B, L, d_input)`` (or ``(B, L)`` ids) -> ``(B, L, d_output)``, or ``(B, d_output)`` pooled.

        Parameters
        ----------
        x : Tensor ``(B, L, d_input)`` or ``(B, L)`` token ids
        mode : {"fft", "recurrent"}
            The layers' path (see :meth:`SequenceBlock.forward`).

        Returns
        -------
        Tensor ``(B, L, d_output)`` or ``(B, d_output)``
        """
        h = self.encoder(x)                                          # (B, L, H)
        for blk in self.blocks:
            h = blk(h, mode=mode)
        h = self.norm(h)
        if self.pool == "mean":
            h = h.mean(dim=1)
        elif self.pool == "last":
            h = h[:, -1]
        return self.decoder(h)

    def allocate_inference_cache(self, batch_size, dtype=None):
        """Fresh decode caches for ``batch_size`` sequences: a list, one per block.

        Parameters
        ----------
        batch_size : int
        dtype : torch.dtype, optional
            ``torch.float64`` for complex128 states (default complex64).

        Returns
        -------
        list
            One layer cache per block, for :meth:`step` and :meth:`prefill`.
        """
        return [blk.allocate_inference_cache(batch_size, dtype) for blk in self.blocks]

    def _check_caches(self, caches, what):
        if not isinstance(caches, (list, tuple)) or len(caches) != len(self.blocks):
            got = f"{len(caches)} caches" if isinstance(caches, (list, tuple)) else type(caches).__name__
            raise ValueError(f"SequenceModel.{what} needs one cache per layer ({len(self.blocks)}, from "
                             f"allocate_inference_cache), got {got}")

    def step(self, x_t, caches):
        """One position: ``(B, d_input)`` (or ``(B,)`` ids) -> ``(B, d_output)`` (no pooling).

        ``caches`` (from :meth:`allocate_inference_cache`) are updated in place.

        Raises
        ------
        ValueError
            ``caches`` not a list of one cache per block.
        """
        self._check_caches(caches, "step")
        h = self.encoder(x_t)                                        # (B, H)
        for blk, c in zip(self.blocks, caches):
            h = blk.step(h, c)
        return self.decoder(self.norm(h))

    def prefill(self, x, caches):
        """Consume a prompt ``(B, L, d_input)`` (or ``(B, L)`` ids) in parallel.

        Fills ``caches`` (from :meth:`allocate_inference_cache`) and returns the outputs at every
        position ``(B, L, d_output)`` (no pooling).

        Raises
        ------
        ValueError
            ``caches`` not a list of one cache per block.
        """
        self._check_caches(caches, "prefill")
        h = self.encoder(x)                                          # (B, L, H)
        for blk, c in zip(self.blocks, caches):
            h = blk.prefill(h, c)
        return self.decoder(self.norm(h))
