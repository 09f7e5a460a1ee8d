"""Scripts that check the paper's claims against independent references.

* ``python -m ddesys.verification.kernel_accuracy``: FFT kernel (contour shift) vs the exact recurrence.
"""

if __name__ != "ddesys.verification":  # the clone's folder imported as a top-level package
    raise ImportError("this folder is the package ddesys.verification: import it as `import ddesys.verification` "
                      "(importing `verification` from the clone's root loads a second copy under another name)")

