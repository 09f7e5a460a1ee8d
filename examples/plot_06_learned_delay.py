"""
A delay learned by the layer
============================

With ``tap=True`` a DS4D layer also adds a pure delay of its input, ``e x(t - s)``, whose delay ``s``
is learned. Read through a wide window at first, a tap feels a lag some distance away and moves to it;
:class:`ddesys.nn.TapWidthSchedule` narrows the window to linear interpolation as training goes on.
Here one layer of 8 channels learns to output its input delayed by 21 steps.
"""
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from ddesys.nn import DS4D, TapWidthSchedule, param_groups

torch.manual_seed(0)
torch.set_num_threads(1)          # tiny tensors: one thread is fastest

H, L, LAG, STEPS = 8, 64, 21, 200


def smooth_noise(size):
    """``(size, L, H)`` low-pass noise, unit variance."""
    x = F.avg_pool1d(torch.randn(size, H, L + 3), 4, 1)           # (size, H, L)
    return (x / x.std()).transpose(1, 2)


layer = DS4D(H, d_state=16, l_max=L, tap=True, seed=0)
opt = torch.optim.Adam(param_groups(layer, lr=1e-2))
schedule = TapWidthSchedule(layer, w0=32.0, steps=STEPS)
print("tap delays at initialization:", np.round(layer.tap_delay().detach().numpy(), 1))

# %%
# Training on mean squared error against the delayed input:

delays, losses = [layer.tap_delay().detach().numpy().copy()], []
for step in range(STEPS):
    x = smooth_noise(8)
    target = F.pad(x, (0, 0, LAG, 0))[:, :L]                      # x delayed by LAG steps
    loss = F.mse_loss(layer(x), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    schedule.step()
    losses.append(loss.item())
    delays.append(layer.tap_delay().detach().numpy().copy())
delays = np.array(delays)                                         # (STEPS + 1, H)
print("tap delays after training:   ", np.round(delays[-1], 1))
print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")

# %%
# Each channel's tap delay during training: those that start within the window's reach of the lag
# travel to it.

fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
axes[0].plot(delays)
axes[0].axhline(LAG, color="k", ls="--", lw=1, label=f"lag = {LAG}")
axes[0].set_xlabel("optimizer step")
axes[0].set_ylabel("tap delay (steps)")
axes[0].legend()
axes[1].semilogy(losses)
axes[1].set_xlabel("optimizer step")
axes[1].set_ylabel("mean squared error")
plt.show()

# %%
# The layer's learned kernels (its impulse responses, tap included): the channels whose tap reached
# the lag respond with a spike at 21 steps.

with torch.no_grad():
    K = layer.kernel(L).numpy()                                   # (H, L)
near = np.abs(delays[-1] - LAG) < 0.5
fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
for h in range(H):
    ax.plot(K[h], color="C3" if near[h] else "0.7", lw=1.5 if near[h] else 1)
ax.axvline(LAG, color="k", ls="--", lw=1)
ax.set_xlabel("t (steps)")
ax.set_title("kernels (red: tap at the lag)")
plt.show()
