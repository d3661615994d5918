"""The transfer engine's boundary: registered buffers, byte ranges moved between them, a status.

Article concept ``pd.state_transfer`` (``docs/article.md#s4-4``, ``#s5-6``). :class:`TransferEngine`
declares the boundary of Mooncake's Transfer Engine as SGLang uses it (``register_memory``,
``batch_transfer_sync_write``): ``register`` / ``unregister``, ``batch_write``, and ``status``, which mirrors
Mooncake's ``transfer_check_status`` (SGLang transfers synchronously and polls none). Which regions to send,
and what to do when a transfer fails, is the serving engine's job (:mod:`kda_ref.disagg.handoff`).
:class:`LocalTransferEngine` moves bytes within one process and can damage a transfer on request, so the serving
side's checks can be tested.
Design notes: ``docs/disaggregation.md#where-the-transfer-engines-job-ends``.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum

import torch


class TransferStatus(Enum):
    """Mooncake's ``transfer_check_status`` codes."""

    DONE = 1
    PENDING = 0
    FAILED = -1
    TIMEOUT = -2


@dataclass(frozen=True)
class Region:
    """``length`` bytes from ``src`` (a local registered buffer) at ``src_offset`` to the peer's ``dst``
    at ``dst_offset``."""

    src: str
    src_offset: int
    dst: str
    dst_offset: int
    length: int


class TransferEngine(ABC):
    """What a transfer engine is here: it registers buffers, moves byte ranges (:meth:`batch_write`),
    reports a status -- ``DONE``, ``PENDING`` (still moving), ``FAILED``, ``TIMEOUT``. It never decides
    what to send. :class:`LocalTransferEngine` (one process) writes into a peer's registered buffers
    directly; :class:`~kda_ref.disagg.dist.DistTransferEngine` sends over ``torch.distributed``, where
    the receiving side also posts a receive and polls it (its own ``post_receive``: a two-sided
    transport's other half, which a one-sided RDMA write does not have)."""

    def __init__(self):
        self.buffers: dict[str, torch.Tensor] = {}  # registered name -> its bytes
        self._status: dict[int, TransferStatus] = {}  # batch id -> where it stands, kept until free_batch
        self._ids = itertools.count()  # batch ids

    @abstractmethod
    def register(self, name: str, buf: torch.Tensor) -> None:
        """Make ``buf`` reachable as ``name``, seen as raw bytes."""

    @abstractmethod
    def unregister(self, name: str) -> None:
        """Forget ``name`` (its bytes are no longer reachable)."""

    @abstractmethod
    def batch_write(self, peer: str | int, regions: list[Region], tag: int = 0) -> int:
        """Write a batch of byte ranges into ``peer``'s registered buffers; returns the batch's id for
        :meth:`status`. Each :class:`Region` moves ``length`` bytes from this engine's registered
        ``src`` at ``src_offset`` to the peer's registered ``dst`` at ``dst_offset``; the batch is done
        when every range was written (``DONE``) and failed as a whole otherwise. ``peer``: the other
        engine as this implementation names it (a name in one process, a ``torch.distributed`` rank);
        ``tag`` tells this batch apart where the peer posts a matching receive (``0``: none, ignored by
        one-sided transports). Mooncake's ``batch_transfer_sync_write``, which SGLang's
        ``mooncake/conn.py::MooncakeKVManager`` calls per prefill chunk. Design notes:
        ``docs/disaggregation.md#where-the-transfer-engines-job-ends``."""

    @abstractmethod
    def status(self, batch_id: int) -> TransferStatus:
        """Where batch ``batch_id`` stands (an id never issued, or freed, reads ``FAILED``)."""

    def free_batch(self, batch_id: int) -> TransferStatus:
        """Forget a finished batch (Mooncake's ``freeBatchID``) and return its final status: the engine keeps
        nothing per batch after that, so a long-lived worker's memory does not grow with its transfers. A
        batch still ``PENDING``, or one never issued or already freed, is a ``ValueError``."""
        st = self.status(batch_id)
        if st is TransferStatus.PENDING:
            raise ValueError(f"batch_id: batch {batch_id} is still pending")
        if self._status.pop(batch_id, None) is None:
            raise ValueError(f"batch_id: no batch {batch_id} (never issued, or already freed)")
        return st


class LocalTransferEngine(TransferEngine):
    """A transfer engine whose peers live in the same process (``peers``: name -> engine)."""

    FAULTS = (None, "corrupt", "drop", "truncate")

    def __init__(self, name: str, peers: dict[str, "LocalTransferEngine"]):
        super().__init__()
        self.name, self.peers = name, peers
        peers[name] = self
        self.fault: str | None = None  # damage the next batch (tests and the page's "break it")
        self.bytes_sent = 0

    def register(self, name: str, buf: torch.Tensor) -> None:
        """Make ``buf`` (contiguous) reachable by peers as ``name``, seen as raw bytes."""
        if not buf.is_contiguous():
            raise ValueError(f"buf: a registered buffer must be contiguous ({name})")
        self.buffers[name] = buf.view(-1).view(torch.uint8)

    def unregister(self, name: str) -> None:
        self.buffers.pop(name, None)

    def batch_write(self, peer: str | int, regions: list[Region], tag: int = 0) -> int:
        """Copy ``regions`` into the buffers of the peer named ``peer`` (in ``peers``), done on return;
        ``tag`` is not needed in process (the bytes land in the named buffers directly). An unknown
        peer, or a range outside a registered buffer, fails the batch."""
        bid = next(self._ids)
        target = self.peers.get(peer)
        if target is None:
            self._status[bid] = TransferStatus.FAILED
            return bid
        fault, self.fault = self.fault, None
        try:
            for i, r in enumerate(regions):
                if fault == "drop" and i == len(regions) - 1:
                    continue  # the last region never arrives
                n = r.length // 2 if fault == "truncate" and i == len(regions) - 1 else r.length
                src = self.buffers[r.src][r.src_offset:r.src_offset + n]
                dst = target.buffers[r.dst][r.dst_offset:r.dst_offset + n]
                if src.numel() != n or dst.numel() != n:
                    raise IndexError(f"region {i} ({r.src} -> {r.dst}) is outside a registered buffer")
                dst.copy_(src)
                self.bytes_sent += n
                if fault == "corrupt" and i == 0:
                    dst[n // 2] ^= 0x40  # one flipped bit on the wire
        except (KeyError, IndexError):
            self._status[bid] = TransferStatus.FAILED
            return bid
        self._status[bid] = TransferStatus.DONE  # a dropped or cut region is not the engine's to notice
        return bid

    def status(self, batch_id: int) -> TransferStatus:
        return self._status.get(batch_id, TransferStatus.FAILED)
