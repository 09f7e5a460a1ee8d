"""What a stored record must hold, checked before any work: every field an experiment's report reads,
each of its type.

Standard library only (the CLIs check their results files before importing torch). A record that fails
is named with its file, its index and key, the field, the value found and the type expected
(:class:`ResultsError`), so a report never meets a value it cannot format after a run has trained.
"""
from __future__ import annotations

import reprlib
from dataclasses import dataclass, field
from typing import Mapping


class ResultsError(Exception):
    """An existing results file that cannot be merged with (corrupt, foreign or malformed)."""


def program_of(experiment):
    """The ``program`` a results file of ``experiment`` names: ``ddesys.experiments.<experiment>``."""
    return f"ddesys.experiments.{experiment}"


#: type names of :class:`RunSchema` (``"int|null"``: either), with the test and the phrase of each
_TYPES = {
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "null": (lambda v: v is None, "null"),
}
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxdict, _SHORT.maxlist = 60, 60, 4, 6


def _kind(value):
    """How a JSON value is called in messages (``'0.9' (a string)``)."""
    for name in ("bool", "null", "int", "number", "str", "dict", "list"):
        test, phrase = _TYPES[name]
        if test(value):
            return phrase
    return type(value).__name__


def type_error(where, name, value, spec):
    """``ResultsError`` ``<where>: field 'name' is <value> (<kind>), expected <spec's phrase>``, or ``None``
    when ``value`` is of type ``spec``."""
    names = spec.split("|")
    unknown = [n for n in names if n not in _TYPES]
    if unknown:
        raise ValueError(f"unknown type name(s) {unknown} in {spec!r}; known: {sorted(_TYPES)}")
    if any(_TYPES[n][0](value) for n in names):
        return None
    return ResultsError(f"{where}: field {name!r} is {_SHORT.repr(value)} ({_kind(value)}), expected "
                        f"{' or '.join(_TYPES[n][1] for n in names)}")


@dataclass(frozen=True)
class RunSchema:
    """The fields a stored run must have, and their types.

    ``fields`` in every run, ``done`` in finished ones as well, ``curve`` in every item of the run's
    ``points`` list (``"curve"``: the learning curve; ``"rows"`` for a benchmark's table rows); an entry
    that is a tuple of names needs one of them (e.g. ``("best_acc", "best_rmse")``: a classification or a
    regression run). ``types`` (run fields) and ``point_types`` (fields of the points) give a field's type
    by name (``"number"``, ``"int"``, ``"str"``, ``"bool"``, ``"dict"``, ``"list"``, ``"null"``, joined
    with ``|``); a ``done`` or ``curve`` field without one must be a number, ``config`` an object, ``key``
    and ``status`` strings, ``points`` a list. A field given in ``types`` alone is optional and checked
    when present. A diverged run may hold ``null`` in its ``done`` fields (it stopped before them).
    :meth:`check` raises :class:`ResultsError` naming the file, the run, the field, the value and the type."""
    fields: tuple = ("config", "curve")
    done: tuple = ()
    curve: tuple = ()
    types: Mapping = field(default_factory=dict)
    point_types: Mapping = field(default_factory=dict)
    points: str = "curve"

    def type_of(self, name):
        """The type of run field ``name`` (``None``: any)."""
        base = {"config": "dict", "key": "str", "status": "str", self.points: "list"}
        if name in self.types:
            return self.types[name]
        if name in base:
            return base[name]
        return "number" if name in self.names("done") else None

    def check(self, run, i, path):
        name = f"{path}: run {i}" + (f" ({run['key']})" if isinstance(run.get("key"), str) else "")
        status = run.get("status", "done")
        if status not in ("done", "diverged"):
            raise ResultsError(f"{name}: status {status!r} is neither 'done' nor 'diverged'")
        for f in self.fields + (self.done if status == "done" else ()):
            if not _has(run, f):
                raise ResultsError(f"{name} has no field {_name(f)}")
        loose = self.names("done") if status == "diverged" else set()     # null allowed: stopped before them
        for f in ["config", "key", "status", self.points, *sorted(self.names("fields") | self.names("done")
                                                                  | set(self.types))]:
            spec = self.type_of(f)
            if f in run and spec is not None and not (run[f] is None and f in loose):
                err = type_error(name, f, run[f], spec)
                if err is not None:
                    raise err
        for j, point in enumerate(run.get(self.points, [])):
            where = f"{name}: {'curve' if self.points == 'curve' else self.points} point {j}"
            if not isinstance(point, dict):
                if self.curve or self.point_types:
                    raise ResultsError(f"{where} is {_SHORT.repr(point)} ({_kind(point)}), expected an object")
                continue
            missing = [f for f in self.curve if not _has(point, f)]
            if missing:
                raise ResultsError(f"{where} has no field {_name(missing[0])}")
            for f in sorted(self.names("curve") | set(self.point_types)):
                if f in point:
                    err = type_error(where, f, point[f], self.point_types.get(f, "number"))
                    if err is not None:
                        raise err

    def names(self, part):
        """Every field name ``part`` (``"fields"``, ``"done"`` or ``"curve"``) mentions, alternatives included."""
        return {n for f in getattr(self, part) for n in ((f,) if isinstance(f, str) else f)}


def _has(record, name):
    return any(f in record for f in ((name,) if isinstance(name, str) else name))


def _name(name):
    return repr(name) if isinstance(name, str) else " or ".join(map(repr, name))


def check_meta(meta, path):
    """Raise :class:`ResultsError` unless ``meta`` (a results file's ``meta`` block) is an object whose
    ``experiment`` and ``command`` are strings and ``commands`` a list of strings (when present): a
    malformed block is refused, never replaced."""
    err = type_error(f"{path}", "meta", meta, "dict")
    if err is not None:
        raise err
    for key, spec in (("experiment", "str"), ("command", "str"), ("commands", "list")):
        if key in meta:
            err = type_error(f"{path}: 'meta'", key, meta[key], spec)
            if err is not None:
                raise err
    bad = [c for c in meta.get("commands", []) if not isinstance(c, str)]
    if bad:
        raise ResultsError(f"{path}: 'meta': field 'commands' holds {_SHORT.repr(bad[0])} ({_kind(bad[0])}), "
                           "expected a list of strings")


__all__ = ["ResultsError", "RunSchema", "check_meta", "program_of", "type_error"]
