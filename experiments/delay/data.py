"""The continuous delay task of *How to Train Your HiPPO* (the S4 repository's ``delay`` dataset), our
implementation.

Input: band-limited white noise, ``x`` of ``L`` samples at step ``dt`` (seconds): random complex
Fourier coefficients (real and imaginary parts i.i.d. normal) on the frequencies ``f_j = j / (L dt)``,
``0 < f_j <= freq``, zero at DC and above the cutoff ``freq`` (Hz), inverse real FFT, shifted so the
signal starts at 0, then scaled to an RMS of exactly ``rms`` (0.5) per sequence. (The S4 code scales
the coefficients so the RMS is 0.5 in expectation; we normalize each sequence, so every sequence has
the same power and the relative RMSE of a model does not depend on how loud a batch happened to be.)
Shifting by a constant only changes the DC bin and scaling changes no zero, so the spectrum above the
cutoff stays zero.

Target: one output channel per lag, ``y[t, i] = x[t - lags[i]]`` for ``t >= lags[i]`` and 0 before
(the signal before the sequence is taken as 0, which is where it starts). Loss: MSE over every
position. The S4 repository's lags are ``l_lag, 2 l_lag, ..., n_lag l_lag``; here any set of lags.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

RMS = 0.5


def n_band(L, dt, freq):
    """Number of nonzero Fourier bins: frequencies ``j / (L dt)`` with ``1 <= j`` and ``f_j <= freq``."""
    return int(np.sum(np.fft.rfftfreq(L, d=dt)[1:] <= freq * (1 + 1e-12)))


def whitesignal(batch, L, dt, freq, rng, rms=RMS):
    """``(batch, L)`` float64 band-limited white noise (module docstring); ``rng``: a NumPy Generator.
    Raises ``ValueError`` when no frequency lies in ``(0, freq]`` or ``freq`` exceeds Nyquist."""
    nyquist = 0.5 / dt
    if not 0 < freq <= nyquist:
        raise ValueError(f"freq must lie in (0, Nyquist = {nyquist:g}] Hz for dt={dt:g}, got {freq:g}")
    m = n_band(L, dt, freq)
    if m < 1:
        raise ValueError(f"freq={freq:g} Hz is below the lowest frequency 1/(L dt) = {1 / (L * dt):g} Hz: the "
                         f"signal would be zero (raise freq or L)")
    coef = np.zeros((batch, L // 2 + 1), dtype=np.complex128)
    coef[:, 1:m + 1] = rng.standard_normal((batch, m)) + 1j * rng.standard_normal((batch, m))
    if L % 2 == 0 and m == L // 2:                        # the Nyquist bin of an even length is real
        coef[:, m] = coef[:, m].real
    x = np.fft.irfft(coef, n=L, axis=-1)                  # (batch, L)
    x = x - x[:, :1]                                      # starts at 0
    x *= rms / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True))
    return x


def delayed(x, lags):
    """``x`` ``(B, L)`` -> ``(B, L, len(lags))``: channel ``i`` is ``x`` delayed by ``lags[i]`` steps,
    zeros before."""
    B, L = x.shape
    y = np.zeros((B, L, len(lags)), dtype=x.dtype)
    for i, lag in enumerate(lags):
        y[:, lag:, i] = x[:, :L - lag]
    return y


@dataclass(frozen=True)
class Task:
    """Sequences of ``L`` samples at ``dt`` seconds, band limit ``freq`` Hz, targets at ``lags`` steps."""
    L: int = 1024
    lags: tuple = (256,)
    freq: float = 100.0
    dt: float = 1e-3

    def __post_init__(self):
        object.__setattr__(self, "lags", tuple(int(v) for v in self.lags))
        if self.L < 2:
            raise ValueError(f"L must be >= 2, got {self.L}")
        if not self.lags or any(not 1 <= v < self.L for v in self.lags):
            raise ValueError(f"every lag must lie in [1, L-1] = [1, {self.L - 1}], got {list(self.lags)}")
        if len(set(self.lags)) != len(self.lags):
            raise ValueError(f"lags must be distinct, got {list(self.lags)}")
        if not self.dt > 0:
            raise ValueError(f"dt must be positive, got {self.dt}")
        nyquist = 0.5 / self.dt
        if not 0 < self.freq <= nyquist:
            raise ValueError(f"freq must lie in (0, Nyquist = {nyquist:g}] Hz for dt={self.dt:g}, got {self.freq:g}")
        if n_band(self.L, self.dt, self.freq) < 1:
            raise ValueError(f"freq={self.freq:g} Hz is below the lowest frequency 1/(L dt) = "
                             f"{1 / (self.L * self.dt):g} Hz (raise freq or L)")

    @property
    def name(self):
        return f"delay-L{self.L}-lag{'+'.join(map(str, self.lags))}-f{self.freq:g}"

    @property
    def n_out(self):
        return len(self.lags)

    @property
    def bins(self):
        """Nonzero Fourier bins of the input (its degrees of freedom over the whole sequence / 2)."""
        return n_band(self.L, self.dt, self.freq)

    def sample(self, batch, rng):
        """``(x, y)``: float32 inputs ``(B, L, 1)`` and targets ``(B, L, n_lags)``."""
        x = whitesignal(batch, self.L, self.dt, self.freq, rng)
        return x[..., None].astype(np.float32), delayed(x, self.lags).astype(np.float32)

    def to_dict(self):
        return {**asdict(self), "lags": list(self.lags), "name": self.name, "bins": self.bins}


__all__ = ["RMS", "Task", "delayed", "n_band", "whitesignal"]
