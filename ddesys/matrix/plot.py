"""Bode plots of multi-input multi-output frequency responses (matplotlib, imported lazily).

Takes the ``(omega, response)`` pair of :meth:`ddesys.lti.DelayLTI.frequency_response` (or of
:func:`ddesys.matrix.freqresp.freqresp` with its frequencies), so it does not depend on the system's class.
"""
from __future__ import annotations

import numpy as np

from ..plot import new_figure


def unwrap_phase(response, deg=True):
    """Phase of ``response`` unwrapped along its last axis, shifted by whole turns to start in
    ``(-360, 0]`` degrees (python-control's convention: a positive gain starts at 0, an integrator at -90).

    Parameters
    ----------
    response : array_like, complex ``(..., F)``
    deg : bool, default True

    Returns
    -------
    ndarray, real ``(..., F)``
    """
    G = np.asarray(response)
    ph = np.unwrap(np.angle(G), axis=-1)
    start = ph[..., :1]
    turns = np.ceil(start / (2 * np.pi) - 1e-9)                  # start - 2 pi turns in (-2 pi, 0]
    ph = ph - 2 * np.pi * turns
    return np.degrees(ph) if deg else ph


def plot_bode(omega, response=None, axes=None, title=None):
    """Bode plot: magnitude (dB) and unwrapped phase (degrees) of every input-output pair, log ``omega``.

    Parameters
    ----------
    omega : array_like, real ``(F,)``, or a FrequencyResponse
        Frequencies in rad per time unit; a :class:`~ddesys.lti.FrequencyResponse` (or any
        ``(omega, response)`` pair) when ``response`` is omitted. Only ``omega > 0`` is drawn (log axis;
        plot a complex system's negative frequencies by passing ``-omega`` and the matching response).
    response : array_like, complex ``(p, m, F)`` or ``(F,)``
        ``G(i omega)``; a 1-D response is one input and one output.
    axes : array of matplotlib Axes ``(2, m)``, optional
        Row 0 magnitude, row 1 phase, one column per input (a flat sequence of ``2 m`` axes is read
        row by row). Default: a new figure.
    title : str, optional
        Figure title (default "Bode plot").

    Returns
    -------
    matplotlib Figure
        One line per output ``i`` in the column of input ``j``, labelled ``u_j -> y_i``.

    Raises
    ------
    ValueError
        Shapes that do not match, no positive frequency, the wrong number of axes.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.freqresp import freqresp
    >>> from ddesys.matrix.plot import plot_bode
    >>> w = np.logspace(-2, 2, 200)
    >>> fig = plot_bode(w, freqresp(*check_statespace([[-1.0]], [[0.5]], 1.0), w))
    >>> len(fig.axes)
    2
    >>> fig.savefig("bode.png")  # doctest: +SKIP
    >>> from ddesys.plot import pyplot
    >>> pyplot().close(fig)
    """
    if response is None:
        try:
            omega, response = omega
        except (TypeError, ValueError):
            raise TypeError("plot_bode needs (omega, response) or a FrequencyResponse") from None
    w = np.asarray(omega, dtype=float).reshape(-1)
    G = np.asarray(response)
    if G.ndim == 1:
        G = G[None, None]
    if G.ndim != 3 or G.shape[-1] != w.size:
        raise ValueError(f"response must have shape (p, m, F) or (F,) with F = len(omega) = {w.size}, got "
                         f"{np.shape(response)}")
    keep = np.isfinite(w) & (w > 0)
    if not keep.any():
        raise ValueError("omega has no positive frequency to draw on a log axis")
    order = np.argsort(w[keep])
    w, G = w[keep][order], G[..., keep][..., order]
    p, m = G.shape[:2]
    if axes is None:
        fig, axes = new_figure(2, m, figsize=(4.5 * m + 2, 5.5), sharex=True, squeeze=False)
    else:
        axes = np.asarray(axes, dtype=object).reshape(-1)
        if axes.size != 2 * m:
            raise ValueError(f"axes must hold 2 m = {2 * m} Axes (magnitude and phase per input), got {axes.size}")
        axes = axes.reshape(2, m)
        fig = axes[0, 0].figure
    mag = 20 * np.log10(np.maximum(np.abs(G), 1e-300))
    phase = unwrap_phase(G)
    for j in range(m):
        for i in range(p):
            axes[0, j].semilogx(w, mag[i, j], lw=1.2, label=f"u{j} -> y{i}")
            axes[1, j].semilogx(w, phase[i, j], lw=1.2)
        axes[0, j].set(ylabel="magnitude (dB)", title=f"input u{j}")
        axes[1, j].set(xlabel="omega (rad / time unit)", ylabel="phase (deg)")
        axes[0, j].set_xlim(w[0], w[-1])
        _reference_lines(axes[0, j], axes[1, j], mag[:, j], phase[:, j])
        axes[0, j].legend(fontsize=8)
        for a in axes[:, j]:
            a.grid(alpha=0.3, which="both")
    fig.suptitle(title or "Bode plot")
    return fig


