"""Streaming one handoff: MLA KV rows with each prefill chunk, the KDA states only at the boundary.

Article concept ``pd.state_transfer`` (``docs/article.md#s4-4``); as SGLang's ``prefill.py::send_kv_chunk``.
:class:`Outbound` is the prefill side's record of one request being handed off: which KV rows left
already (``sent_upto``), and what the last send still has to carry (:meth:`Outbound.final`).
:func:`pack` lays a list of pieces into one staging buffer for the transfer engine.
Design notes: ``docs/disaggregation.md#when-the-state-can-be-sent``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..memory import UnifiedMemoryPool
from .handoff import Manifest, capture, crc, kv_rows, unsent

Piece = tuple[int, torch.Tensor]  # (offset in the handoff's layout, bytes)


@dataclass
class Outbound:
    boundary: int  # the prompt's length: where the states will be final
    sent_upto: int = 0  # KV rows [0, sent_upto) have been sent
    early_sends: int = 0  # sends before the boundary was final
    early_bytes: int = 0
    last_rows: tuple[int, int] = (0, 0)  # the KV rows the latest chunk() sent
    preemptions: int = 0  # the request's preemptions when its rows were last sent
    # running CRC-32 of the rows sent so far, per MLA layer: the manifest describes the bytes the decode
    # side holds, even if the request's pages were swapped since (a prefix cache sharing an equal prefix
    # computed elsewhere, whose rows may differ in the last bits)
    crc: dict[int, int] = field(default_factory=dict)

    def chunk(self, pool: UnifiedMemoryPool, req) -> list[Piece]:
        """The KV rows ``req`` computed since the last send, whole pages only (the last partial page
        waits: the next chunk writes into it); empty when there is nothing new. A request preempted and
        recomputed from the start sends its rows again."""
        self._restarted(req)
        done = req.num_computed_tokens
        page = pool.tensors.page_size
        upto = min(done, self.boundary) // page * page
        if upto <= self.sent_upto:
            return []
        pieces = kv_rows(pool, req, self.boundary, self.sent_upto, upto)
        for layer, (_, b) in zip(pool.tensors.mla_index, pieces):
            self.crc[layer] = crc(b, self.crc.get(layer, 0))
        self.last_rows, self.sent_upto = (self.sent_upto, upto), upto
        self.early_sends += 1
        self.early_bytes += sum(b.numel() for _, b in pieces)
        return pieces

    def _restarted(self, req) -> None:
        """A preempted request recomputes its rows (possibly in other chunks: other float sums): the
        rows sent before count for nothing."""
        n = req.num_preemptions
        if n != self.preemptions or req.num_computed_tokens < self.sent_upto:
            self.preemptions, self.sent_upto, self.crc = n, 0, {}

    def final(self, pool: UnifiedMemoryPool, req) -> tuple[list[Piece], Manifest]:
        """The last send: every state and conv window (now final) and the KV rows not sent yet; and the
        manifest with every region's checksum (over all rows, so a damaged early chunk is caught too)."""
        self._restarted(req)
        # each KV region's checksum: the rows sent early (their running CRC), then the rest
        staging, man = capture(pool, req, self.boundary, (self.sent_upto, self.crc) if self.sent_upto else None)
        return [(off, staging[off:off + n]) for off, n in unsent(man, self.sent_upto)], man


def pack(pieces: list[Piece]) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
    """One staging buffer holding ``pieces`` back to back, and ``(staging offset, handoff offset,
    bytes)`` per piece."""
    spans, at = [], 0
    for off, b in pieces:
        spans.append((at, off, b.numel()))
        at += b.numel()
    staging = torch.cat([b for _, b in pieces]) if pieces else torch.zeros(0, dtype=torch.uint8)
    return staging, spans
