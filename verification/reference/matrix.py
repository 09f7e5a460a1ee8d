"""Matrix delay systems by the method of steps, float64 (SciPy's ODE solver; no ddesys code).

``mos_reference``: the method of steps for commensurate delays ``tau_k = mult_k tau0``. On
``[0, J tau0]`` the segments ``z_j(r) = x(j tau0 + r)``, ``r in [0, tau0]``, obey the ODE of size
``J n``

    z_j' = A z_j + sum_k Ad_k z_{j - mult_k} + g(j tau0 + r)      (z_i = 0 for i < 0),

with ``z_0(0) = x0`` and ``z_j(0) = z_{j-1}(tau0)``. The ODE is solved for ``1, 2, ..., J`` segments in
turn (each solve gives the next segment's initial value) by ``scipy.integrate.solve_ivp`` (DOP853,
``rtol = 1e-12``, ``atol = 1e-14``); the interval ``[0, tau0]`` is split at the times where ``g`` is not
smooth (``kinks``), so each piece integrates a smooth right-hand side. An optional running integral
``q' = sum_j ||C z_j||_F^2`` gives ``int_0^{J tau0} ||C x||_F^2 dt`` (the H2 brute force).
"""
import numpy as np
from scipy.integrate import solve_ivp

__all__ = ["mos_reference"]


def mos_reference(A, Ads, mult, tau0, x0, J, g=None, kinks=(), C=None, rtol=1e-12, atol=1e-14):
    """Solve on ``[0, J tau0]``; ``x0`` may be ``(n,)`` or ``(n, r)`` (``r`` right-hand sides).

    Returns ``(x, q)``: ``x(t)`` a callable giving ``(n,)`` or ``(n, r)`` arrays for ``t`` in ``[0, J tau0]``
    (an array of times gives a trailing time axis), and ``q`` the integral of ``||C x||_F^2`` (None without
    ``C``).
    """
    A = np.asarray(A)
    x0 = np.asarray(x0)
    shape = x0.shape
    n = shape[0]
    cols = int(np.prod(shape[1:], dtype=int))
    dt = np.result_type(A, x0, *[np.asarray(a) for a in Ads], np.float64)
    Ads = [np.asarray(a, dt) for a in Ads]

    def splits_for(size):
        pts = {0.0, float(tau0)}
        for kt in kinks:
            for j in range(size):
                r = kt - j * tau0
                if 1e-12 < r < tau0 - 1e-12:
                    pts.add(float(r))
        return sorted(pts)

    ics = [x0.reshape(n, cols).astype(dt)]
    for size in range(1, J + 1):
        def rhs(r, z, size=size):
            Z = z[:size * n * cols].reshape(size, n, cols)
            dZ = np.einsum("ab,jbc->jac", A, Z)
            for Ad, mk in zip(Ads, mult):
                if mk < size:
                    dZ[mk:] += np.einsum("ab,jbc->jac", Ad, Z[:size - mk])
            if g is not None:
                for j in range(size):
                    dZ[j] += np.asarray(g(j * tau0 + r), dt).reshape(n, cols)
            out = [dZ.reshape(-1)]
            if C is not None:
                Y = np.einsum("pb,jbc->jpc", C, Z)
                out.append(np.array([np.sum(np.abs(Y) ** 2)], dt))
            return np.concatenate(out)

        z = np.concatenate([np.stack(ics).reshape(-1)] + ([np.zeros(1, dt)] if C is not None else []))
        pieces = []
        sp = splits_for(size)
        for a, b in zip(sp[:-1], sp[1:]):
            sol = solve_ivp(rhs, (a, b), z, method="DOP853", rtol=rtol, atol=atol, dense_output=True)
            if not sol.success:
                raise RuntimeError(f"mos_reference: {sol.message}")
            pieces.append((a, b, sol.sol))
            z = sol.y[:, -1]
        if size < J:
            ics.append(z[(size - 1) * n * cols:size * n * cols].reshape(n, cols))
    q = float(np.real(z[-1])) if C is not None else None

    def x(t):
        t = np.asarray(t, dtype=float)
        flat = t.reshape(-1)
        res = np.empty((n, cols, flat.size), dt)
        for i, ti in enumerate(flat):
            j = min(int(ti // tau0), J - 1)
            r = ti - j * tau0
            for a, b, s in pieces:
                if r <= b or b == pieces[-1][1]:
                    zz = s(min(max(r, a), b))
                    break
            res[:, :, i] = zz[j * n * cols:(j + 1) * n * cols].reshape(n, cols)
        res = res.reshape(shape + t.shape)
        return res

    return x, q
