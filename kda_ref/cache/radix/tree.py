"""A KDA-aware radix tree: KV for every token, a KDA state only where one was saved.

Article concepts ``sglang.radix.kda_aware`` (``docs/article.md#s5-1``), ``sglang.radix.match_backoff`` and
``sglang.radix.tombstone``; modelled on SGLang's ``MambaRadixCache``
(``python/sglang/srt/mem_cache/mamba_radix_cache.py``: ``TreeNode.mamba_value``,
``_match_prefix_helper``, ``_split_node``, ``evict_full`` / ``evict_mamba``, ``inc_lock_ref``).
Why two kinds of entries: ``docs/article.md#s3``. A match backs off to the deepest node with a state
and reports the branching position; the invariants are checked by :meth:`RadixTree.check`. Freed KV
units and state slots go back through two callbacks: the tree owns no memory.

Design notes: ``docs/radix_cache.md#the-tree``.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable


def _common_prefix_len(key: list[int], tokens: list[int], i: int) -> int:
    """Length of the common prefix of ``key`` and ``tokens[i:]``: whole-slice compares (C speed) and a
    binary search for the first mismatch, not a Python loop per token."""
    m = min(len(key), len(tokens) - i)
    if key[:m] == tokens[i:i + m]:
        return m
    lo, hi = 0, m  # key[:lo] matches; key[lo:hi] contains the first mismatch
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if key[lo:mid] == tokens[i + lo:i + mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(eq=False)
class TreeNode:
    node_id: int
    key: list[int] = field(default_factory=list)  # the token span of the edge into this node
    value: list[int] = field(default_factory=list)  # one KV unit id per token of ``key``
    parent: "TreeNode | None" = None
    children: dict[int, "TreeNode"] = field(default_factory=dict)  # first token -> child
    state: int | None = None  # checkpoint slot: the state after the last token of ``key``
    kv_lock: int = 0
    state_lock: int = 0
    kv_access: int = 0
    state_access: int = 0

    @property
    def is_leaf(self) -> bool:
        return not self.children



@dataclass
class MatchResult:
    kv_len: int  # tokens whose KV is in the tree (the plain prefix-cache answer)
    kv_indices: list[int]  # their KV unit ids
    state_len: int  # tokens usable as a prefix: the deepest node with a state (back-off)
    state_node: TreeNode  # that node (root when nothing is usable)
    last_node: TreeNode  # the deepest KV node matched (split to the match boundary)
    branching_len: int | None  # chunk-aligned position in (state_len, kv_len] to checkpoint next

    @property
    def usable_indices(self) -> list[int]:
        return self.kv_indices[: self.state_len]

    @property
    def state_slot(self) -> int | None:
        return self.state_node.state


class RadixTree:
    def __init__(self, free_kv: Callable[[list[int]], None], free_state: Callable[[int], None],
                 chunk_size: int = 64):
        if chunk_size < 1:
            raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
        self.free_kv, self.free_state, self.chunk_size = free_kv, free_state, chunk_size
        self._clock = 0
        self._next_id = 1
        self.root = TreeNode(node_id=0)
        self.root.kv_lock = 1  # the root is never evicted
        # kept as the tree changes, so a server's per-step stats never walk the tree (check() verifies them)
        self.kv_tokens = 0  # KV units held, one per token
        # told of every change of the KV-event blocks while the cache is published (cache.radix.kv_blocks)
        self.observer = None
        # eviction's candidates, kept as the tree changes: an eviction reads them, not every node (the nodes
        # grow with the KV budget, tombstones included; a long run's evictions would walk them all).
        # holders: node_id -> a node with a state, least recently used first (SGLang's mamba_lru_list); a
        # state's access is always the newest tick, so moving it to the end keeps the order of state_access
        self.holders: OrderedDict[int, TreeNode] = OrderedDict()
        self.leaves: dict[int, TreeNode] = {}  # node_id -> a node without children (not the root)

    # ---- helpers -------------------------------------------------------------------------------
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _new_node(self, **kw) -> TreeNode:
        node = TreeNode(node_id=self._next_id, **kw)
        self._next_id += 1
        return node

    def nodes(self) -> list[TreeNode]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut ``child``'s edge after ``n`` tokens; the new upper node has no state (tombstone)."""
        upper = self._new_node(key=child.key[:n], value=child.value[:n], parent=child.parent,
                               kv_lock=child.kv_lock, kv_access=child.kv_access)
        child.parent.children[child.key[0]] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        upper.children[child.key[0]] = child
        if self.observer is not None:
            self.observer.split(upper, child)
        return upper

    # ---- match / insert ------------------------------------------------------------------------
    def match_prefix(self, tokens: list[int]) -> MatchResult:
        """Walk the KV path of ``tokens``; back off to the deepest node with a state."""
        node, kv, i = self.root, [], 0
        best_node, best_len = self.root, 0
        now = self._tick()
        while i < len(tokens) and tokens[i] in node.children:
            child = node.children[tokens[i]]
            n = _common_prefix_len(child.key, tokens, i)
            if n < len(child.key):
                child = self._split(child, n)
            kv.extend(child.value)
            i += n
            node = child
            node.kv_access = now
            if node.state is not None:
                best_node, best_len = node, i
        if best_node.state is not None:
            best_node.state_access = now
            self.holders.move_to_end(best_node.node_id)
        branching = None
        if len(kv) > best_len:
            aligned = (len(kv) // self.chunk_size) * self.chunk_size
            branching = aligned if aligned > best_len else None
        return MatchResult(kv_len=len(kv), kv_indices=kv, state_len=best_len, state_node=best_node,
                           last_node=node, branching_len=branching)

    def insert(self, tokens: list[int], kv_indices: list[int], state: int) -> tuple[int, bool]:
        """Insert a prefix with its KV and the state at its end.

        Returns ``(num_existing, state_taken)``: the first ``num_existing`` tokens were already in
        the tree, so the caller's KV units for them are duplicates to free; ``state_taken`` is False
        when the end node already had a state (the caller keeps / frees its slot).
        """
        existing, taken, _node, _kv = self.insert_path(tokens, kv_indices, state)
        return existing, taken

    def insert_path(self, tokens: list[int], kv_indices: list[int], state: int):
        """:meth:`insert`, also returning the node that ends the prefix and the tree's KV units for
        the whole prefix: ``(num_existing, state_taken, node, kv_units)``."""
        if len(tokens) != len(kv_indices):
            raise ValueError(f"kv_indices: need one per token ({len(tokens)}), got {len(kv_indices)}")
        if not tokens:
            raise ValueError("tokens: empty")
        m = self.match_prefix(tokens)
        node = m.last_node
        existing = m.kv_len
        kv = m.kv_indices
        if existing < len(tokens):
            leaf = self._new_node(key=list(tokens[existing:]), value=list(kv_indices[existing:]), parent=node,
                                  kv_access=self._tick())
            node.children[leaf.key[0]] = leaf
            self.leaves[leaf.node_id] = leaf
            self.leaves.pop(node.node_id, None)
            self.kv_tokens += len(leaf.value)
            if self.observer is not None:
                self.observer.added(leaf)
            node = leaf
            kv = kv + leaf.value
        if node.state is not None:
            return existing, False, node, kv
        node.state = state
        self.holders[node.node_id] = node
        if self.observer is not None:
            self.observer.state_set(node)
        node.state_access = self._tick()
        return existing, True, node, kv

    # ---- locks -----------------------------------------------------------------------------------
    def inc_lock(self, node: TreeNode, state: bool = False) -> None:
        """Lock KV on the path to the root; with ``state`` also the node's own state."""
        if state:
            if node.state is None:
                raise ValueError(f"node: {node.node_id} has no state to lock")
            node.state_lock += 1
        n = node
        while n is not None:
            n.kv_lock += 1
            n = n.parent

    def dec_lock(self, node: TreeNode, state: bool = False) -> None:
        """Undo :meth:`inc_lock`. A node left an unlocked leaf without a state is deleted (with the tombstones
        above it): its state was evicted while the lock held it inside the tree and its children went since,
        and nothing can restore from it -- an unlocked leaf always carries a state (:meth:`check`)."""
        path = []
        n = node
        while n is not None:
            path.append(n)
            n = n.parent
        if any(p.kv_lock <= 0 for p in path) or (state and node.state_lock <= 0):
            raise ValueError(f"node: lock count of node {node.node_id} would go negative")
        if state:
            node.state_lock -= 1
        for p in path:
            p.kv_lock -= 1
        if node is not self.root and node.is_leaf and node.state is None and node.kv_lock == 0:
            self._delete_leaf(node)

    # ---- eviction ----------------------------------------------------------------------------------
    def _delete_leaf(self, leaf: TreeNode) -> int:
        """Delete an unlocked leaf (KV and state), then tombstone leaves above it in cascade."""
        freed = 0
        while leaf is not self.root and leaf.is_leaf and leaf.kv_lock == 0 and leaf.state_lock == 0:
            if self.observer is not None:
                self.observer.deleted(leaf)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            del self.leaves[leaf.node_id]
            if parent is not self.root and parent.is_leaf:
                self.leaves[parent.node_id] = parent
            self.free_kv(leaf.value)
            freed += len(leaf.value)
            self.kv_tokens -= len(leaf.value)
            if leaf.state is not None:
                self.free_state(leaf.state)
                del self.holders[leaf.node_id]
            leaf = parent
            if leaf.state is not None:  # a parent that keeps a state is a valid leaf
                break
        return freed

    def evict_kv(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` KV tokens from least-recent unlocked leaves (if possible).

        The unlocked leaves in a heap: a parent that a deletion turns into a leaf (it keeps a state) joins
        the heap with its own access time — the same order as re-scanning after every deletion."""
        heap = [(n.kv_access, n.node_id, n) for n in self.leaves.values() if n.kv_lock == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            if leaf.parent is None or leaf.parent.children.get(leaf.key[0]) is not leaf:
                continue  # already deleted in a cascade
            freed += self._delete_leaf(leaf)
            p = leaf.parent
            while p is not self.root and p.parent.children.get(p.key[0]) is not p:
                p = p.parent  # skip ancestors the cascade removed
            if p is not self.root and p.is_leaf and p.kv_lock == 0:
                heapq.heappush(heap, (p.kv_access, p.node_id, p))
        return freed

    def evict_states(self, num_states: int) -> int:
        """Free ``num_states`` states, least recent first: an internal node becomes a tombstone (its
        KV stays), a leaf is deleted with its KV."""
        def evictable(n):
            return n.state is not None and n.state_lock == 0 and (not n.is_leaf or n.kv_lock == 0)

        freed = 0
        while freed < num_states:
            # the least recent evictable holders, as many as still wanted (read first: eviction edits the dict;
            # it never frees another holder, and nothing becomes evictable meanwhile, so a pass that comes up
            # short continues where the order left off)
            batch = list(islice((n for n in self.holders.values() if evictable(n)), num_states - freed))
            if not batch:
                break
            for victim in batch:
                if not evictable(victim):  # a deletion left it a leaf, and its KV is locked
                    continue
                if victim.is_leaf:
                    self._delete_leaf(victim)
                else:
                    self.drop_state(victim)
                freed += 1
        return freed

    def drop_state(self, node: TreeNode) -> None:
        """Free an internal node's state and leave it a tombstone (its KV stays): eviction, and the radix
        cache's per-path cap (``RadixPrefixCache``)."""
        if self.observer is not None:
            self.observer.state_dropped(node)
        self.free_state(node.state)
        node.state = None
        del self.holders[node.node_id]

    # ---- views -------------------------------------------------------------------------------------
    def num_kv_tokens(self) -> int:
        """KV tokens held (kept as the tree changes: no walk)."""
        return self.kv_tokens

    def num_states(self) -> int:
        """Nodes holding a state (kept as the tree changes: no walk)."""
        return len(self.holders)

    def check(self) -> None:
        """Raise AssertionError if an invariant of the module docstring is broken."""
        nodes = self.nodes()
        assert self.kv_tokens == sum(len(n.value) for n in nodes), "kv_tokens count drifted from the tree"
        assert self.holders == {n.node_id: n for n in nodes if n.state is not None}, "holders drifted from the tree"
        access = [n.state_access for n in self.holders.values()]
        assert access == sorted(access), "holders are not in least-recent-first order"
        assert self.leaves == {n.node_id: n for n in nodes if n.is_leaf and n is not self.root}, \
            "leaves drifted from the tree"
        for n in nodes:
            assert n.kv_lock >= 0 and n.state_lock >= 0, f"negative lock on node {n.node_id}"
            if n is self.root:
                continue
            assert n.key and len(n.key) == len(n.value), f"node {n.node_id}: key / value mismatch"
            assert not (n.is_leaf and n.state is None and n.kv_lock == 0), f"node {n.node_id}: tombstone leaf"
            assert n.parent.children.get(n.key[0]) is n, f"node {n.node_id}: broken parent link"
            assert n.kv_lock >= sum(c.kv_lock for c in n.children.values()), f"node {n.node_id}: path lock"
            assert n.state_lock == 0 or n.state is not None, f"node {n.node_id}: state lock without state"

    def pretty(self, decode: Callable[[list[int]], str] | None = None) -> str:
        """ASCII drawing of the tree (``·S`` marks a node with a state)."""
        show = decode or (lambda toks: " ".join(map(str, toks)))
        lines = []

        def walk(n: TreeNode, depth: int) -> None:
            for c in sorted(n.children.values(), key=lambda c: c.key[0]):
                mark = f"·S{c.state}" if c.state is not None else ""
                lines.append("  " * depth + f"[{show(c.key)}]{mark}")
                walk(c, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)
