"""The compiled chunk scan (state passing on the CPU) against a brute-force float64 loop: outputs, the new
ring, and every gradient against central finite differences of the loop."""
import numpy as np
import pytest

from ddesys.cpu import chunk_scan

pytestmark = pytest.mark.skipif(not chunk_scan.available(), reason="needs Numba")

B, H, N2, R = 2, 3, 4, 5
K = np.array([1, 2, 4])


def _loop(x, ring, t0, lam, m1, m2, bbar, c, delayed):
    """The recurrence written out: a list per (row, channel) holding the history then the chunk."""
    L, Rr = x.shape[2], ring.shape[1]
    y, new = np.zeros((B, H, L)), np.zeros_like(ring)
    for b in range(B):
        for h in range(H):
            tr = [ring[b, s % Rr, h] if s >= 0 else np.zeros(N2) for s in range(t0 - Rr, t0)]
            for t in range(L):
                v = lam[h] * tr[-1] + bbar[h] * x[b, h, t]
                if delayed:
                    v = v + m1[h] * tr[-K[h]] + m2[h] * tr[-K[h] - 1]
                tr.append(v)
                y[b, h, t] = 2 * np.real(np.sum(c[h] * v))
            for s in range(t0 + L - Rr, t0 + L):
                new[b, s % Rr, h] = tr[s - (t0 - Rr)]
    return y, new


@pytest.mark.parametrize("delayed", [True, False])
@pytest.mark.parametrize("L,t0", [(7, 3), (3, 9), (2, 0)])
def test_scan_equals_the_loop_and_its_gradients_finite_differences(delayed, L, t0):
    rng = np.random.default_rng(L + 10 * t0 + delayed)
    cz = lambda *s: rng.standard_normal(s) + 1j * rng.standard_normal(s)       # noqa: E731
    lam, m1, m2, bbar, c = cz(H, N2) * 0.4, cz(H, N2) * 0.2, cz(H, N2) * 0.2, cz(H, N2), cz(H, N2)
    Rr = R if delayed else 1
    x, ring = rng.standard_normal((B, H, L)), cz(B, Rr, H, N2)
    new = np.empty_like(ring)
    y = chunk_scan.scan_forward(x, ring, t0, lam, m1, m2, bbar, c, K, new=new, delayed=delayed)
    y_ref, new_ref = _loop(x, ring, t0, lam, m1, m2, bbar, c, delayed)
    np.testing.assert_allclose(y, y_ref, atol=1e-12)
    np.testing.assert_allclose(new, new_ref, atol=1e-12)
    gy, gn = rng.standard_normal((B, H, L)), cz(*ring.shape)

    def loss(*args):
        yy, nn = _loop(*args[:1], args[1], t0, *args[2:], delayed)
        return np.sum(gy * yy) + np.sum(np.real(np.conj(gn) * nn))
    grads = chunk_scan.scan_backward(x, ring, t0, lam, m1, m2, bbar, c, K, gy, gn, delayed)
    args = [x, ring, lam, m1, m2, bbar, c]
    eps = 1e-6
    for i, (a, g) in enumerate(zip(args, grads)):
        if not delayed and i in (3, 4):
            continue
        for idx in np.ndindex(a.shape):
            for d in ((1, 1j) if np.iscomplexobj(a) else (1,)):
                up, dn = [q.copy() for q in args], [q.copy() for q in args]
                up[i][idx] += eps * d
                dn[i][idx] -= eps * d
                fd = (loss(*up) - loss(*dn)) / (2 * eps)
                an = g[idx].real if d == 1 else g[idx].imag
                assert abs(fd - an) < 1e-6, (i, idx, d, fd, an)
    # without the history's gradient: the same parameter gradients, no ring gradient
    grads2 = chunk_scan.scan_backward(x, ring, t0, lam, m1, m2, bbar, c, K, gy, gn, delayed, ring_grad=False)
    assert grads2[1] is None
    for g1, g2 in zip(grads[2:], grads2[2:]):
        np.testing.assert_allclose(g1, g2, atol=1e-12)


def test_scan_refuses_delays_past_its_ring():
    x, ring = np.zeros((1, 3, 4)), np.zeros((1, 3, 3, N2), complex)
    z = np.zeros((3, N2), complex)
    with pytest.raises(ValueError, match="delays must lie"):
        chunk_scan.scan_forward(x, ring, 0, z, z, z, z, z, K)
