"""Token models for the synthetic tasks: DS4D and the paper's baselines (S4D, LSTM, Mamba, GPT-2 and
Llama recipes), all ``tokens (B, L) -> logits (B, L, V)``, with widths matched to a parameter budget.

Every builder takes a :class:`experiments._models.ModelSpec` (from a label: ``ModelSpec.from_label``).
DS4D / S4D: :class:`nn.SequenceModel` (pre-norm blocks, GLU output, S4D-Lin poles; intermediate size
= hidden size). ``ds4d-tap``: DS4D with the delayed input tap (``tap=True``; the tap's delay on the
optimizer's base learning rate, ``tap_lr=None``; its window schedule lives in :mod:`.train`).
``ds4d-clock`` / ``s4d-clock``: the same models with the selective clock (:class:`nn.clock.TokenClock`,
pauses at the padding token 0): every layer runs in its own time, its delays counted in ticks (DS4D's
delay range from the first batch's longest tick count). LSTM: ``torch.nn.LSTM`` with the chrono
initialization over the context length (:class:`TokenLSTM`; PyTorch's default left it at chance). GPT-2 (feed-forward
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


LSTM_INITS = ("chrono", "unit-forget", "torch")
LSTM_INIT = "chrono"            # the LSTM baseline's initialization (TokenLSTM), the command line's default


class TokenLSTM(nn.Module):
    """Embedding -> ``n_layers`` LSTM (hidden = intermediate = ``H``) -> LayerNorm -> vocabulary head.

    Parameters
    ----------
    vocab, d_model, n_layers : int
        Vocabulary ``V``, hidden size ``H``, LSTM layers.
    horizon : int, default 1024
        The longest dependency the model is built for (the context length): ``T_max`` of the chrono
        initialization.
    init : {"chrono", "unit-forget", "torch"}, default "chrono"
        Initialization of the LSTM weights (PyTorch's gate order ``i, f, g, o``; ``b = b_ih + b_hh``).
        ``"unit-forget"``: Keras's ``LSTM`` recipe (Glorot-uniform input weights per gate, orthogonal
        recurrent weights per gate, zero biases but the forget gate's, 1; Jozefowicz et al. 2015).
        ``"chrono"`` (the default): the same weights, with the chrono biases of Tallec & Ollivier (2018,
        "Can recurrent neural networks warp time?"): forget bias ``log(u)``, ``u`` uniform in
        ``[1, horizon - 1]`` per unit, input bias its negative, so the units' memory times spread
        over ``1 .. horizon`` steps. ``"torch"``: PyTorch's default, every weight and bias uniform in
        ``+-1/sqrt(H)``: the forget gate starts at 0.5, a memory halved at every step (0.5^32 = 2e-10
        over the control task's look-back of 32 steps), which left the LSTM at chance on every synthetic
        task (docs/experiments/baselines-cpu/notes.md).

    Notes
    -----
    Shapes: ``tokens`` int ``(B, L)`` -> logits ``(B, L, V)``.
    """

    def __init__(self, vocab, d_model, n_layers, horizon=1024, init=LSTM_INIT):
        super().__init__()
        if init not in LSTM_INITS:
            raise ValueError(f"init must be one of {LSTM_INITS}, got {init!r}")
        self.embed = nn.Embedding(vocab, d_model)
        self.lstm = nn.LSTM(d_model, d_model, n_layers, batch_first=True)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.init = init
        if init != "torch":
            self._init_lstm(max(int(horizon), 3), chrono=init == "chrono")

    @torch.no_grad()
    def _init_lstm(self, horizon, chrono):
        H = self.lstm.hidden_size
        for k in range(self.lstm.num_layers):
            w_ih, w_hh = getattr(self.lstm, f"weight_ih_l{k}"), getattr(self.lstm, f"weight_hh_l{k}")   # (4H, *)
            b_ih, b_hh = getattr(self.lstm, f"bias_ih_l{k}"), getattr(self.lstm, f"bias_hh_l{k}")       # (4H,)
            for gate in range(4):
                nn.init.xavier_uniform_(w_ih[gate * H:(gate + 1) * H])
                nn.init.orthogonal_(w_hh[gate * H:(gate + 1) * H])
            b_ih.zero_()
            b_hh.zero_()
            if chrono:
                b_f = torch.log(torch.empty(H).uniform_(1.0, horizon - 1.0))
                b_ih[H:2 * H], b_ih[:H] = b_f, -b_f
            else:
                b_ih[H:2 * H] = 1.0

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


def build(spec, vocab, d_model, n_layers, length, d_state=64, dt_lr=1e-4, seed=None, ticks=None,
          lstm_init=LSTM_INIT, clock=None, pad=(PAD,)):
    """A fresh token model of ``spec`` (:class:`experiments._models.ModelSpec`). ``length``: context
    length (DS4D's delay horizon, GPT-2's positions); ``d_state``: state size ``N`` of DS4D / S4D (Mamba
    keeps its default 16); ``dt_lr``: DS4D's and S4D's learning rate for ``dt`` and the delay (1e-4 in
    the paper's synthetic runs; not the input tap's delay, which trains at the base rate). ``ticks``:
    the horizon of DS4D with the given clock, the longest tick count of a sequence (its delays count
    ticks; default ``length``), and of DS4D with the binary learned clock (its delays count ticks too: the
    content length is a scale given to the model, as ``length`` is; no position is named); the soft
    learned clock keeps real time. ``lstm_init``: the LSTM's
    initialization (:class:`TokenLSTM`; its chrono horizon is ``length``). ``clock``: a clock part for a
    DS4D / S4D model (``nn.SequenceModel(clock=)``, e.g. a configured :class:`nn.learned_clock.BinaryClock`),
    in place of the ``spec``'s own clock where it has one. ``pad``: the padding ids a given clock pauses at (the task's
    :attr:`.tasks.Task.pad_ids`)."""
    if not spec.is_baseline:
        kw = {"d_state": d_state, "init": "lin", "dt_lr": dt_lr, "seed": seed}
        if spec.is_ds4d:
            kw["l_max"] = ticks if spec.counts_ticks and ticks is not None else length
        extra = {} if clock is None else {"clock": clock}
        return spec.sequence_model(vocab, vocab, kw, pad=tuple(pad), d_model=d_model, n_layers=n_layers, embedding=True,
                                   **extra)
    if spec.layer == "lstm":
        return TokenLSTM(vocab, d_model, n_layers, horizon=length, init=lstm_init)
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


__all__ = ["LSTM_INIT", "ModelSpec", "TokenLSTM", "build", "match_width", "n_params"]
