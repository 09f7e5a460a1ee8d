"""Plots for delay systems (matplotlib, imported lazily; no computation depends on this module).

Every function takes an optional ``ax`` (or ``axes``) and returns the figure, titled, with labelled
axes and units, so a saved PNG reads without the code that made it. A figure made here (no ``ax`` given)
uses matplotlib's constrained layout, so no label is clipped when it is saved.
"""
from __future__ import annotations

import numpy as np

from ._array import to_numpy
from .stability import is_stable_exact


def pyplot():
    """``matplotlib.pyplot``, importable on a headless machine.

    Falls back to the Agg backend only when the configured interactive backend cannot start. The
    figures of this module and of the experiments are made through it.

    Returns
    -------
    module
        ``matplotlib.pyplot``.
    """
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        try:
            import matplotlib.pyplot as plt  # noqa: F401
        except Exception:  # noqa: BLE001 - headless machines
            matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def new_figure(nrows=1, ncols=1, figsize=None, **kw):
    """``plt.subplots`` with the constrained layout (labels and titles kept inside the saved image).

    Parameters
    ----------
    nrows, ncols : int, default 1
    figsize : pair of float, optional
    **kw
        Passed to ``plt.subplots`` (``sharex``, ``squeeze``, ...).

    Returns
    -------
    (matplotlib Figure, Axes or array of Axes)
    """
    return pyplot().subplots(nrows, ncols, figsize=figsize, layout="constrained", **kw)


def _channels(sys, channels):
    n = int(np.prod(sys.batch_shape, dtype=np.int64))
    return list(range(min(n, 4))) if channels is None else list(channels)


