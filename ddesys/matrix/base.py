"""The base of the continuous matrix systems: :class:`~ddesys.DelayStateSpace`,
:class:`~ddesys.NeutralStateSpace` and :class:`~ddesys.DelayIOSystem` share their shapes and their ``repr``
here, written once (python-control's ``LTI`` holds its systems' shapes the same way).
"""
from __future__ import annotations

from ..lti import DelayLTI
from .charmatrix import real_vector


class MatrixLTI(DelayLTI):
    """Shapes, ``repr`` and the frequency response of a continuous system with a state matrix ``A``, an
    input matrix and an output matrix, and delays ``tau``.

    A subclass names its input and output matrices when they are not ``B`` and ``C`` (``_input_matrix``,
    ``_output_matrix``) and the delays its ``repr`` lists when they are not ``tau`` as given
    (``_repr_delays``).
    """

    _input_matrix = "B"          # (n, m): its columns are the inputs
    _output_matrix = "C"         # (p, n): its rows are the outputs

    @property
    def n_states(self):
        """State dimension ``n``."""
        return int(self.A.shape[0])

    @property
    def n_inputs(self):
        """Input dimension ``m``."""
        return int(getattr(self, self._input_matrix).shape[1])

    @property
    def n_outputs(self):
        """Output dimension ``p``."""
        return int(getattr(self, self._output_matrix).shape[0])

    def freqresp(self, omega):
        """Exact frequency response ``G(i omega)`` (the transfer matrix on the imaginary axis; a subclass
        with a faster path overrides it).

        Parameters
        ----------
        omega : array_like, real ``(F,)``
            Radians per time unit.

        Returns
        -------
        ndarray, complex ``(p, m, F)``

        Raises
        ------
        ValueError, TypeError
            Non-finite or non-real ``omega``.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys.matrix.neutral import NeutralStateSpace
        >>> sys = NeutralStateSpace([[-2.0]], [[0.5]], 0.5, 1.0)
        >>> complex(np.round(sys.freqresp([0.0])[0, 0, 0], 6))    # DC gain 1 / (2 - 0.5)
        (0.666667+0j)
        """
        omega = real_vector(omega, "omega", "real frequencies (rad per time unit)")
        return self.transfer(1j * omega)

    def _repr_delays(self):
        """``(name, list of floats)``: the delays the ``repr`` shows."""
        return "tau", [float(t) for t in self.tau]

    def __repr__(self):
        name, delays = self._repr_delays()
        return (f"{type(self).__name__}(n_states={self.n_states}, n_inputs={self.n_inputs}, "
                f"n_outputs={self.n_outputs}, {name}={delays})")


__all__ = ["MatrixLTI"]
