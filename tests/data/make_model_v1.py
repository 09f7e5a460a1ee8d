"""Generated tests/data/model_v1.pt with the code of commit 7fb829e, the last version whose layers kept their
decode memo as ``nn.common.StepConstants`` and whose package was the top-level ``nn``: whole-model pickles
(``torch.save(model)``) of a small token model after decoding (its memo filled), with the inputs and the
outputs that version gave; and a float-input model whose layer has the input tap (then parameters of the
layer itself: ``tap_e``, ``nu_tap``, ``tap_width_bits``). Kept for the record; it runs against an old checkout only::

    git worktree add --detach /tmp/oldtree 7fb829e
    python tests/data/make_model_v1.py /tmp/oldtree tests/data/model_v1.pt
    git worktree remove /tmp/oldtree
"""
import importlib
import sys

import torch

old_tree, out_path = sys.argv[1], sys.argv[2]
sys.path.insert(0, old_tree)                     # the old ddesys and the old top-level nn
nn = importlib.import_module("nn")               # the old top-level package (by name: no such package today)
assert hasattr(importlib.import_module("nn.common"), "StepConstants")   # the name the pickle must hold

torch.manual_seed(0)
model = nn.SequenceModel(d_input=11, d_output=11, d_model=8, n_layers=1, embedding=True,
                         layer_kw={"d_state": 4, "l_max": 16, "seed": 2}).eval()
g = torch.Generator().manual_seed(5)
with torch.no_grad():                            # a "trained" model: every weight moved off its initial value
    for p in model.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))
ids = torch.randint(0, 11, (2, 12), generator=g)
with torch.no_grad():
    logits = model(ids)                                          # (2, 12, 11)
    caches = model.allocate_inference_cache(2)
    prompt_logits = model.prefill(ids[:, :8], caches)            # (2, 8, 11)
    step_logits = torch.stack([model.step(ids[:, t], caches) for t in range(8, 12)], 1)   # (2, 4, 11)
layer = model.blocks[0].layer
assert type(layer._step_memo).__name__ == "StepConstants" and layer._step_memo._value is not None

# a float-input model whose layer has the tap (then a mixin of DS4D: tap_e, nu_tap, tap_width_bits)
tap_model = nn.SequenceModel(d_input=3, d_output=2, d_model=8, n_layers=1,
                             layer_kw={"d_state": 4, "l_max": 16, "seed": 4, "tap": True, "tap_width": 2.0}).eval()
with torch.no_grad():
    for p in tap_model.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))
x = torch.randn(2, 12, 3, generator=g)
with torch.no_grad():
    tap_y = tap_model(x)
    tap_caches = tap_model.allocate_inference_cache(2)
    tap_prompt = tap_model.prefill(x[:, :8], tap_caches)
    tap_steps = torch.stack([tap_model.step(x[:, t], tap_caches) for t in range(8, 12)], 1)
assert tap_model.blocks[0].layer.has_tap
torch.save({"model": model, "ids": ids, "logits": logits, "prompt_logits": prompt_logits,
            "step_logits": step_logits, "tap_model": tap_model, "x": x, "tap_y": tap_y, "tap_prompt": tap_prompt,
            "tap_steps": tap_steps}, out_path)
print("wrote", out_path, type(layer._step_memo).__module__)