def plot_kernel(sys, L, channels=None, ax=None, **kernel_kw):
    """Kernel (impulse response without ``d``) of a :class:`DiscreteDelaySystem`, a few channels.

    Parameters
    ----------
    sys : DiscreteDelaySystem
    L : int
        Kernel length.
    channels : iterable of int, optional
        Flat channel indices (default: the first four).
    ax : matplotlib Axes, optional
        Axes to draw on (default: a new figure).
    **kernel_kw
        Passed to :meth:`DiscreteDelaySystem.kernel`.

    Returns
    -------
    matplotlib Figure
        Dotted vertical lines mark each channel's delay.

    Examples
    --------
    >>> from ddesys import DiscreteDelaySystem, plot
    >>> sys = DiscreteDelaySystem(lam=[0.9], mu=[0.05], bbar=[1.0], c=[0.5], delay=[3.5, 10.0])
    >>> plot.plot_kernel(sys, 64).savefig("kernel.png")  # doctest: +SKIP
    """
    fig, ax = (ax.figure, ax) if ax is not None else new_figure(figsize=(7, 3.5))
    K = to_numpy(sys.kernel(L, **kernel_kw)).reshape(-1, L)
    delay = to_numpy(sys.delay).reshape(-1)
    for i in _channels(sys, channels):
        line, = ax.plot(np.arange(L), K[i], lw=1, label=f"channel {i} (delay {delay[i]:.1f} steps)")
        ax.axvline(delay[i], color=line.get_color(), ls=":", lw=0.8)
    ax.set(xlabel="t (steps)", ylabel="K_t", title="Delay-system kernel (dotted: delay)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_freqresp(sys, omega=None, channels=None, axes=None):
    """Bode plot: ``|K|`` in dB and phase against frequency.

    Parameters
    ----------
    sys : DiscreteDelaySystem or DelaySystem
    omega : array_like, real ``(F,)``, optional
        Frequencies (default: up to pi rad/step for a discrete system, ``1e-2 .. 1e2`` on a log axis
        for a continuous one).
    channels : iterable of int, optional
        Flat channel indices (default: the first four).
    axes : pair of matplotlib Axes, optional
        Magnitude and phase axes (default: a new figure).

    Returns
    -------
    matplotlib Figure
    """
    if axes is None:
        fig, axes = new_figure(2, 1, figsize=(7, 5), sharex=True)
    fig = axes[0].figure
    discrete = hasattr(sys, "kernel")
    if omega is None:
        omega = np.linspace(1e-3, np.pi, 2000) if discrete else np.logspace(-2, 2, 2000)
    Hf = to_numpy(sys.freqresp(omega)).reshape(-1, len(omega))
    for i in _channels(sys, channels):
        axes[0].plot(omega, 20 * np.log10(np.abs(Hf[i]) + 1e-300), lw=1, label=f"channel {i}")
        axes[1].plot(omega, np.unwrap(np.angle(Hf[i])), lw=1)
    unit = "rad / step" if discrete else "rad / time unit"
    axes[0].set(ylabel="|K| (dB)", title="Frequency response" + (" on the unit circle" if discrete else " G(i w)"))
    axes[1].set(xlabel=f"omega ({unit})", ylabel="phase (rad)")
    if not discrete:
        axes[0].set_xscale("log")
    axes[0].legend(fontsize=8)
    for a in axes:
        a.grid(alpha=0.3)
    return fig


def plot_roots(sys, ax=None, max_degree=2048):
    """Characteristic roots: discrete systems against the unit circle, continuous against the imaginary
    axis (Lambert-W branches -5..5).

    Parameters
    ----------
    sys : DiscreteDelaySystem or DelaySystem
    ax : matplotlib Axes, optional
        Axes to draw on (default: a new figure).
    max_degree : int, default 2048
        Passed to :meth:`DiscreteDelaySystem.poles`.

    Returns
    -------
    matplotlib Figure

    Raises
    ------
    ValueError
        A discrete system of degree above ``max_degree``.
    """
    fig, ax = (ax.figure, ax) if ax is not None else new_figure(figsize=(5, 5))
    if hasattr(sys, "poles"):
        roots = np.concatenate(sys.poles(max_degree=max_degree))
        th = np.linspace(0, 2 * np.pi, 400)
        ax.plot(np.cos(th), np.sin(th), "k-", lw=0.8, label="unit circle")
        ax.plot(roots.real, roots.imag, ".", ms=3, label="roots of P(z)")
        ax.set(xlabel="Re z", ylabel="Im z", title=f"Discrete roots (spectral radius {np.abs(roots).max():.4f})")
        ax.set_aspect("equal")
    else:
        roots = sys.characteristic_roots(range(-5, 6)).ravel()
        roots = roots[np.isfinite(roots)]
        ax.axvline(0, color="k", lw=0.8, label="imaginary axis")
        ax.plot(roots.real, roots.imag, ".", ms=4, label="roots s_j (Lambert W)")
        ax.set(xlabel="Re s", ylabel="Im s", title=f"Continuous roots (rightmost Re = {roots.real.max():.4f})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_stability_region(k, alpha=0.0, n=201, lim=2.0, ax=None):
    """Exact stability region of the scalar real system ``h_t = lam h_{t-1} + mu h(t - k - alpha)``
    in the ``(lam, mu)`` plane, with the sufficient diamond ``|lam| + |mu| < 1`` drawn over it.

    Parameters
    ----------
    k : int
        Integer part of the delay.
    alpha : float, default 0.0
        Fractional part of the delay.
    n : int, default 201
        Grid points per axis.
    lim : float, default 2.0
        The grid spans ``[-lim, lim]`` in both ``lam`` and ``mu``.
    ax : matplotlib Axes, optional
        Axes to draw on (default: a new figure).

    Returns
    -------
    matplotlib Figure

    Examples
    --------
    >>> from ddesys import plot
    >>> plot.plot_stability_region(k=5, alpha=0.0).savefig("region.png")  # doctest: +SKIP
    """
    fig, ax = (ax.figure, ax) if ax is not None else new_figure(figsize=(5, 5))
    g = np.linspace(-lim, lim, n)
    LAM, MU = np.meshgrid(g, g)
    st = is_stable_exact(LAM.astype(complex), MU.astype(complex), np.full(LAM.shape, int(k)),
                         np.full(LAM.shape, float(alpha)))
    ax.contourf(LAM, MU, st.astype(float), levels=[0.5, 1.5], colors=["#9ecae1"])
    ax.plot([1, 0, -1, 0, 1], [0, 1, 0, -1, 0], "k--", lw=1, label="|lam| + |mu| = 1 (sufficient)")
    ax.plot([], [], "s", color="#9ecae1", label="exactly stable")
    frac = st[np.abs(LAM) + np.abs(MU) < 1].size / max(1, st.sum())
    ax.set(xlabel="lam", ylabel="mu", title=f"Stability region, delay {k + alpha:g} steps\n"
           f"(criterion certifies {100 * min(frac, 1):.0f}% of the stable grid)")
    ax.set_aspect("equal")
    ax.legend(fontsize=8, loc="lower left")
    return fig
