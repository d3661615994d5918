"""The watcher's model of a server's prefix cache: a forest of blocks per (rank, group), from its events.

Every ``BlockStored`` adds its blocks -- each hash with its parent (the previous hash of the event, or
``parent_block_hash`` for the first), its tokens (``block_size`` of ``token_ids`` each, the last block
possibly shorter) and the group's kind; ``BlockRemoved`` drops the hashes it names; ``AllBlocksCleared``
empties every group of its rank. A block whose parent is not in its group is a root of that group's forest
(the first block of a prefix, or a sparse state block whose prefix lives in the KV group). Nothing here
knows which engine sent the events: :mod:`.wire` made them one shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .wire import Cleared, Removed, Stored


@dataclass
class Node:
    parent: object
    tokens: tuple


@dataclass
class Group:
    """One (rank, group) of the server: its kind (None when the engine does not say: SGLang), the block size
    its events named, and its blocks by hash."""

    kind: str | None = None
    block_size: int | None = None
    blocks: dict = field(default_factory=dict)


@dataclass
class Counts:
    batches: int = 0
    stored: int = 0
    removed: int = 0
    cleared: int = 0
    replayed: int = 0
    lost: int = 0
    restarts: int = 0
    unknown_removed: int = 0  # BlockRemoved of a hash the forest did not hold (it started late)
    decode_errors: int = 0


class Forest:
    """Every group of every rank the events spoke of (module docstring)."""

    def __init__(self):
        self.groups: dict[tuple[int, int | None], Group] = {}
        self.counts = Counts()

    def group(self, rank: int, group: int | None) -> Group:
        return self.groups.setdefault((rank, group), Group())

    def apply(self, batch, replayed: bool = False) -> None:
        """One decoded :class:`~kda_ref.kv_events.wire.Batch` (``replayed``: it came from the replay socket)."""
        rank = batch.rank or 0
        self.counts.batches += 1
        self.counts.replayed += replayed
        for ev in batch.events:
            if isinstance(ev, Stored):
                self._store(rank, ev)
            elif isinstance(ev, Removed):
                g = self.group(rank, ev.group)
                for h in ev.block_hashes:
                    self.counts.unknown_removed += g.blocks.pop(h, None) is None
                self.counts.removed += len(ev.block_hashes)
            elif isinstance(ev, Cleared):
                for (r, _), g in self.groups.items():
                    if r == rank:
                        g.blocks.clear()
                self.counts.cleared += 1

    def _store(self, rank: int, ev: Stored) -> None:
        g = self.group(rank, ev.group)
        g.kind = ev.kind or g.kind
        g.block_size = ev.block_size
        parent, bs = ev.parent, ev.block_size
        for i, h in enumerate(ev.block_hashes):
            g.blocks[h] = Node(parent, tuple(ev.token_ids[i * bs:(i + 1) * bs]))
            parent = h
        self.counts.stored += len(ev.block_hashes)

    def reset(self, rank: int) -> None:
        """Rank ``rank``'s publisher restarted (its sequence went back to 0): what it held is gone with it."""
        for key in [k for k in self.groups if k[0] == rank]:
            del self.groups[key]
        self.counts.restarts += 1

    def summary(self) -> list[dict]:
        """``[{"rank", "group", "kind", "blocks", "block_size"}]``, by rank and group."""
        return [{"rank": r, "group": gi, "kind": g.kind, "blocks": len(g.blocks), "block_size": g.block_size}
                for (r, gi), g in sorted(self.groups.items(), key=lambda kv: (kv[0][0], kv[0][1] is None,
                                                                              kv[0][1] or 0))]

    def as_index(self, rank: int = 0) -> dict:
        """``{group: {hash: (parent, tokens)}}`` of one rank (the property test compares it with a cache's
        own :class:`~kda_ref.kv_events.index.BlockIndex`)."""
        return {gi: {h: (n.parent, n.tokens) for h, n in g.blocks.items()}
                for (r, gi), g in self.groups.items() if r == rank}
