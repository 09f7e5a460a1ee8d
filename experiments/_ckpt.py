"""Checkpoints and interruption for the experiment runs.

A checkpoint is one ``torch.save`` file per run (``OUT/checkpoints/<run key>.pt``), written atomically
every N optimizer steps and when SIGINT / SIGTERM arrives, holding only tensors and plain containers
(loadable with ``torch.load(..., weights_only=True)``): model, optimizer (and scheduler) state, every
RNG state (torch CPU, CUDA, NumPy's and Python's global generators; one set per rank), the step, the
best-so-far state and the learning curve. Data streams are drawn from generators seeded by
``(seed, step)`` or ``(seed, epoch)``, so the step count fixes them. A resumed run repeats the
uninterrupted one's arithmetic: on the CPU its final weights and metrics are bitwise equal.

SIGINT / SIGTERM do not kill a run: the handler sets a flag, the run finishes its step, writes a
checkpoint and stops (:class:`Interrupted`); a second SIGINT stops at once. For tests,
``DDESYS_TEST_SIGNAL_AT_STEP=N`` makes rank 0 send itself SIGINT after step ``N``.
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import re
import signal
import threading
from pathlib import Path

import numpy as np
import torch

from ._runs import OutError, atomic_write, claim_run, move_aside, safe_name

SIGNAL_AT_ENV = "DDESYS_TEST_SIGNAL_AT_STEP"
FORMAT = 1


class Interrupted(Exception):
    """A run stopped by SIGINT / SIGTERM after ``step``; its checkpoint is at ``path``."""

    def __init__(self, key, step, signum, path):
        self.key, self.step, self.signum, self.path = key, step, signum, path
        name = signal.Signals(signum).name if signum else "a signal"
        where = f"checkpoint {path}" if path else "no checkpoint"
        super().__init__(f"{key}: stopped by {name} after step {step}; {where}")


class Diverged(FloatingPointError):
    """A run that went non-finite at ``step``: its loss, its weights after the step, a value a layer or
    the evaluation refused (:func:`non_finite_error`), or the weights of the checkpoint it resumed from.
    ``record``: the run's results so far, marked ``"status": "diverged"``, filled in by the training
    function."""

    def __init__(self, message, step):
        super().__init__(message)
        self.step, self.record = step, None


_NON_FINITE = re.compile(r"(?<![a-z])[-+]?(nan|inf)(?![a-z])", re.IGNORECASE)


def non_finite_error(exc):
    """Whether ``exc`` is a refusal of a non-finite value, what a diverged run produces: a
    ``FloatingPointError`` (the layers' own check of their inputs and parameters), or a ``ValueError`` whose
    message shows a NaN or inf (a check further down, e.g. the soft clock's range check given NaN). Any
    other ``ValueError`` is a misuse or a bug and is not one."""
    if isinstance(exc, FloatingPointError):
        return True
    return isinstance(exc, ValueError) and _NON_FINITE.search(str(exc)) is not None


def non_finite_tensors(obj, prefix=""):
    """The names (``a.b.c``) of the floating or complex tensors in ``obj`` (nested dicts, lists, tensors)
    that hold a NaN or an inf."""
    if isinstance(obj, torch.Tensor):
        bad = (obj.is_floating_point() or obj.is_complex()) and not bool(torch.isfinite(obj).all())
        return [prefix or "tensor"] if bad else []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    return [n for k, v in items for n in non_finite_tensors(v, f"{prefix}.{k}" if prefix else str(k))]


class StopFlag:
    """Process-wide SIGINT / SIGTERM flag; ``with STOP:`` installs the handlers (main thread only)."""

    def __init__(self):
        self.signum, self._old = None, {}

    def _handler(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt                       # second Ctrl-C: stop now
        if self.signum is None:
            self.signum = signum
            if os.environ.get("RANK", "0") == "0":
                print(f"\n{signal.Signals(signum).name}: finishing this step, writing a checkpoint "
                      "(press Ctrl-C again to stop at once)", flush=True)

    def __enter__(self):
        self.signum = None
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
        return False

    def poll(self, step, rank=0):
        """Whether a stop was requested (after the test hook, if set, fired at ``step`` on rank 0)."""
        at = os.environ.get(SIGNAL_AT_ENV)
        if at and rank == 0 and step == int(at) and self._old and self.signum is None:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10000):                        # the Python-level handler runs between bytecodes
                if self.signum is not None:
                    break
        return self.signum is not None


STOP = StopFlag()


# ------------------------------------------------------------------------------------------ RNG states
def rng_state():
    """Every global RNG state of this process as tensors and plain values."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    out = {"torch": torch.get_rng_state(),
           "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                     "gauss": float(gauss)},
           "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": py_gauss}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(s):
    torch.set_rng_state(s["torch"])
    n = s["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = s["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["state"].tolist()), p["gauss"]))
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


