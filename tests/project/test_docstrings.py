"""Every public method of the public classes has a numpydoc docstring (issue 52).

The API reference (``docs/api/*.rst``) documents every name of ``ddesys.__all__`` and
``ddesys.nn.__all__``, each class with its members. For every class among those names, a *public method*
is a member found by ``inspect.getmembers`` (inherited ones included) whose name has no leading
underscore, that is a function or a bound method (a classmethod) and is defined in ddesys
(``__module__`` under ``ddesys``: methods of ``torch.nn.Module`` or ``tuple`` are not ours). Each such
method

* has a docstring (``inspect.getdoc``: a subclass's override without one inherits its base's);
* with parameters besides ``self`` / ``cls``, has a ``Parameters`` section;
* (with numpydoc installed) documents exactly its signature's parameters there (``**kwargs`` as
  ``**kwargs``; several names may share one entry, ``rtol, atol : float``).

Needs torch (``ddesys.nn``); skipped, saying so, without it.
"""
from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch", reason="the public classes of ddesys.nn need torch")

import ddesys  # noqa: E402
import ddesys.nn as dnn  # noqa: E402


def _public_methods():
    """``{qualified name: function}`` of the public methods (module docstring), each once (a method
    inherited by several classes is listed under the class that defines it)."""
    out = {}
    for mod in (ddesys, dnn):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not inspect.isclass(obj):
                continue
            for member, f in inspect.getmembers(obj):
                if member.startswith("_") or not (inspect.isfunction(f) or inspect.ismethod(f)):
                    continue
                if not getattr(f, "__module__", "").startswith("ddesys"):
                    continue
                out.setdefault(f"{f.__module__}.{f.__qualname__}", f)
    return out


def _parameters(f):
    """The signature's parameter names, ``self`` / ``cls`` left out, ``*args`` / ``**kwargs`` with stars."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [stars.get(p.kind, "") + p.name for p in inspect.signature(f).parameters.values()
            if p.name not in ("self", "cls")]


def test_public_methods_are_found():
    methods = _public_methods()
    assert len(methods) > 200, f"the scan found only {len(methods)} public methods"
    for name in ("ddesys.nn.ds4d.DS4D.step", "ddesys.control.iosys.DelayIOSystem.feedback",
                 "ddesys.nn.branch.Branch.kernel"):
        assert name in methods, name


def test_every_public_method_has_a_docstring_and_parameters_section():
    no_doc, no_params = [], []
    for name, f in sorted(_public_methods().items()):
        doc = inspect.getdoc(f) or ""
        if not doc.strip():
            no_doc.append(name)
        elif _parameters(f) and "Parameters" not in doc:
            no_params.append(name)
    assert not (no_doc or no_params), (f"{len(no_doc)} public method(s) without a docstring: {no_doc}; "
                                       f"{len(no_params)} public method(s) with parameters but no numpydoc "
                                       f"Parameters section: {no_params}")


def test_parameters_sections_match_the_signatures():
    docscrape = pytest.importorskip("numpydoc.docscrape", reason="parsing docstrings needs numpydoc (the docs "
                                    "extra: pip install -e \".[docs]\")")
    wrong = []
    for name, f in sorted(_public_methods().items()):
        want = _parameters(f)
        doc = inspect.getdoc(f) or ""
        if not want or "Parameters" not in doc:
            continue                                   # the test above names these
        documented = [n.strip() for p in docscrape.NumpyDocString(doc)["Parameters"] for n in p.name.split(",")]
        missing = [n for n in want if n not in documented]
        extra = [n for n in documented if n not in want]
        if missing or extra:
            wrong.append(f"{name}: undocumented {missing}, not parameters {extra}")
    assert not wrong, "Parameters sections that do not match the signature:\n" + "\n".join(wrong)
