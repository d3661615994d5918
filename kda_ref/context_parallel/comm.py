"""The collectives a context-parallel prefill needs, behind one small interface, with byte counts.

A rank only ever all-gathers (KCP's maps, the short-conv tails, MLA's latent rows), as fla's
``fla/ops/cp/comm.py`` and SGLang's ``kda_cp.py`` do (``dist.all_gather_into_tensor``).
:class:`DistGroup`: ``torch.distributed`` between processes (gloo on CPUs, nccl on GPUs);
:class:`ThreadGroup`: ``R`` ranks as threads of one process, a barrier per collective. Both run every
collective under a timeout (a dead or hung peer is an error, never a hang) and count ``sent_bytes``
(a rank's own tensors, once per collective). Design notes: ``docs/context_parallel.md#the-collectives``.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import torch
import torch.distributed as dist


class CollectiveError(RuntimeError):
    """A collective could not complete: a peer died (its connection closed), hung past the timeout, or raised."""


class DistGroup:
    """The default ``torch.distributed`` process group of this rank."""

    def __init__(self, timeout: timedelta):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.timeout = timeout
        self.sent_bytes = 0

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        t = t.contiguous()
        self.sent_bytes += t.numel() * t.element_size()
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        try:
            dist.all_gather(out, t)
        except RuntimeError as err:  # gloo: a dead peer (its connection closed) at once, a late one after the timeout
            raise CollectiveError(f"rank {self.rank}: all_gather failed ({err})") from err
        return out


class ThreadGroup:
    """``world_size`` ranks in threads of one process; :meth:`rank_view` gives each its handle."""

    def __init__(self, world_size: int, timeout: timedelta = timedelta(seconds=60)):
        self.world_size = world_size
        self.timeout = timeout.total_seconds()
        self._barrier = threading.Barrier(world_size)
        self._slots: list[torch.Tensor | None] = [None] * world_size

    def rank_view(self, rank: int) -> "_ThreadRank":
        return _ThreadRank(self, rank)

    def abort(self) -> None:
        """Break the barrier: every rank waiting in a collective raises at once."""
        self._barrier.abort()


class _ThreadRank:
    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.rank, self.world_size = group, rank, group.world_size
        self.sent_bytes = 0

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        g = self.group
        self.sent_bytes += t.numel() * t.element_size()
        g._slots[self.rank] = t.contiguous()
        try:
            g._barrier.wait(g.timeout)  # everyone has written
            out = [x.clone() for x in g._slots]
            g._barrier.wait(g.timeout)  # everyone has read: the slots may be reused
        except threading.BrokenBarrierError as err:
            raise CollectiveError(f"rank {self.rank}: a peer did not reach the all_gather within "
                                  f"{g.timeout:g} s") from err
        return out
