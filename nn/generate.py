"""Token generation with a :class:`nn.SequenceModel` (model-level, above the layers' decode engines).

:func:`generate` is the prefill / step / sample loop of a token model; :func:`sample` draws the next
tokens from logits (greedy, temperature, top-k). :meth:`nn.SequenceModel.generate` calls it; the
per-layer caches are :mod:`nn.decode.cache`'s.
"""
from __future__ import annotations

import math
import numbers
import warnings

import torch

from .decode.cache import check_count
from .inputs import check_token_ids
from .lengths import check_lengths, valid_mask

__all__ = ["generate", "sample"]


# ------------------------------------------------------------------ sampling
def sample(logits, temperature=1.0, top_k=None, generator=None):
    """Next tokens ``(B,)`` int64 from ``logits`` ``(B, V)``.

    Parameters
    ----------
    logits : Tensor ``(B, V)``
    temperature : float, default 1.0
        ``0``: greedy (argmax; the first of ties); else ``softmax(logits / temperature)``, computed in
        float32 (float64 logits: float64).
    top_k : int, optional
        Draw only among the ``top_k`` largest logits.
    generator : torch.Generator, optional
        The random stream (the global one when ``None``); a generator leaves the global RNG untouched.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    z = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32) / temperature   # (B, V)
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]        # (B, 1)
        z = z.masked_fill(z < kth, -math.inf)
    return torch.multinomial(torch.softmax(z, dim=-1), 1, generator=generator)[:, 0]


def _check_generate_args(model, prompt, max_new_tokens, temperature, top_k, sampler, generator):
    enc = getattr(model, "encoder", None)
    if not isinstance(enc, torch.nn.Embedding) or getattr(model, "pool", None) is not None:
        raise ValueError("generate needs a token model: SequenceModel(..., embedding=True, pool=None)")
    V = model.decoder.out_features
    if V > enc.num_embeddings:
        raise ValueError(f"generate feeds the sampled ids back in: d_output ({V}) must not exceed the vocabulary "
                         f"d_input ({enc.num_embeddings})")
    if not torch.is_tensor(prompt) or prompt.is_floating_point() or prompt.is_complex() or prompt.dtype == torch.bool:
        raise TypeError(f"generate: prompt must be an integer tensor of token ids (B, L), got "
                        f"{getattr(prompt, 'dtype', type(prompt).__name__)}")
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(f"generate: prompt must have shape (B, L) with L >= 1, got {tuple(prompt.shape)}")
    check_count("max_new_tokens", max_new_tokens, 0, "generate")
    if not isinstance(temperature, numbers.Real) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"generate: temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    check_count("top_k", top_k, 1, "generate", optional=True)
    if sampler is not None:
        if not callable(sampler):
            raise TypeError(f"generate: sampler must be callable (logits (B, V) -> ids (B,)), got {sampler!r}")
        if temperature != 1.0 or top_k is not None:
            raise ValueError("generate: a sampler replaces temperature and top_k; give one or the other")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generate: generator must be a torch.Generator, got {type(generator).__name__}")
    return V


def _sampled(ids, B, V, i):
    if not torch.is_tensor(ids) or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError("generate: the sampler must return integer ids, got "
                        f"{getattr(ids, 'dtype', type(ids).__name__)}")
    if ids.shape not in ((B,), (B, 1)):
        raise ValueError(f"generate: the sampler must return ids of shape ({B},) or ({B}, 1), got {tuple(ids.shape)}")
    ids = ids.reshape(B).long()
    if B and not bool(((ids >= 0) & (ids < V)).all()):
        raise ValueError(f"generate: the sampler returned ids outside [0, {V}) at new token {i}")
    return ids


@torch.no_grad()
def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, sampler=None, generator=None, *,
             return_logits=False, cache_kwargs=None, lengths=None):
    """Continue the token prompts ``prompt`` ``(B, L)`` by ``max_new_tokens`` tokens each.

    The prompt is consumed in parallel (``prefill``), then each new token costs one ``step`` (the
    layers' recurrences, not a forward over the whole sequence); the logits a token is drawn from are
    those of ``model(ids)`` at its position, to the decode path's rounding.

    Parameters
    ----------
    model : SequenceModel
        A token model (``embedding=True, pool=None``), usually in ``eval()`` mode: in training mode its
        dropout is active (a warning says so); the mode is left as it is.
    prompt : Tensor ``(B, L)`` int
        Token ids, ``L >= 1``, on the model's device.
    max_new_tokens : int
        Tokens to add (``0``: the prompt is returned).
    temperature : float, default 1.0
        ``0``: greedy; else sampling from ``softmax(logits / temperature)`` (see :func:`sample`).
    top_k : int, optional
        Sample only among the ``top_k`` most likely tokens.
    sampler : callable, optional
        ``sampler(logits)`` with ``logits`` ``(B, d_output)`` returning ids ``(B,)``; replaces
        ``temperature`` / ``top_k``.
    generator : torch.Generator, optional
        Random stream of the sampling (on the model's device): reproducible, and the global RNG is left
        untouched.
    return_logits : bool, default False
        Also return the logits every new token was drawn from.
    cache_kwargs : dict, optional
        Passed to ``model.allocate_inference_cache`` (e.g. ``history_dtype``); the default state
        precision follows the model (complex128 for a float64 model, else complex64).
    lengths : Tensor or sequence ``(B,)`` of ints, optional
        Right-padded prompts of these lengths: each continues from its own last token (the new tokens
        follow it in the returned ids, zeros after), exactly as if it were generated alone.

    Returns
    -------
    ids : Tensor ``(B, L + max_new_tokens)`` int64
    logits : Tensor ``(B, max_new_tokens, d_output)``, with ``return_logits=True``

    Raises
    ------
    ValueError, TypeError
        A model that is not a token model, a prompt of another shape or dtype, prompt ids outside the
        vocabulary (at valid positions: padding ids are never read), or bad sampling arguments (each
        named), before any work.
    FloatingPointError
        Non-finite logits (the new token's index is named).
    """
    V = _check_generate_args(model, prompt, max_new_tokens, temperature, top_k, sampler, generator)
    if model.training and any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        warnings.warn("generate with the model in training mode: dropout is active (call model.eval())",
                      UserWarning, stacklevel=3)
    B, L = prompt.shape
    n = None if lengths is None else check_lengths(lengths, B, L, device=prompt.device)
    check_token_ids(prompt, model.encoder.num_embeddings, "generate", None if n is None else valid_mask(n, L))
    ids = prompt.long()
    if max_new_tokens == 0:
        return (ids, model.decoder.weight.new_empty(B, 0, V)) if return_logits else ids
    ckw = dict(cache_kwargs or {})
    if "dtype" not in ckw and model.decoder.weight.dtype == torch.float64:
        ckw["dtype"] = torch.float64
    caches = model.allocate_inference_cache(B, max_seqlen=L + max_new_tokens, **ckw)
    plan = model.compile_step(caches)                               # the model step (nn.model_step)
    if lengths is None:
        logits = model.prefill(ids, caches)[:, -1]                 # (B, V)
    else:
        logits = model.prefill(ids, caches, lengths=n)[torch.arange(B, device=ids.device), n - 1]   # (B, V)
    new, seen = [], []
    for i in range(max_new_tokens):
        if B and not bool(torch.isfinite(logits).all()):
            raise FloatingPointError(f"generate: the logits of new token {i} are not finite")
        seen.append(logits)
        tok = sample(logits, temperature, top_k, generator) if sampler is None else _sampled(sampler(logits), B, V, i)
        new.append(tok)                                              # (B,)
        if i + 1 < max_new_tokens:
            logits = plan.step(tok)                                  # (B, V), compiled where it applies
    if lengths is None:
        out = torch.cat([ids, torch.stack(new, dim=1)], dim=1)       # (B, L + max_new_tokens)
    else:                                                            # each prompt's tokens, then its new ones
        out = torch.zeros(B, L + max_new_tokens, dtype=ids.dtype, device=ids.device)
        out[:, :L] = ids * valid_mask(n, L).to(ids.dtype)
        pos = n[:, None] + torch.arange(max_new_tokens, device=ids.device)[None, :]     # (B, new)
        out.scatter_(1, pos, torch.stack(new, dim=1))
    return (out, torch.stack(seen, dim=1)) if return_logits else out
