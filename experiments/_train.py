"""The optimization step, the run loop and the sweep loop shared by the experiments.

:class:`Trainer` owns one run's (DDP-wrapped) model, optimizer and scheduler: a step takes the global
batch, trains this rank on its slice under optional bf16 autocast, sums the loss over the ranks (with
the stop flag, so every rank stops at the same step) and refuses a non-finite loss before touching the
weights (:class:`~experiments._ckpt.Diverged`; so are weights that the step left non-finite, and a value
a layer refused for being NaN or inf). :func:`fit` is one run's loop around it: resume,
batches, evaluation cadence, checkpoints, the divergence record and a clean stop; an experiment supplies
its batches, its evaluation and its record. :func:`run_sweep` runs a list of jobs: it resumes from
checkpoints, records diverged runs and goes on, stops cleanly on SIGINT / SIGTERM, and has rank 0 save
the results after every run.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

import numpy as np

from ._ckpt import STOP, Diverged, Interrupted, non_finite_error, non_finite_tensors, rng_state, set_rng_state


class Trainer:
    """``model`` (unwrapped; :attr:`model` is the DDP wrapper under torchrun), ``opt``, optional
    ``sched`` (stepped after every optimizer step): one scheduler, or a list / tuple of them (stepped in
    order, e.g. a learning-rate schedule and :class:`nn.TapWidthSchedule`), ``amp`` in ``none | bf16``.
    Any object with ``step()``, ``state_dict()`` and ``load_state_dict()`` is a scheduler."""

    def __init__(self, model, opt, ctx, sched=None, amp="none", stop=STOP):
        if amp not in ("none", "bf16"):
            raise ValueError(f"amp must be 'none' or 'bf16', got {amp!r}")
        self.raw, self.opt, self.sched, self.ctx, self.stop = model, opt, sched, ctx, stop
        self._many = isinstance(sched, (list, tuple))
        self.scheds = list(sched) if self._many else [] if sched is None else [sched]
        self.amp = amp == "bf16"
        self.model = ctx.wrap(model)
        if ctx.rank:                                     # independent dropout masks on every rank
            torch.manual_seed(torch.initial_seed() + 7919 * ctx.rank)

    def step(self, x, y, loss_sum, n, step):
        """One optimizer step on the global batch ``x``, ``y`` (NumPy arrays, identical on every rank).
        ``loss_sum(logits, targets)``: the loss summed over a slice; ``n``: the global batch's count
        (samples, or supervised tokens) that turns the sum into a mean. Returns ``(mean loss, stop)``."""
        dev = self.ctx.device
        a, b = self.ctx.shard(len(x))
        weight = 1.0
        if a == b:                                       # fewer samples than ranks: join the collectives, add 0
            a, b, weight = 0, 1, 0.0
        xs, ys = torch.from_numpy(x[a:b]).to(dev), torch.from_numpy(y[a:b]).to(dev)
        try:
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.amp):
                out = self.model(xs)
            local = loss_sum(out.float(), ys) * weight
        except (FloatingPointError, ValueError) as exc:  # a layer refused NaN/inf (inputs, parameters or a
            if not non_finite_error(exc):                # value between them, e.g. a learned clock): the loss
                raise                                    # is not finite; every rank still joins the reduce
            local = torch.tensor(math.nan, device=dev)
        stop = self.stop.poll(step, self.ctx.rank)
        stats = torch.stack([local.detach().to(torch.float64),
                             torch.tensor(float(stop), dtype=torch.float64, device=local.device)])
        total, stop = self.ctx.all_reduce_(stats).tolist()
        mean = total / n
        if not math.isfinite(mean):
            raise Diverged(f"loss became {mean} at step {step}", step)
        self.opt.zero_grad(set_to_none=True)
        (local * (self.ctx.world / n)).backward()        # DDP averages over ranks: the global mean's gradient
        self.opt.step()
        for sched in self.scheds:
            sched.step()
        return mean, stop > 0

    def weights_finite(self):
        """Whether every weight is finite (one reduction per parameter and one synchronization: checked
        before a checkpoint is written and at the run's end, not every step; a non-finite weight makes the
        next step's loss non-finite anyway)."""
        params = [p.detach() for p in self.raw.parameters()]
        return not params or bool(torch.stack([torch.isfinite(p).all() for p in params]).all())

    def state_dict(self):
        """Model, optimizer, scheduler(s) and every rank's RNG states (a collective under torchrun).
        ``scheduler``: ``None`` (none), one state dict (one scheduler) or a list (a list of them)."""
        scheds = [sc.state_dict() for sc in self.scheds]
        return {"model": self.raw.state_dict(), "optimizer": self.opt.state_dict(),
                "scheduler": scheds if self._many else scheds[0] if scheds else None,
                "rng": self.ctx.gather(rng_state()), "world_size": self.ctx.world}

    def load_state_dict(self, s):
        """Restore :meth:`state_dict`'s output; the schedulers must be the ones it was saved with."""
        self.raw.load_state_dict(s["model"])
        self.opt.load_state_dict(s["optimizer"])
        saved = s.get("scheduler")
        if saved is not None and self.scheds:
            saved = saved if isinstance(saved, list) else [saved]
            if len(saved) != len(self.scheds):
                raise ValueError(f"checkpoint has {len(saved)} scheduler states, the run has {len(self.scheds)}")
            for sched, state in zip(self.scheds, saved):
                sched.load_state_dict(state)
        rngs = s["rng"]
        set_rng_state(rngs[self.ctx.rank] if self.ctx.rank < len(rngs) else rngs[0])


def fit(tr, st, total, batch, loss_sum, evaluate, record, key, ckpt=None, progress=None, extra=None,
        where=None):
    """One run's training loop; returns ``record("done")``.

    ``tr``: the run's :class:`Trainer`. ``st``: the run's state, JSON-ready, with at least ``step`` (0),
    ``losses`` ([]) and ``seconds`` (0.0) beside the experiment's own fields (curve, bests); it is saved
    in the checkpoints and restored from them. ``batch(step) -> (x, y, n)``: the global batch of
    optimizer step ``step`` (1-based) and the count that turns its summed loss into a mean.
    ``evaluate(step, mean_loss)``: called after every step; when it evaluates it records what it found in
    ``st`` and returns the progress figures (a dict; the training losses since the last evaluation are
    then cleared), else ``None``. ``record(status)``: the run's results record (``st["seconds"]`` is
    current when it is called). ``extra``: ``(save() -> dict, load(saved))`` for checkpoint content
    beyond the trainer and ``st``. ``where(step) -> (text, fields)``: how a divergence names its place
    (the text replaces "at step"; the fields join the record).

    A non-finite loss or weights, or a NaN / inf the model or the evaluation refuses
    (:func:`~experiments._ckpt.non_finite_error`), raises :class:`~experiments._ckpt.Diverged` whose
    ``record`` is the run so far (``status: diverged``, ``diverged_step``); so does a checkpoint whose
    weights or saved extra state (e.g. the best-so-far weights) hold NaN or inf, instead of a crash at the
    run's end. A stop request saves a checkpoint and raises :class:`~experiments._ckpt.Interrupted`."""
    t0, s0 = time.perf_counter(), st["seconds"]

    def diverged(message, step):
        st["seconds"] = s0 + time.perf_counter() - t0
        text, fields = where(step) if where is not None else ("at step", {})
        err = Diverged(f"{key}: {message.replace('at step', text)}", step)
        err.record = {**record("diverged"), "diverged_step": step, **fields}
        return err

    saved = ckpt.load() if ckpt is not None else None
    if saved is not None:
        tr.load_state_dict(saved["trainer"])
        st.update(saved["run"])
        if extra is not None:
            extra[1](saved)
        t0, s0 = time.perf_counter(), st["seconds"]
        bad = non_finite_tensors({"weights": saved["trainer"]["model"],
                                  **{k: v for k, v in saved.items() if k not in ("trainer", "run", "key", "format")}})
        if bad:
            raise diverged(f"the checkpoint {ckpt.path} holds NaN or inf ({', '.join(bad[:3])}"
                           f"{', ...' if len(bad) > 3 else ''}) at step {st['step']}", st["step"])
    for step in range(st["step"] + 1, total + 1):
        x, y, n = batch(step)
        try:
            loss, stop = tr.step(x, y, loss_sum, n, step)
        except Diverged as exc:
            raise diverged(str(exc), exc.step) from None
        st["losses"].append(loss)
        try:
            shown = evaluate(step, float(np.mean(st["losses"])))
        except (FloatingPointError, ValueError) as exc:
            if not non_finite_error(exc):
                raise
            raise diverged(f"the evaluation after step {step} refused a NaN or inf ({exc})", step) from None
        if shown is not None:
            st["losses"] = []
            if progress is not None:
                progress(step, **shown)
        st["step"], st["seconds"] = step, s0 + time.perf_counter() - t0
        save = ckpt is not None and (stop or ckpt.due(step, total))
        if (save or step == total) and not tr.weights_finite():       # identical on every rank
            raise diverged(f"the weights became NaN or inf at step {step}", step)
        if save:
            ckpt.save({"trainer": tr.state_dict(), "run": st, **(extra[0]() if extra is not None else {})})
        if stop:
            raise Interrupted(key, step, tr.stop.signum or 2, ckpt.path if ckpt is not None else None)
    return record("done")


@dataclass
class Job:
    """One run of a sweep: ``fn(ckpt=, progress=, ctx=)`` returns its JSON-ready record."""
    key: str
    label: str
    total: int
    fn: Callable


def _run_job(job, store, ckpts, ctx, resume, show, say, on_saved):
    """One job of :func:`run_sweep` (its claim held): 0, or ``128 + signal`` when it was stopped."""
    from tqdm.auto import tqdm
    if not resume:
        ckpts.remove(job.key)
    elif ctx.main and ckpts.path(job.key).exists():
        say(f"resuming {job.label} from {ckpts.path(job.key)}")
    bar = tqdm(total=job.total, desc=job.label, leave=False, disable=not show)

    def progress(step, bar=bar, **post):
        bar.update(step - bar.n)
        bar.set_postfix({k: f"{v:.3f}" for k, v in post.items()})
    try:
        run = job.fn(ckpt=ckpts.handle(job.key), progress=progress, ctx=ctx)
    except Diverged as exc:
        if exc.record is None:
            raise
        run = exc.record
        kept = ckpts.path(job.key)
        kept = f"last good checkpoint kept: {kept}" if kept.exists() else "no checkpoint written yet"
        say(f"\n{exc}: recorded as diverged ({kept}); going on with the next run")
    except Interrupted as exc:
        say(f"\n{exc}. Rerun the same command to resume.")
        return 128 + int(exc.signum)
    finally:
        bar.close()
    run.update(ctx.describe())
    if ctx.main:
        store.put(run)
        if on_saved is not None:
            on_saved()
    if run.get("status", "done") == "done" and not ckpts.keep:
        ckpts.remove(job.key)
    return 0


def run_sweep(jobs, store, ckpts, ctx, resume=True, quiet=False, on_saved=None, log=print):
    """Run ``jobs`` in order; rank 0 records each in ``store`` (then calls ``on_saved()``). A diverged run
    is recorded (``status: diverged``, its last good checkpoint kept) and the sweep goes on. SIGINT /
    SIGTERM: the running job checkpoints and the sweep returns ``128 + signal`` (rerun to resume). Checkpoint
    paths that cannot be written raise :class:`~experiments._runs.OutError` before any job starts."""
    from tqdm.auto import tqdm
    ckpts.check([job.key for job in jobs])           # before the first step: an unusable folder fails now
    show = not quiet and ctx.main
    say = log if ctx.main else (lambda *a, **k: None)
    outer = tqdm(total=len(jobs), desc="runs", disable=not show)
    with STOP:
        for job in jobs:
            flag = torch.tensor([float(STOP.signum is not None)], device=ctx.device)
            if ctx.all_reduce_(flag).item() > 0:         # a signal between runs: stop before the next one
                say(f"\nstopped before {job.label}. Rerun the same command to go on.")
                return 128 + int(STOP.signum or 2)
            with ckpts.claim(job.key) as mine:
                if not mine:
                    say(f"skipping {job.label}: another process is training it now (its result goes to {store.path} "
                        "when it finishes)")
                elif resume and ctx.broadcast(store.recorded(job.key) if ctx.main else None):
                    say(f"skipping {job.label}: another process recorded it while this sweep ran")
                else:
                    code = _run_job(job, store, ckpts, ctx, resume, show, say, on_saved)
                    if code:
                        return code
            outer.update(1)
    outer.close()
    return 0


__all__ = ["Job", "Trainer", "fit", "run_sweep"]
