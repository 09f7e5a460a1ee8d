"""Blocks and sequence models around DS4D / S4D layers."""
from __future__ import annotations

from torch import nn

from .ds4d import DS4D
from .s4d import S4D

LAYERS = {"ds4d": DS4D, "s4d": S4D}


class SequenceBlock(nn.Module):
    """Pre-norm residual block: ``x + Dropout(GLU(Linear(Dropout(act(layer(norm(x)))))))``.

    Args:
        d_model: channels ``H``. layer: ``"ds4d"`` or ``"s4d"``. layer_kw: passed to the layer.
        activation: ``"gelu"`` (default) or any ``torch.nn`` activation name. dropout: rate.
        glu: output linear ``H -> 2H`` followed by GLU (the paper's setting); else ``H -> H``.
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
        z = self.norm(x) if self.prenorm else x
        y = x + self._post(self.layer(z, mode=mode))
        return y if self.prenorm else self.norm(y)

    def allocate_inference_cache(self, batch_size, dtype=None):
        return self.layer.allocate_inference_cache(batch_size, dtype)

    def step(self, x_t, cache):
        z = self.norm(x_t) if self.prenorm else x_t
        y = x_t + self._post(self.layer.step(z, cache))
        return y if self.prenorm else self.norm(y)

    def prefill(self, x, cache):
        z = self.norm(x) if self.prenorm else x
        y = x + self._post(self.layer.prefill(z, cache))
        return y if self.prenorm else self.norm(y)


class SequenceModel(nn.Module):
    """Encoder -> ``n_layers`` blocks -> final norm -> pooling -> decoder.

    Args:
        d_input: input features (or vocabulary size with ``embedding=True``). d_output: outputs per
            position (``pool=None``) or per sequence; a token LM uses ``embedding=True, pool=None``.
        pool: ``"mean"``, ``"last"`` or ``None``. Other args go to :class:`SequenceBlock`.
    Shapes: ``(B, L, d_input)`` (or ``(B, L)`` token ids) -> ``(B, L, d_output)`` / ``(B, d_output)``.
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
        return [blk.allocate_inference_cache(batch_size, dtype) for blk in self.blocks]

    def _check_caches(self, caches, what):
        if not isinstance(caches, (list, tuple)) or len(caches) != len(self.blocks):
            got = f"{len(caches)} caches" if isinstance(caches, (list, tuple)) else type(caches).__name__
            raise ValueError(f"SequenceModel.{what} needs one cache per layer ({len(self.blocks)}, from "
                             f"allocate_inference_cache), got {got}")

    def step(self, x_t, caches):
        """One position: ``(B, d_input)`` (or ``(B,)`` ids) -> ``(B, d_output)`` (no pooling)."""
        self._check_caches(caches, "step")
        h = self.encoder(x_t)                                        # (B, H)
        for blk, c in zip(self.blocks, caches):
            h = blk.step(h, c)
        return self.decoder(self.norm(h))

    def prefill(self, x, caches):
        """Consume a prompt ``(B, L, d_input)`` (or ``(B, L)`` ids): fills ``caches``, returns the outputs
        at every position ``(B, L, d_output)``."""
        self._check_caches(caches, "prefill")
        h = self.encoder(x)                                          # (B, L, H)
        for blk, c in zip(self.blocks, caches):
            h = blk.prefill(h, c)
        return self.decoder(self.norm(h))
