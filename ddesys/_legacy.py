"""The old top-level import paths (``import nn``, ``gpu``, ``verification``, ``experiments``) as aliases.

The project's folders ``nn/``, ``gpu/``, ``verification/`` and ``experiments/`` install as
``ddesys.nn``, ``ddesys.gpu``, ``ddesys.verification`` and ``ddesys.experiments``, so that ``from torch
import nn`` and the project's layers live in one file without aliases. For one release the old names still
import, with a ``DeprecationWarning``, and resolve to the *same* module objects (never a second copy of a
module, whose classes would differ from the real ones): :func:`alias` puts the already imported
``ddesys.<name>.*`` modules into ``sys.modules`` under the old names and installs a finder that maps any
later ``<old>.<sub>`` import to ``ddesys.<name>.<sub>``.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

NEW = {"nn": "ddesys.nn", "gpu": "ddesys.gpu", "verification": "ddesys.verification",
       "experiments": "ddesys.experiments"}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):   # the real module is already executed
        pass

    def _real_loader(self):
        return importlib.util.find_spec(self.target).loader

    def get_code(self, fullname):    # ``python -m <old>.<sub>`` runs the real module's code
        return self._real_loader().get_code(self.target)

    def is_package(self, fullname):
        return self._real_loader().is_package(self.target)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Maps ``<old>.<sub>`` to ``ddesys.<old>.<sub>`` for the old names that were imported."""

    def __init__(self):
        self.active = set()

    def find_spec(self, fullname, path=None, target=None):
        head = fullname.split(".", 1)[0]
        if head not in self.active or "." not in fullname:
            return None
        real = NEW[head] + fullname[len(head):]
        found = importlib.util.find_spec(real)
        if found is None:
            return None
        spec = importlib.util.spec_from_loader(fullname, _AliasLoader(real), origin=found.origin,
                                               is_package=found.submodule_search_locations is not None)
        spec.has_location = found.has_location          # runpy sets argv[0] from it
        return spec


_FINDER = _AliasFinder()


def alias(old, stacklevel=3):
    """Make the old top-level package name ``old`` an alias of ``ddesys.<old>`` (with a warning).

    Called from the package's ``__init__`` when it runs under its old name. Returns the real package.
    """
    warnings.warn(f"`import {old}` is deprecated: the package is now `{NEW[old]}` (e.g. "
                  f"`from ddesys import {old}`); the old name will be removed in a future release",
                  DeprecationWarning, stacklevel=stacklevel)
    real = importlib.import_module(NEW[old])
    for name, mod in list(sys.modules.items()):
        if name == NEW[old] or name.startswith(NEW[old] + "."):
            sys.modules[old + name[len(NEW[old]):]] = mod
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    _FINDER.active.add(old)
    return real


class _SourceFinder(importlib.abc.MetaPathFinder):
    """In a source checkout that was not installed (``PYTHONPATH=.``, a copied working tree), finds
    ``ddesys.nn`` etc. in the folders beside ``ddesys/``. Last in ``sys.meta_path``: an installed layout
    (regular or editable) always wins."""

    def __init__(self, root):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        head, _, sub = fullname.partition(".")
        if head != "ddesys" or sub not in ("nn", "gpu", "verification", "experiments"):
            return None
        init = self.root / sub / "__init__.py"
        if not init.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])


def install_source_finder(package_file):
    """Called by ``ddesys/__init__.py``: in a source checkout (``pyproject.toml`` beside ``ddesys/``),
    append :class:`_SourceFinder` so the subpackages import without an install."""
    from pathlib import Path
    root = Path(package_file).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "nn" / "__init__.py").is_file():
        if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
            sys.meta_path.append(_SourceFinder(root))
