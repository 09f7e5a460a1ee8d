"""The float64 references that the tests and the checks share (their one home), and the error measures.

Every reference is written from the formulas of docs/theory.md in NumPy float64 and never runs the code it
is compared with:

* :mod:`.loops`: the diagonal discrete delayed system as plain loops (:func:`brute_force`,
  :func:`impulse_response`), its characteristic polynomial (:func:`char_poly`, :func:`roots_radius`)
  and the tap (:func:`tap_brute`); imports nothing but NumPy.
* :mod:`.layer`: a DS4D layer and a model, read from their raw parameters (:func:`ds4d_params`), run
  through a vectorized recurrence (:func:`recurrence`, :func:`recurrence_kernel`), in ticks
  (:func:`clocked_recurrence`, :func:`soft_clock_recurrence`), with the tap (:func:`tap`) and through
  a whole model (:func:`model_forward`).
* :mod:`.matrix`: matrix delay systems by the method of steps (:func:`mos_reference`, SciPy's ODE solver).
* :mod:`.errors`: :func:`rel_err`, :func:`rel_max`, :func:`rel_rmse`.

Two implementations of the same recurrence live here on purpose (:func:`brute_force` and
:func:`recurrence`): the tests check one against the other
(``tests/verification/test_reference.py``).
"""
from .errors import rel_err, rel_max, rel_rmse
from .layer import (clocked_recurrence, ds4d_params, model_forward, recurrence, recurrence_kernel,
                    soft_clock_recurrence, tap, tap_params)
from .loops import (brute_force, char_poly, impulse_response, roots_radius, single_threaded_blas, split_delay,
                    tap_brute)
from .matrix import mos_reference

__all__ = ["brute_force", "char_poly", "clocked_recurrence", "ds4d_params", "impulse_response", "model_forward",
           "mos_reference", "recurrence", "recurrence_kernel", "rel_err", "rel_max", "rel_rmse", "roots_radius",
           "single_threaded_blas", "soft_clock_recurrence", "split_delay", "tap", "tap_brute", "tap_params"]
