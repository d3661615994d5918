"""A prefix cache's contents as KV-event blocks, and new blocks as the chains a ``BlockStored`` carries.

What a radix node and a checkpoint become in vLLM's block vocabulary (concept ``kv_events.blocks``): a
**block** is a run of tokens starting at a multiple of ``block_size``, named by a chained 64-bit hash
(``block_hash(parent, tokens)``). Group 0, ``mla_attention``: every *full* block whose MLA KV the cache
holds; group 1, ``mamba``: a block whose **end** carries a cached KDA state (a radix checkpoint's block may
be partial). A whole index is where publishing starts; from then on the cache tells a
:class:`~kda_ref.kv_events.journal.BlockJournal` what changed.

Design notes: ``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

MLA_GROUP, STATE_GROUP = 0, 1
EVENT_BLOCK_SIZE = 16  # tokens a block of a per-token cache (the radix tree) is cut at: vLLM's default block
GROUP_KINDS = {MLA_GROUP: "mla_attention", STATE_GROUP: "mamba"}


def block_hash(parent: int | None, tokens) -> int:
    """A block's 64-bit name (unsigned): blake2b over the parent's name and the block's token ids. Stable
    across processes and restarts (Python's ``hash`` of a tuple is too, but not of every type)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(b"root" if parent is None else parent.to_bytes(8, "big"))
    h.update(b"".join(int(t).to_bytes(4, "big", signed=True) for t in tokens))
    return int.from_bytes(h.digest(), "big")


# the radix tree names a block again when it cuts a node in two or walks a path it walked before
# (cache/radix/kv_blocks.py): a block's name is a pure function of its parent's and its tokens, so the walk
# looks the last ones up instead of hashing
_walk_hash = functools.lru_cache(maxsize=1 << 16)(block_hash)


@dataclass(frozen=True)
class Block:
    parent: int | None
    tokens: tuple
    start: int  # the block's first token position in its prefix


@dataclass
class BlockIndex:
    """``groups[g][hash] -> Block`` and the ``block_size`` its blocks were cut at."""

    block_size: int
    groups: dict = field(default_factory=lambda: {MLA_GROUP: {}, STATE_GROUP: {}})

    def add(self, group: int, h: int, block: Block) -> None:
        self.groups[group][h] = block


class PathBlocks:
    """Cuts one token path into blocks as it is walked (a radix tree's DFS keeps one per open path):
    ``feed`` tokens, read the last full block, or :meth:`state_block` where a checkpoint ends the path."""

    def __init__(self, block_size: int, parent: int | None = None, tail: tuple = (), start: int = 0,
                 last: Block | None = None):
        self.block_size, self.parent, self.tail, self.start = block_size, parent, tail, start
        self.last = last  # the last full block walked (its hash is ``parent``)

    def fork(self) -> "PathBlocks":
        return PathBlocks(self.block_size, self.parent, self.tail, self.start, self.last)

    def feed(self, tokens, index: BlockIndex) -> None:
        """Walk ``tokens``: each block they complete is stored in the MLA group."""
        tail, bs = self.tail + tuple(tokens), self.block_size
        while len(tail) >= bs:
            block, tail = tail[:bs], tail[bs:]
            h = _walk_hash(self.parent, block)
            self.last = Block(self.parent, block, self.start)
            index.add(MLA_GROUP, h, self.last)
            self.parent, self.start = h, self.start + bs
        self.tail = tail

    def state_block(self, index: BlockIndex) -> None:
        """A checkpoint at the path's current end: its block in the mamba group (module docstring)."""
        if self.tail:
            index.add(STATE_GROUP, _walk_hash(self.parent, self.tail), Block(self.parent, self.tail, self.start))
        elif self.last is not None:
            index.add(STATE_GROUP, self.parent, self.last)


def chains(blocks: dict) -> list[list[tuple[int, Block]]]:
    """``blocks`` (hash -> Block) as chains, each block's parent before it: a chain continues while a block
    has exactly one child among ``blocks``; the others start chains of their own."""
    children: dict = {}
    for h, b in blocks.items():
        children.setdefault(b.parent, []).append(h)
    heads = sorted((h for h, b in blocks.items() if b.parent not in blocks), key=lambda h: (blocks[h].start, h))
    out = []
    stack = list(reversed(heads))
    while stack:
        h = stack.pop()
        chain = [(h, blocks[h])]
        while True:
            kids = sorted(children.get(chain[-1][0], ()), key=lambda k: (blocks[k].start, k))
            if not kids:
                break
            stack.extend(reversed(kids[1:]))
            chain.append((kids[0], blocks[kids[0]]))
        out.append(chain)
    return out
