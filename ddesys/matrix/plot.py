"""Bode plots of multi-input multi-output frequency responses (matplotlib, imported lazily).

Takes the ``(omega, response)`` pair of :meth:`ddesys.lti.DelayLTI.frequency_response` (or of
:func:`ddesys.matrix.freqresp.freqresp` with its frequencies), so it does not depend on the system's class.
"""
from __future__ import annotations

import numpy as np

from ..plot import new_figure


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
    phase = np.degrees(np.unwrap(np.angle(G), axis=-1))
    for j in range(m):
        for i in range(p):
            axes[0, j].semilogx(w, mag[i, j], lw=1, label=f"u{j} -> y{i}")
            axes[1, j].semilogx(w, phase[i, j], lw=1)
        axes[0, j].set(ylabel="magnitude (dB)", title=f"input u{j}")
        axes[1, j].set(xlabel="omega (rad / time unit)", ylabel="phase (deg)")
        axes[0, j].legend(fontsize=8)
        for a in axes[:, j]:
            a.grid(alpha=0.3, which="both")
    fig.suptitle(title or "Bode plot")
    return fig


__all__ = ["plot_bode"]