def plot_time_response(t, y, axes=None, title=None, error_estimate=None):
    """Outputs against time: one row of axes per output ``y_i``, one column per input ``u_j``.

    Parameters
    ----------
    t : array_like ``(T,)``
        Times.
    y : array_like ``(p, T)`` (one input, or a simulation) or ``(p, m, T)`` (impulse or step response of
        every input: column ``j`` answers input ``u_j``).
    axes : array of matplotlib Axes ``(p, m)``, optional
        Default: a new figure (a flat sequence of ``p m`` axes is read row by row).
    title : str, optional
        Figure title (default "Time response").
    error_estimate : float, optional
        Shown in the title (the estimated largest error of ``y``).

    Returns
    -------
    matplotlib Figure
        One line per axes.

    Raises
    ------
    ValueError
        Shapes that do not match, the wrong number of axes.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.plot import plot_time_response
    >>> t = np.linspace(0.0, 5.0, 51)
    >>> fig = plot_time_response(t, np.stack([1 - np.exp(-t), np.exp(-t)])[:, None, :])
    >>> len(fig.axes)
    2
    >>> from ddesys.plot import pyplot
    >>> pyplot().close(fig)
    """
    t = np.asarray(t, dtype=float).reshape(-1)
    Y = np.asarray(y)
    if Y.ndim == 1:
        Y = Y[None, None]
    elif Y.ndim == 2:
        Y = Y[:, None]
    if Y.ndim != 3 or Y.shape[-1] != t.size:
        raise ValueError(f"y must have shape (p, T) or (p, m, T) with T = len(t) = {t.size}, got {np.shape(y)}")
    p, m = Y.shape[:2]
    if axes is None:
        fig, axes = new_figure(p, m, figsize=(4.2 * m + 1.5, 2.2 * p + 1.2), sharex=True, squeeze=False)
    else:
        axes = np.asarray(axes, dtype=object).reshape(-1)
        if axes.size != p * m:
            raise ValueError(f"axes must hold p m = {p * m} Axes (one per output and input), got {axes.size}")
        axes = axes.reshape(p, m)
        fig = axes[0, 0].figure
    for i in range(p):
        for j in range(m):
            ax = axes[i, j]
            ax.plot(t, np.real(Y[i, j]), lw=1.2, color=f"C{j % 10}")
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(f"input u{j}" if m > 1 or Y.shape[1] > 1 else "response", fontsize=10)
            if j == 0:
                ax.set_ylabel(f"y{i}")
            if i == p - 1:
                ax.set_xlabel("t (time units)")
        if t.size > 1:
            axes[i, 0].set_xlim(t[0], t[-1])
    head = title or "Time response"
    if error_estimate is not None:
        head += f" (estimated error {error_estimate:.1e})"
    fig.suptitle(head)
    return fig


def _reference_lines(ax_mag, ax_phase, mag, phase):
    """The 0 dB line where the magnitude passes it, the odd multiples of -180 deg the phase reaches, and
    phase ticks at multiples of 45, 90 or 180 deg (by the phase's span)."""
    from matplotlib.ticker import MaxNLocator, MultipleLocator

    fin = np.isfinite(mag)
    if fin.any() and mag[fin].min() <= 6 and mag[fin].max() >= -6:
        ax_mag.axhline(0.0, color="0.35", lw=0.8, ls=":", zorder=1)
    ok = np.isfinite(phase)
    if not ok.any():
        return
    lo, hi = float(phase[ok].min()), float(phase[ok].max())
    for k in range(int(np.floor((lo - 180) / 360)), int(np.ceil((hi - 180) / 360)) + 1):
        level = 180.0 + 360.0 * k
        if lo - 20 <= level <= hi + 20:
            ax_phase.axhline(level, color="0.35", lw=0.8, ls=":", zorder=1)
    span = hi - lo
    step = 45.0 if span <= 270 else 90.0 if span <= 720 else None
    if step is not None:
        ax_phase.yaxis.set_major_locator(MultipleLocator(step))
    else:
        ax_phase.yaxis.set_major_locator(MaxNLocator(nbins=8, steps=[1.8, 3.6, 7.2, 9]))


__all__ = ["plot_bode", "plot_time_response", "unwrap_phase"]
