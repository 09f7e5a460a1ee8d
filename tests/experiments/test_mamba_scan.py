"""The Mamba baseline's compiled scan (experiments/synthetic/mamba.py) against a float64 loop written
here from Mamba's equations, finite differences, and transformers' own reference forward."""
import numpy as np
import pytest
import torch

from ddesys.experiments.synthetic import mamba


def _oracle(u, delta, A, Bm, Cm):
    """h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t, y_t = C_t . h_t, per (row, channel), float64."""
    u, delta, A, Bm, Cm = (np.asarray(t, dtype=np.float64) for t in (u, delta, A, Bm, Cm))
    nb, D, L = u.shape
    y = np.zeros((nb, D, L))
    for b in range(nb):
        for d in range(D):
            h = np.zeros(A.shape[1])
            for t in range(L):
                h = np.exp(delta[b, d, t] * A[d]) * h + delta[b, d, t] * Bm[b, :, t] * u[b, d, t]
                y[b, d, t] = Cm[b, :, t] @ h
    return y


def _inputs(seed, nb=3, D=4, N=5, L=17, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(nb, D, L, generator=g, dtype=dtype)
    delta = torch.nn.functional.softplus(torch.randn(nb, D, L, generator=g, dtype=dtype))
    A = -torch.rand(D, N, generator=g, dtype=dtype) * 3 - 0.1
    Bm, Cm = torch.randn(nb, N, L, generator=g, dtype=dtype), torch.randn(nb, N, L, generator=g, dtype=dtype)
    return u, delta, A, Bm, Cm


@pytest.mark.parametrize("seed", [0, 1])
def test_scan_matches_the_float64_loop(seed):
    args = _inputs(seed)
    ref = _oracle(*args)
    np.testing.assert_allclose(mamba.selective_scan(*args).numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mamba._loop(*args).numpy(), ref, rtol=1e-12, atol=1e-12)   # the fallback
    y32 = mamba.selective_scan(*(a.float() for a in args))
    assert y32.dtype == torch.float32
    np.testing.assert_allclose(y32.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_scan_gradients_match_finite_differences():
    args = [a.requires_grad_() for a in _inputs(2, nb=2, D=3, N=2, L=6)]
    assert torch.autograd.gradcheck(mamba.selective_scan, args, eps=1e-6, atol=1e-7)


def test_scan_gradients_match_the_torch_loop_in_float32():
    base = _inputs(3, L=40)
    gy = torch.randn(base[0].shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    grads = []
    for fn, dtype in ((mamba._loop, torch.float64), (mamba.selective_scan, torch.float32)):
        args = [a.detach().to(dtype).clone().requires_grad_() for a in base]
        (fn(*args) * gy.to(dtype)).sum().backward()
        grads.append([a.grad.double() for a in args])
    for ref, got in zip(*grads):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-3, atol=1e-4 * ref.abs().max().item())


def test_bad_shapes_and_dtypes_are_refused():
    u, delta, A, Bm, Cm = _inputs(0)
    with pytest.raises(ValueError, match="shapes"):
        mamba.selective_scan(u, delta, A, Bm[:, :-1], Cm)
    with pytest.raises(ValueError, match="shapes"):
        mamba.selective_scan(u, delta[..., :-1], A, Bm, Cm)
    with pytest.raises(TypeError, match="float32 or float64"):
        mamba.selective_scan(u.half(), delta.half(), A.half(), Bm.half(), Cm.half())


def _hf_mamba(seed=0):
    tf = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    cfg = tf.MambaConfig(vocab_size=11, hidden_size=12, num_hidden_layers=2, expand=2, conv_kernel=3,
                         state_size=4, bos_token_id=10, eos_token_id=10, pad_token_id=0)
    return tf.MambaForCausalLM(cfg).double()


def test_accelerated_mixer_matches_transformers_reference_forward_and_gradients():
    ref, fast = _hf_mamba(), _hf_mamba()
    fast.load_state_dict(ref.state_dict())
    assert mamba.accelerate(fast) == 2
    tokens = torch.randint(0, 11, (3, 23), generator=torch.Generator().manual_seed(1))
    out = []
    for model in (ref, fast):
        model.train()
        logits = model(input_ids=tokens, use_cache=False).logits             # (3, 23, 11)
        logits.square().mean().backward()
        out.append((logits.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}))
    # transformers' reference casts the scan's inputs to float32 (``.float()``), hence 1e-6, not 1e-12
    np.testing.assert_allclose(out[1][0].numpy(), out[0][0].numpy(), rtol=1e-5, atol=1e-6)
    for name, g in out[0][1].items():
        np.testing.assert_allclose(out[1][1][name].numpy(), g.numpy(), rtol=1e-4,
                                   atol=1e-5 * g.abs().max().item() + 1e-12, err_msg=name)


def test_accelerate_touches_only_its_model_and_keeps_generation():
    ref, fast = _hf_mamba(), _hf_mamba()
    fast.load_state_dict(ref.state_dict())
    mamba.accelerate(fast)
    assert all("forward" not in vars(m) for m in ref.modules())          # the other model is untouched
    assert sum("forward" in vars(m) for m in fast.modules()) == 2
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    ref.eval(), fast.eval()
    np.testing.assert_array_equal(fast.generate(prompt, **kw).numpy(), ref.generate(prompt, **kw).numpy())
    with torch.no_grad():                                               # eval forward, no cache: the scan
        np.testing.assert_allclose(fast(input_ids=prompt, use_cache=False).logits.numpy(),
                                   ref(input_ids=prompt, use_cache=False).logits.numpy(), rtol=1e-5, atol=1e-6)
