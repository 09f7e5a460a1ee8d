"""
Training a DS4D model, then generating
======================================

A small token model of two DS4D blocks (:class:`ddesys.nn.SequenceModel`) learns sequences that
repeat with period 16: each token equals the one 16 positions back. It trains with FFT convolutions,
then continues prompts one token at a time (:meth:`~ddesys.nn.SequenceModel.generate`: a parallel
prefill of the prompt, then one constant-time step per token).
"""
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from ddesys.nn import SequenceModel, param_groups

torch.manual_seed(0)
torch.set_num_threads(1)          # tiny tensors: one thread is fastest

V, P, L, STEPS = 8, 16, 64, 200   # vocabulary, period, sequence length, optimizer steps


def batch(size):
    """``size`` sequences of ``L + 1`` tokens: a random pattern of ``P`` tokens in 1..V-1, repeated."""
    pattern = torch.randint(1, V, (size, P))
    return pattern.repeat(1, L // P + 1)[:, :L + 1]


model = SequenceModel(d_input=V, d_output=V, d_model=16, n_layers=2, embedding=True,
                      layer_kw={"l_max": L, "d_state": 16})
print(model)
print("parameters:", sum(p.numel() for p in model.parameters()))

# %%
# Training: next-token cross-entropy on the positions that can be predicted (after the first period).
# :func:`~ddesys.nn.param_groups` gives the step sizes and delays their own group, without weight
# decay.

opt = torch.optim.AdamW(param_groups(model, lr=2e-2, weight_decay=0.0))
losses, accuracies = [], []
for step in range(STEPS):
    seq = batch(16)
    logits = model(seq[:, :-1])                               # (B, L, V)
    loss = F.cross_entropy(logits[:, P - 1:].reshape(-1, V), seq[:, P:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    accuracies.append((logits[:, P - 1:].argmax(-1) == seq[:, P:]).float().mean().item())
print(f"final loss {losses[-1]:.3f}, accuracy {accuracies[-1]:.3f}")

fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
ax.plot(losses, label="loss")
ax.plot(accuracies, label="accuracy")
ax.set_xlabel("optimizer step")
ax.set_title("training")
ax.legend()
plt.show()

# %%
# Generation: prompts of 20 tokens (one period and a few more), continued greedily to 64 tokens.

model.eval()
seq = batch(6)
prompt_len = P + 4
with torch.no_grad():
    ids = model.generate(seq[:, :prompt_len], max_new_tokens=L - prompt_len, temperature=0)   # (6, L)
correct = (ids[:, prompt_len:] == seq[:, prompt_len:L]).float().mean().item()
print(f"generated tokens equal to the pattern: {correct:.1%}")

fig, axes = plt.subplots(2, 1, figsize=(8, 3.6), sharex=True, layout="constrained")
axes[0].imshow(ids.numpy(), cmap="tab10", vmin=0, vmax=9, aspect="auto", interpolation="nearest")
axes[0].axvline(prompt_len - 0.5, color="k", lw=2)
axes[0].set_title("prompt (left of the line) and generated tokens")
axes[1].imshow((ids != seq[:, :L]).numpy(), cmap="Reds", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
axes[1].set_title("mistakes")
axes[1].set_xlabel("position")
for ax in axes:
    ax.set_yticks([])
plt.show()
