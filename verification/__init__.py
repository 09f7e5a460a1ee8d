"""Scripts that check the paper's claims against independent references.

* ``python -m ddesys.verification.kernel_accuracy``: FFT kernel (contour shift) vs the exact recurrence.
"""