# ------------------------------------------------------------------------------------------ files
def _filename(key):
    return safe_name(key) + ".pt"


def _unwritable(folder, files):
    """Why ``files`` in ``folder`` cannot be written, or ``None``."""
    for p in [folder, *folder.parents]:
        if p.exists():
            if not p.is_dir():
                return f"checkpoints: {p} is a file, not a folder"
            if not os.access(p, os.W_OK | os.X_OK):
                return f"checkpoints: {p} is not writable"
            break
    for f in files:
        if f.is_dir():
            return f"checkpoints: {f} is a folder, but a checkpoint file is written there"
    return None


class Checkpoints:
    """The checkpoint folder of a sweep. Rank 0 reads and writes; the others receive what it read.
    ``every``: optimizer steps between checkpoints; ``keep``: also write the final state and keep it."""

    def __init__(self, folder, every, ctx, keep=False, log=print):
        self.folder, self.every, self.ctx, self.keep, self.log = Path(folder), every, ctx, keep, log

    def path(self, key):
        return self.folder / _filename(key)

    def check(self, keys):
        """Raise :class:`OutError` naming the path unless the checkpoints of ``keys`` can be written:
        the folder is a writable folder (or absent, inside a writable one) and no checkpoint's name is
        taken by a folder. Rank 0 looks; every rank gets its verdict (call it on all of them)."""
        problem = None
        if self.ctx.main:
            problem = _unwritable(self.folder, [self.path(k) for k in keys])
        problem = self.ctx.broadcast(problem)
        if problem:
            raise OutError(problem)

    def load(self, key):
        """The checkpoint of ``key`` (``None`` when there is none; an unreadable one is moved aside)."""
        obj = None
        path = self.path(key)
        if self.ctx.main and path.exists():
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True)
                if not isinstance(obj, dict) or obj.get("key") != key or obj.get("format") != FORMAT:
                    raise ValueError("written for another run or by another version")
            except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint: set aside, start over
                new = move_aside(path)
                self.log(f"warning: checkpoint {path} cannot be used ({exc}); moved to {new}, starting over")
                obj = None
        return self.ctx.broadcast(obj)

    def save(self, key, state):
        """Write ``state`` (plus key and format) atomically on rank 0; every rank waits for it."""
        if self.ctx.main:
            self.folder.mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            torch.save({"format": FORMAT, "key": key, **state}, buf)
            atomic_write(self.path(key), buf.getvalue())
        self.ctx.barrier()

    def remove(self, key):
        if self.ctx.main:
            self.path(key).unlink(missing_ok=True)

    @contextlib.contextmanager
    def claim(self, key):
        """Hold the claim on ``key``'s run for the ``with`` block: yields True when this sweep holds it,
        False when another process does (it is training that run now). Rank 0 takes the claim of
        :func:`experiments._store.claim_run` in the sweep's output folder (beside the checkpoints
        folder); every rank gets the verdict."""
        with contextlib.ExitStack() as stack:
            mine = stack.enter_context(claim_run(self.folder.parent, key)) if self.ctx.main else True
            yield bool(self.ctx.broadcast(mine))

    def due(self, step, last):
        """Whether a periodic (or, with ``keep``, final) checkpoint falls after ``step`` of ``last``."""
        return (step % self.every == 0 and step < last) or (self.keep and step == last)

    def handle(self, key):
        return RunCheckpoint(self, key)


class RunCheckpoint:
    """:class:`Checkpoints` bound to one run key."""

    def __init__(self, ckpts, key):
        self.ckpts, self.key = ckpts, key

    @property
    def path(self):
        return self.ckpts.path(self.key)

    def load(self):
        return self.ckpts.load(self.key)

    def save(self, state):
        self.ckpts.save(self.key, state)

    def due(self, step, last):
        return self.ckpts.due(step, last)


__all__ = ["Checkpoints", "Diverged", "Interrupted", "RunCheckpoint", "STOP", "StopFlag", "non_finite_error",
           "non_finite_tensors", "rng_state", "set_rng_state"]
