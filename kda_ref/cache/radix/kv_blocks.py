"""The radix tree's KV-event blocks, followed as the tree changes (while the cache is published).

A block of the radix tree (:mod:`kda_ref.kv_events.index`) is named by the whole path before it, so a node's
blocks -- the full blocks that end inside its tokens, and the checkpoint's block when it holds a state --
follow from the path's cut at its parent's end and its own tokens. :class:`RadixBlocks` keeps both per node,
made when first needed, and tells the open journals (:class:`~kda_ref.kv_events.journal.JournalSet`) what a
change of the tree added or removed: a new leaf, a state set or dropped, a leaf deleted. A split names no
block anew (the path is the same); it only moves the blocks that end above the cut to the new upper node. So a
step costs what it changed, not what the tree holds. SGLang records its events at the same places (a new
node, an eviction, a reset): 0.5.23's ``UnifiedRadixCache`` in its tree core, the Python one through
``sglang/srt/mem_cache/events.py::KVCacheEventRecorder``.
"""

from __future__ import annotations

from ...kv_events.index import MLA_GROUP, STATE_GROUP, Block, BlockIndex, PathBlocks
from ...kv_events.journal import JournalSet
from .tree import RadixTree, TreeNode


def walk_blocks(tree: RadixTree, block_size: int) -> BlockIndex:
    """The whole tree as KV-event blocks, by one walk: every full block along a path, and for each checkpoint
    the block that ends at it. Publishing starts from it (and a flush); :class:`RadixBlocks` follows from there."""
    index = BlockIndex(block_size)
    stack = [(child, PathBlocks(block_size)) for child in tree.root.children.values()]
    while stack:
        node, path = stack.pop()
        path = path.fork()
        path.feed(node.key, index)
        if node.state is not None:
            path.state_block(index)
        stack.extend((c, path) for c in node.children.values())
    return index


class _Collect:
    """What :class:`PathBlocks` names while it walks, in order (it takes anything with ``add``)."""

    def __init__(self):
        self.blocks: list[tuple[int, Block]] = []

    def add(self, group: int, h: int, block: Block) -> None:
        self.blocks.append((h, block))


class RadixBlocks:
    """The observer :class:`~kda_ref.cache.radix.tree.RadixTree` calls on every change of its blocks (module
    docstring); :meth:`kda_ref.cache.radix.RadixPrefixCache.kv_journal` installs it."""

    def __init__(self, tree: RadixTree, block_size: int):
        self.tree, self.block_size, self.journals = tree, block_size, JournalSet()
        self.cuts: dict[int, PathBlocks] = {}  # node_id -> the path cut into blocks up to the node's end
        self.own: dict[int, list[tuple[int, Block]]] = {}  # node_id -> the full blocks that end in the node

    def _blocks(self, node: TreeNode) -> list[tuple[int, Block]]:
        """The full blocks that end in ``node``; makes (and keeps) the cuts of it and of its ancestors."""
        path = []
        while node is not self.tree.root and node.node_id not in self.own:
            path.append(node)
            node = node.parent
        cut = PathBlocks(self.block_size) if node is self.tree.root else self.cuts[node.node_id]
        for n in reversed(path):
            cut, seen = cut.fork(), _Collect()
            cut.feed(n.key, seen)
            self.cuts[n.node_id], self.own[n.node_id] = cut, seen.blocks
        return self.own[path[0].node_id] if path else self.own[node.node_id]

    def _state_block(self, node: TreeNode) -> tuple[int, Block]:
        """The block that ends at ``node``'s checkpoint: the partial run since the last block boundary, or the
        last full block when the node ends on one."""
        self._blocks(node)
        seen = _Collect()
        self.cuts[node.node_id].state_block(seen)
        return seen.blocks[0]

    # ---- what the tree calls ------------------------------------------------------------------------
    def added(self, leaf: TreeNode) -> None:
        """A new leaf: its full blocks are stored."""
        for h, b in self._blocks(leaf):
            self.journals.add(MLA_GROUP, h, b)

    def state_set(self, node: TreeNode) -> None:
        self.journals.add(STATE_GROUP, *self._state_block(node))

    def state_dropped(self, node: TreeNode) -> None:
        """Called before the tree forgets the state."""
        self.journals.remove(STATE_GROUP, *self._state_block(node))

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        """``lower``'s edge was cut under the new ``upper``: the blocks that end above the cut are upper's now
        (made again from the cut when next needed)."""
        self.own.pop(lower.node_id, None)

    def deleted(self, leaf: TreeNode) -> None:
        """Called before the tree unlinks ``leaf``: its blocks, and its checkpoint's, are removed."""
        if leaf.state is not None:
            self.state_dropped(leaf)
        for h, b in self._blocks(leaf):
            self.journals.remove(MLA_GROUP, h, b)
        self.cuts.pop(leaf.node_id, None)
        self.own.pop(leaf.node_id, None)
