"""Token models for the synthetic tasks: DS4D and the paper's baselines (S4D, LSTM, Mamba, GPT-2 and
Llama recipes), all ``tokens (B, L) -> logits (B, L, V)``, with widths matched to a parameter budget.

Every builder takes a :class:`experiments._models.ModelSpec` (from a label: ``ModelSpec.from_label``).
DS4D / S4D: :class:`nn.SequenceModel` (pre-norm blocks, GLU output, S4D-Lin poles; intermediate size
= hidden size). ``ds4d-tap``: DS4D with the delayed input tap (``tap=True``; the tap's delay on the
optimizer's base learning rate, ``tap_lr=None``; its window schedule lives in :mod:`.train`).
``ds4d-clock`` / ``s4d-clock``: the same models with the selective clock (:class:`nn.clock.TokenClock`,
pauses at the padding token 0): every layer runs in its own time, its delays counted in ticks (DS4D's
delay range from the first batch's longest tick count). LSTM: ``torch.nn.LSTM``. GPT-2 (feed-forward
4H, learned absolute positions), Llama (RMSNorm, RoPE, SwiGLU feed-forward ~8H/3 rounded to 8) and
Mamba (intermediate 2H, convolution 3) come from Hugging Face ``transformers`` (``pip install -e
".[experiments]"``); without it those families raise a clear error and the others run. Mamba trains
with its selective scan compiled for the CPU (:mod:`.mamba`; ``transformers``' own reference loop is
far too slow for the CPU preset), the same computation, checked against ``transformers``' forward.
"""
from __future__ import annotations

import torch
from torch import nn

from .._models import ModelSpec
from .._sizes import closest_width, n_params
from .mamba import accelerate
N_HEADS = 4                     # attention heads of the Transformer recipes
PAD = 0                         # the tasks' padding token (.tasks), where a clocked model's time stands still


class TokenLSTM(nn.Module):
    """Embedding -> ``n_layers`` LSTM (hidden = intermediate = ``H``) -> LayerNorm -> vocabulary head."""

    def __init__(self, vocab, d_model, n_layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.lstm = nn.LSTM(d_model, d_model, n_layers, batch_first=True)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))                         # (B, L, H)
        return self.head(self.norm(h))                               # (B, L, V)


class HFCausalLM(nn.Module):
    """A ``transformers`` causal LM seen as ``tokens -> logits``; attention models get an all-ones mask
    (padding sits after the supervised segment, and causality already hides it)."""

    def __init__(self, model, attention=False):
        super().__init__()
        self.model, self.attention = model, attention

    def forward(self, tokens):
        mask = {"attention_mask": torch.ones_like(tokens)} if self.attention else {}
        return self.model(input_ids=tokens, use_cache=False, **mask).logits   # (B, L, V)


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise ImportError("the mamba / gpt2 / llama baselines need Hugging Face transformers: "
                          "pip install -e \".[experiments]\" (or drop them from --models)") from exc
    return transformers


def build(spec, vocab, d_model, n_layers, length, d_state=64, dt_lr=1e-4, seed=None, ticks=None):
    """A fresh token model of ``spec`` (:class:`experiments._models.ModelSpec`). ``length``: context
    length (DS4D's delay horizon, GPT-2's positions); ``d_state``: state size ``N`` of DS4D / S4D (Mamba
    keeps its default 16); ``dt_lr``: DS4D's and S4D's learning rate for ``dt`` and the delay (1e-4 in
    the paper's synthetic runs; not the input tap's delay, which trains at the base rate). ``ticks``:
    the horizon of DS4D with the given clock, the longest tick count of a sequence (its delays count
    ticks; default ``length``; the learned clock keeps real time)."""
    if not spec.is_baseline:
        kw = {"d_state": d_state, "init": "lin", "dt_lr": dt_lr, "seed": seed}
        if spec.is_ds4d:
            kw["l_max"] = ticks if spec.clock == "given" and ticks is not None else length
        return spec.sequence_model(vocab, vocab, kw, pad=(PAD,), d_model=d_model, n_layers=n_layers, embedding=True)
    if spec.layer == "lstm":
        return TokenLSTM(vocab, d_model, n_layers)
    tf = _transformers()
    ids = {"bos_token_id": vocab - 1, "eos_token_id": vocab - 1, "pad_token_id": 0}
    if spec.layer == "gpt2":
        cfg = tf.GPT2Config(vocab_size=vocab, n_positions=length, n_embd=d_model, n_layer=n_layers,
                            n_head=N_HEADS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **ids)
        return HFCausalLM(tf.GPT2LMHeadModel(cfg), attention=True)
    if spec.layer == "llama":
        ffn = max(8, int(round(8 * d_model / 3 / 8)) * 8)
        cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=d_model, intermediate_size=ffn,
                             num_hidden_layers=n_layers, num_attention_heads=N_HEADS, num_key_value_heads=N_HEADS,
                             max_position_embeddings=length, **ids)
        return HFCausalLM(tf.LlamaForCausalLM(cfg), attention=True)
    cfg = tf.MambaConfig(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers, expand=2,
                         conv_kernel=3, **ids)
    lm = tf.MambaForCausalLM(cfg)
    accelerate(lm)                         # the selective scan compiled for the CPU (.mamba)
    return HFCausalLM(lm)


def width_step(spec):
    """Widths a model accepts: Transformer recipes need ``H`` divisible by the heads with an even head
    size (RoPE); the rest any even ``H``."""
    return 2 * N_HEADS if spec.layer in ("gpt2", "llama") else 2


def match_width(spec, budget, vocab, n_layers, length, d_state=64, lo=8, hi=1024):
    """The width whose parameter count is closest to ``budget`` (binary search; counts grow with H)."""
    count = lambda h: n_params(build(spec, vocab, h, n_layers, length, d_state))   # noqa: E731
    return closest_width(count, budget, lo, hi, width_step(spec))


__all__ = ["ModelSpec", "build", "match_width", "n_params"]
