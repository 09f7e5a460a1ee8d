"""Parts handed to a model, written here and nowhere in the package: a clock with a recurrent state of its
own and a branch given per block by a layer factory, each through training, prefill, step and the state
carry of ``forward(state=, return_state=)``, against float64 loops (``verification.reference``: the
layer's recurrence and its clocked recurrence, plus brute-force loops of the parts written here).

* :class:`ToggleClocked`: a flip-flop clock. Each token with ``x_t[0] > 0`` flips a per-row bit; the layer
  ticks while the bit is set. The bit is the clock's own state: it lives in the cache beside the layer's
  ring (:meth:`nn.clocked_layer.ClockedLayer.clock_state`), is reset, copied and carried with it.
* the echo branch of ``test_added_parts`` (``s_t = a s_{t-1} + x_t``, term ``g s_t``), one per block from
  ``SequenceModel(layer=factory)`` (no parameter shared between blocks).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from ddesys.nn import DS4D, SequenceModel
from ddesys.nn.clock import Clocked, ClockedCache
from ddesys.verification.reference.errors import rel_max
from ddesys.verification.reference.layer import clocked_recurrence, ds4d_params, recurrence
from test_added_parts import EchoBranch, _echo_loop

F64 = torch.float64
V, H, L = 7, 6, 30


# ---------------------------------------------------------------------------------------------- the clock
@dataclass(eq=False)
class ToggleCache(ClockedCache):
    parity: torch.Tensor | None = None          #: (B,) bool, the flip-flop: the clock's own state


class ToggleClocked(Clocked):
    """Ticks where the flip-flop driven by ``x_t[0] > 0`` is set (module docstring)."""

    cache_type = ToggleCache

    def clock_state(self, batch_size, device):
        return {"parity": torch.zeros(batch_size, dtype=torch.bool, device=device)}

    @staticmethod
    def toggle(x, parity):
        """``x`` ``(B, L, H)``, the bit before it ``(B,)`` -> the bit after each token ``(B, L)``."""
        return (torch.cumsum((x[..., 0] > 0).long(), 1) % 2 == 1) ^ parity[:, None]

    def run(self, x, ticks, mode):
        own = self.toggle(x, torch.zeros(x.shape[0], dtype=torch.bool, device=x.device))
        return super().run(x, own if ticks is None else own & ticks, mode)

    @torch.no_grad()
    def step(self, x_t, cache, tick=None):
        own = cache.parity ^ (x_t[:, 0] > 0)
        y = super().step(x_t, cache, own if tick is None else own & tick)
        cache.parity.copy_(own)
        return y

    @torch.no_grad()
    def prefill(self, x, cache, ticks=None):
        own = self.toggle(x, cache.parity)
        y = super().prefill(x, cache, own if ticks is None else own & ticks)
        if x.shape[1]:
            cache.parity.copy_(own[:, -1])
        return y


class Toggle:
    """The part: ``SequenceModel(clock=Toggle())``."""

    def wrap(self, layer, index):
        return ToggleClocked(layer)


def toggle_loop(x):
    """The flip-flop by a loop: ``x`` ``(B, L, H)`` float64 numpy -> ticks ``(B, L)``."""
    ticks, bit = np.zeros(x.shape[:2], bool), np.zeros(x.shape[0], bool)
    for t in range(x.shape[1]):
        bit = bit ^ (x[:, t, 0] > 0)
        ticks[:, t] = bit
    return ticks


# ---------------------------------------------------------------------------------------------- the branch
# EchoBranch (``s_t = a s_{t-1} + x_t``, term ``g s_t``), written once in the tests beside the layer-level
# checks of an added branch; here it is handed to every block through a layer factory.


def decay_loop(branch, x):
    """The branch by the brute-force loop: ``x`` ``(B, C, L)`` float64 numpy -> its term."""
    a, g = torch.sigmoid(branch.nu.detach().double()), branch.g.detach().double()
    return _echo_loop(a, g, torch.from_numpy(x)).numpy()


# ---------------------------------------------------------------------------------------------- models
def _model(**kw):
    torch.manual_seed(0)
    return SequenceModel(V, V, d_model=H, n_layers=2, embedding=True, **kw).double().eval()


def clocked_model():
    return _model(clock=Toggle(), layer_kw={"d_state": 8, "l_max": L, "seed": 3})


def branched_model():
    return _model(layer=lambda d, i: DS4D(d, d_state=8, l_max=L, seed=3 + i, branches=[EchoBranch(d, seed=i)]))


def model_loop(model, tokens, clocked):
    """The model's outputs ``(B, L, V)`` with every layer replaced by float64 loops (the blocks' norms,
    GELU, GLU and the head as torch modules, which are not what is tested)."""
    with torch.no_grad():
        h = model.encoder(tokens)                                                       # (B, L, H)
        for blk in model.blocks:
            z = blk.norm(h).double()
            zn = z.numpy().transpose(0, 2, 1)                                           # (B, H, L)
            if clocked:
                layer = blk.layer.inner
                y = clocked_recurrence(*ds4d_params(layer), zn, toggle_loop(z.numpy()))
            else:
                layer = blk.layer
                y = recurrence(*ds4d_params(layer), zn) + decay_loop(layer.added_branches[0], zn)
            y = torch.from_numpy(np.ascontiguousarray(y.transpose(0, 2, 1)))
            h = h + blk.glu(blk.out(blk.act(y)))
        return model.decoder(model.norm(h))


def _tokens(B=4, seed=1):
    return torch.randint(0, V, (B, L), generator=torch.Generator().manual_seed(seed))


KINDS = {"clock": (clocked_model, True), "branch": (branched_model, False)}


# ---------------------------------------------------------------------------------------------- the tests
def test_parts_are_built_per_block():
    m = clocked_model()
    assert all(type(b.layer) is ToggleClocked for b in m.blocks) and m.clock is None
    b = branched_model()
    first, second = (blk.layer.added_branches[0] for blk in b.blocks)
    assert first is not second and first.nu.data_ptr() != second.nu.data_ptr()
    assert not torch.equal(first.nu, second.nu)                                      # seeds per index
    with pytest.raises(ValueError, match="factory"):                                 # one list for every block
        SequenceModel(V, V, d_model=H, n_layers=2, embedding=True, layer_kw={"branches": [EchoBranch(H)]})


@pytest.mark.parametrize("kind", KINDS)
def test_a_part_trains_against_the_loop(kind):
    make, clocked = KINDS[kind]
    model, tok = make().train(), _tokens()
    assert rel_max(model(tok), model_loop(model, tok, clocked)) <= 1e-9
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(tok).pow(2).mean().backward()
    grads = [p.grad for blk in model.blocks for p in blk.layer.parameters()]
    assert all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0
    opt.step()
    assert rel_max(model(tok), model_loop(model, tok, clocked)) <= 1e-9            # trained, still the loop


@pytest.mark.parametrize("kind", KINDS)
def test_a_part_prefills_and_steps_against_the_loop(kind):
    make, clocked = KINDS[kind]
    model, tok = make(), _tokens()
    ref = model_loop(model, tok, clocked)
    caches = model.allocate_inference_cache(tok.shape[0], dtype=F64)
    ys = [model.prefill(tok[:, :11], caches)]
    ys += [model.step(tok[:, t], caches)[:, None] for t in range(11, 19)]
    twin = copy.deepcopy(caches)                                                     # the state, copied
    ys += [model.prefill(tok[:, 19:], caches)]                                       # a cache holding tokens
    assert rel_max(torch.cat(ys, 1), ref) <= 1e-9
    y_twin = torch.cat([model.step(tok[:, t], twin)[:, None] for t in range(19, L)], 1)
    assert rel_max(y_twin, ref[:, 19:]) <= 1e-9
    model.reset_cache(caches)                                                        # reset: the clock's too
    assert rel_max(model.prefill(tok, caches), ref) <= 1e-9


@pytest.mark.parametrize("kind", KINDS)
def test_a_part_carries_its_state_across_chunks(kind):
    make, clocked = KINDS[kind]
    model, tok = make(), _tokens()
    ref = model_loop(model, tok, clocked)
    with torch.no_grad():
        y1, st = model(tok[:, :9], return_state=True)
        y2, st2 = model(tok[:, 9:21], state=st, return_state=True)
        y3 = model(tok[:, 21:], state=st2)
        again = model(tok[:, 9:21], state=st)                                        # st read, never modified
    assert rel_max(torch.cat([y1, y2, y3], 1), ref) <= 1e-9
    assert rel_max(again, ref[:, 9:21]) <= 1e-9
    dec = [s.detach() for s in st2]                                                  # decode on from the carry
    y = torch.cat([model.step(tok[:, t], dec)[:, None] for t in range(21, L)], 1)
    assert rel_max(y, ref[:, 21:]) <= 1e-9


def test_a_clock_carry_under_autograd_is_refused_by_name():
    model, tok = clocked_model().train(), _tokens()
    with pytest.raises(RuntimeError, match="without gradients"):
        model(tok[:, :9], return_state=True)
