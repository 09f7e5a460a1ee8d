"""Multi-process data parallelism for the experiment CLIs: PyTorch's distributed engine
(``torch.distributed``, ``DistributedDataParallel``), launched by ``torchrun``.

    torchrun --standalone --nproc_per_node=2 -m experiments.synthetic ...           # one machine
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 \\
        --rdzv_id=ds4d -m experiments.synthetic --device cuda ...                    # every node, same line

Without torchrun's environment (``WORLD_SIZE`` unset or 1) everything here is a no-op on one process.
Backend: gloo on the CPU, NCCL on CUDA (one GPU per process, ``cuda:LOCAL_RANK``). Every rank draws the
same global batch and trains on its slice (:meth:`Ctx.shard`); losses are summed and divided by the
global batch's count, so the averaged gradient equals one process's on the whole batch. Rank 0 alone
reads and writes files; it broadcasts what the others need.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class Ctx:
    """Where this process stands: ``rank`` of ``world`` processes, its ``device`` and the ``backend``
    (``None`` on a single process)."""
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None

    @property
    def main(self):
        return self.rank == 0

    def describe(self):
        """How the run was launched, for results files."""
        return {"world_size": self.world, "backend": self.backend or "none"}

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank (any picklable object)."""
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj):
        """``[obj of rank 0, obj of rank 1, ...]`` on every rank."""
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def all_reduce_(self, tensor):
        """Sum ``tensor`` over the ranks, in place."""
        if self.world > 1:
            dist.all_reduce(tensor)
        return tensor

    def barrier(self):
        if self.world > 1:
            dist.barrier()

    def shard(self, n):
        """``(start, stop)`` of this rank's slice of ``n`` items (sizes differ by at most one; a rank may
        get none when ``n < world``)."""
        q, r = divmod(n, self.world)
        start = self.rank * q + min(self.rank, r)
        return start, start + q + (self.rank < r)

    def wrap(self, model):
        """``model`` inside ``DistributedDataParallel`` when there are several ranks."""
        if self.world == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def close(self):
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def launched():
    """Whether this process was started by torchrun with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(device=None):
    """The :class:`Ctx` of this process; under torchrun, joins the process group (gloo on the CPU,
    NCCL on CUDA). ``device``: ``"cpu"``, ``"cuda"`` or ``None`` (CUDA when available)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if not launched():
        return Ctx(device=device)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend)
    return Ctx(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local, device=device, backend=backend)


def single(device="cpu"):
    """A one-process :class:`Ctx` on ``device`` (for direct calls of the training functions)."""
    return Ctx(device=torch.device(device))


__all__ = ["Ctx", "launched", "setup", "single"]
