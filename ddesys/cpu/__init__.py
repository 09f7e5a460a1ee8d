"""The compiled CPU runtime: every Numba loop of the package, its thread budget and compile options.

Numba is optional: without it (or with ``DDESYS_DISABLE_NUMBA=1``) every entry point here has a
NumPy or torch fallback elsewhere, and :func:`ddesys.cpu.available` says so. The layers of
:mod:`ddesys.nn` reach these loops through their decode engines; users rarely import them.
"""
