"""The ``Examples`` sections of the public docstrings run and print what they say (``doctest``).

One test per module: ``doctest.testmod`` with pytest's default flag (``ELLIPSIS``). The examples use
tiny sizes (the whole file runs in seconds); the ``nn`` modules need torch and are skipped without it.
"""
import doctest
import importlib

import pytest

DDESYS = ["ddesys.discrete", "ddesys.discrete_response", "ddesys.continuous", "ddesys.continuous_response",
          "ddesys.stability", "ddesys.winding", "ddesys.contour", "ddesys.discretize", "ddesys.interpolation",
          "ddesys.recurrence", "ddesys.plot", "ddesys.parameterization", "ddesys.transfer", "ddesys.matrix.statespace",
          "ddesys.matrix.roots", "ddesys.matrix.chart", "ddesys.matrix.crossings", "ddesys.matrix.norms",
          "ddesys.matrix.timeresp", "ddesys.lti", "ddesys.matrix.charmatrix", "ddesys.matrix.discrete",
          "ddesys.matrix.discrete_response", "ddesys.matrix.discrete_stability", "ddesys.matrix.plot",
          "ddesys.matrix.continuous_response", "ddesys.matrix.sweeps", "ddesys.matrix.discretize",
          "ddesys.matrix.freqresp", "ddesys.matrix.rightmost", "ddesys.matrix.quasipoly", "ddesys.matrix.neutral",
          "ddesys.control.iosys", "ddesys.control.bdalg", "ddesys.control.xferfcn", "ddesys.control.margins",
          "ddesys.control.freqplot", "ddesys.control.convert", "ddesys.control._design_abscissa",
          "ddesys.control._design_hinf"]
NN = ["ddesys.nn.ds4d", "ddesys.nn.model", "ddesys.nn.optim", "ddesys.nn.s4compat"]


def _run(name):
    module = importlib.import_module(name)
    res = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert res.attempted > 0, f"{name}: no examples found (remove it from the list or add some)"
    assert res.failed == 0, f"{name}: {res.failed} of {res.attempted} doctest examples failed (output above)"


@pytest.mark.parametrize("name", DDESYS)
def test_ddesys_doctests(name):
    _run(name)


@pytest.mark.parametrize("name", NN)
def test_nn_doctests(name):
    pytest.importorskip("torch")
    _run(name)
