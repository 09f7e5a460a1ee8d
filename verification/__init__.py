"""Scripts that check the paper's claims against independent references.

* ``python -m ddesys.verification.kernel_accuracy``: FFT kernel (contour shift) vs the exact recurrence.
"""

if __name__ != "ddesys.verification":             # the old top-level name `verification`: the same modules, with a warning
    import sys as _sys

    from ddesys._legacy import alias as _alias
    _sys.modules[__name__] = _alias(__name__)

