"""vLLM-style hashed block cache for a hybrid model: a KV group and a state group over one hash chain.

``docs/article.md#s7``, ``#s8`` (concepts ``vllm.block_hash``, ``vllm.hybrid_hit``, ``vllm.state_block``,
``vllm.state_block.partial_hit``, ``vllm.retention``, ``marconi.eviction``). vLLM counterparts:
``kv_cache_utils.py::hash_block_tokens`` (chained hashes), ``BlockPool.cached_block_hash_to_block``,
``HybridKVCacheCoordinator.find_longest_cache_hit`` (the hybrid hit, a fixed point) and
``MambaManager.find_longest_cache_hit`` (state blocks); ``eviction="marconi"`` is Marconi's
``radix_cache_hybrid.py::evict_v2``. The table is a trie of hash units: KV pages are evicted only at
leaves, states anywhere.

Design notes: ``docs/block_cache.md#hashes-and-groups-vllmblock_hash-vllmstate_block``,
``#the-hit-is-a-fixed-point-vllmhybrid_hit``, ``#eviction-vllmblock_eviction-marconieviction-marconialpha_tuning``.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ...kv_events.index import MLA_GROUP, STATE_GROUP, Block, BlockIndex, block_hash
from ...kv_events.journal import JournalSet
from ...utils import cdiv

if TYPE_CHECKING:  # annotations only: the table imports without torch (the cache options read its choices)
    from ..cost import CostModel

ROOT_HASH = 0x6B64615F726566  # "kda_ref": the parent hash of the first unit
EVICTION_POLICIES = ("lru", "marconi")
# the block cache's states: at every block boundary, or where a step ends on one (vLLM 0.32 has "align" and "none")
MAMBA_CACHE_MODES = ("all", "align")


def chain_hashes(tokens, unit: int, parent: int = ROOT_HASH) -> list[int]:
    """``h[i] = hash((h[i-1], tokens[i*unit:(i+1)*unit]))`` for every *full* unit of ``tokens``.

    ``h[i]`` names the whole prefix ``tokens[:(i+1)*unit]`` (vLLM ``hash_block_tokens``; vLLM
    uses sha256 / xxhash over the same chain, Python's tuple hash is enough for one process)."""
    out = []
    h = parent
    for i in range(len(tokens) // unit):
        h = hash((h, tuple(tokens[i * unit:(i + 1) * unit])))
        out.append(h)
    return out


def retention_mask(boundaries: list[int], interval: int | None, reachable=()) -> list[bool]:
    """Which state boundaries (token positions) to keep (vLLM ``reachable_block_mask``: interval retention from
    PR #45845, shared-prefix junctions kept under it since PR #47782):
    ``None`` -> dense (all); ``0`` -> only the reachable boundaries (replay points and shared-prefix
    junctions, Marconi-style); ``N > 0`` -> one state per ``N`` tokens, plus the reachable ones."""
    reach = set(reachable)
    if interval is None:
        return [True] * len(boundaries)
    return [b in reach or (interval > 0 and b % interval == 0) for b in boundaries]


@dataclass(eq=False)
class UnitNode:
    """One hash unit of a cached prefix: its KV page and, maybe, the state at its end."""

    key: int  # chained hash of the prefix that ends here
    parent: "UnitNode | None"
    end: int  # tokens in that prefix
    kv_page: int | None = None
    state: int | None = None  # checkpoint slot: the state after exactly ``end`` tokens
    children: dict = field(default_factory=dict)  # key -> UnitNode
    tokens: tuple = ()  # the unit's own tokens (what a KV event names), when the caller gave them
    lock: int = 0  # running requests reading this node's KV (set along the whole path)
    last_access: int = 0
    event: tuple | None = None  # (KV-event hash, Block), made once: a node's parent and tokens never change


@dataclass
class BlockHit:
    """A hybrid hit. ``state_len`` tokens are reused (KV pages ``kv_pages`` + the state in
    ``state_node``); ``junction_len`` is how far the KV group alone matched (where this request
    leaves the cached prefix: a shared-prefix junction worth a state)."""

    state_len: int
    kv_pages: list[int]
    state_node: UnitNode | None
    junction_len: int
    rounds: int  # fixed-point passes over the groups (1 when the first pass already agreed)

    def state_block_table(self, block_size: int) -> list[int | None]:
        """The logical state block table after the hit: null blocks, then the one real state."""
        if self.state_node is None:
            return []
        n = cdiv(self.state_len, block_size)
        return [None] * (n - 1) + [self.state_node.state]


def check_table_args(block_size: int, hash_unit: int, eviction: str, alpha: float) -> None:
    """The table's arguments (``ValueError`` naming the one at fault); the table, the block cache and
    :class:`~kda_ref.cache.BlockCacheOptions` run it."""
    if not isinstance(hash_unit, int) or isinstance(hash_unit, bool) or hash_unit < 1:
        raise ValueError(f"hash_unit: must be a positive int, got {hash_unit!r}")
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1 or block_size % hash_unit:
        raise ValueError(f"block_size: must be a positive multiple of hash_unit={hash_unit}, got {block_size!r}")
    if eviction not in EVICTION_POLICIES:
        raise ValueError(f"eviction: must be one of {EVICTION_POLICIES}, got {eviction!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha: must be a finite number >= 0, got {alpha!r}")


class BlockHashTable:
    """The hash table (a trie of units) shared by the KV group and the state group.

    Model-free: it stores page and slot ids and calls ``free_kv(pages)`` / ``free_state(slot)``
    when it lets go of them, so the engine (:class:`~kda_ref.cache.block.BlockPrefixCache`)
    and the cost-model simulator drive the same code."""

    def __init__(self, block_size: int, hash_unit: int, *, free_kv: Callable[[list[int]], None],
                 free_state: Callable[[int], None], eviction: str = "lru", alpha: float = 1.0,
                 cost: CostModel | None = None, allow_partial: bool = False):
        check_table_args(block_size, hash_unit, eviction, alpha)
        if eviction == "marconi" and cost is None:
            raise ValueError("cost: Marconi eviction needs a CostModel (FLOPs saved per byte)")
        self.block_size, self.unit = block_size, hash_unit
        self.free_kv_cb, self.free_state_cb = free_kv, free_state
        self.eviction, self.alpha, self.cost = eviction, float(alpha), cost
        self.allow_partial = allow_partial
        self.root = UnitNode(ROOT_HASH, None, 0)
        self.table: dict[int, UnitNode] = {}
        self.states: set[UnitNode] = set()  # nodes holding a state
        self.leaves: set[UnitNode] = set()  # nodes without children (KV evictable when unlocked)
        self._heap: list = []  # LRU: (last_access, -end, seq, node), stale entries skipped on pop
        self._seq = itertools.count()
        self.clock = 0
        self.journals = JournalSet()  # the KV-event journals of the cache's publishers (none: the hooks do nothing)
        self.stats = {"kv_pages_evicted": 0, "states_evicted": 0}

    # ---- lookup -----------------------------------------------------------------------------------
    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def _kv_longest(self, hashes: list[int], max_len: int) -> int:
        """Full-attention group: left to right, the longest run of cached units within ``max_len``."""
        n = 0
        for h in hashes[: max_len // self.unit]:
            if h not in self.table:
                break
            n += 1
        return n * self.unit

    def _state_longest(self, hashes: list[int], max_len: int) -> tuple[int, UnitNode | None]:
        """State group: right to left, the last boundary at or before ``max_len`` holding a state
        (block-aligned, or any unit boundary when partial hits are on)."""
        for i in range(max_len // self.unit - 1, -1, -1):
            node = self.table.get(hashes[i])
            if node is None or node.state is None:
                continue
            if node.end % self.block_size == 0 or self.allow_partial:
                return node.end, node
        return 0, None

    def find_longest_cache_hit(self, hashes: list[int], max_len: int) -> BlockHit:
        """The hybrid hit for a prefix named by ``hashes`` and at most ``max_len`` tokens."""
        curr, rounds, node, junction = max_len, 0, None, None
        while True:
            rounds += 1
            changed = False
            kv = self._kv_longest(hashes, curr)
            if junction is None:
                junction = kv
            if kv < curr:
                curr, changed = kv, True
            st, node = self._state_longest(hashes, curr)
            if st < curr:
                curr, changed = st, True
            if not changed:
                break
        pages = [self.table[h].kv_page for h in hashes[: curr // self.unit]]
        return BlockHit(curr, pages, node if curr else None, junction, rounds)

    def node_at(self, hashes: list[int], length: int) -> UnitNode | None:
        """The node naming the first ``length`` tokens (``length`` a unit multiple), if cached."""
        if length == 0:
            return self.root
        return self.table.get(hashes[length // self.unit - 1])

    # ---- insert ----------------------------------------------------------------------------------
    def insert_kv(self, hashes: list[int], pages: list[int], upto: int, start: int = 0, tokens=()) -> list[int]:
        """Cache the KV of tokens ``[start, upto)`` (unit multiples; the first ``start`` tokens must be
        cached already). ``pages[i]`` is the caller's page for unit ``i``; returns the pages of units
        ``start // unit ..`` to use from now on: the cache's page wherever the unit was already cached
        (the caller frees its duplicate), its own (now owned by the cache) otherwise. ``tokens``: the
        prefix's token ids, kept per unit for the KV events (:meth:`kv_blocks`)."""
        now = self.tick()
        parent = self.node_at(hashes, start)
        if parent is None:
            raise ValueError(f"start: the first {start} tokens are not cached")
        out = []
        for i in range(start // self.unit, upto // self.unit):
            h = hashes[i]
            node = self.table.get(h)
            if node is None:
                node = UnitNode(h, parent, (i + 1) * self.unit, kv_page=pages[i], last_access=now,
                                tokens=tuple(tokens[i * self.unit:(i + 1) * self.unit]))
                parent.children[h] = node
                if self.journals:
                    self.journals.add(MLA_GROUP, *self.event(node))
                self.leaves.discard(parent)
                self.leaves.add(node)
                self.table[h] = node
                self._push(node)
            elif self.eviction == "lru":
                node.last_access = now
                self._push(node)
            out.append(node.kv_page)
            parent = node
        return out

    def insert_state(self, hashes: list[int], length: int, slot: int) -> bool:
        """Attach ``slot`` (the state after ``length`` tokens) to the cached unit ending there.
        Returns False (the caller keeps the slot) if that boundary already holds a state or its KV
        is not cached."""
        node = self.node_at(hashes, length)
        if node is None or node is self.root or node.state is not None:
            return False
        if node.end % self.block_size and not self.allow_partial:
            raise ValueError(f"length: {length} is not a multiple of block_size={self.block_size} "
                             f"and partial hits are off")
        node.state = slot
        node.last_access = self.tick()
        if self.journals:
            self.journals.add(STATE_GROUP, *self.event(node))
        self.states.add(node)
        self._push(node)
        return True

    # ---- locks -------------------------------------------------------------------------------
    def lock(self, node: UnitNode, delta: int = 1) -> None:
        """A running request reads the KV of ``node``'s whole prefix: lock (or unlock) the path."""
        while node is not None and node is not self.root:
            node.lock += delta
            if node.lock < 0:
                raise RuntimeError(f"lock: negative lock count at token {node.end}")
            if node.lock == 0 and not node.children:
                self._push(node)  # evictable again
            node = node.parent

    def move_lock(self, old: UnitNode | None, new: UnitNode) -> None:
        """Move a request's path lock from ``old`` to ``new``. When ``new`` is a descendant of ``old``
        (the request's cached prefix grew), only the nodes between them change."""
        if old is None:
            self.lock(new)
            return
        between = []
        n = new
        while n is not None and n is not self.root and n is not old:
            between.append(n)
            n = n.parent
        if n is old:
            for x in between:
                x.lock += 1
        else:
            self.lock(new)
            self.lock(old, -1)

    def touch(self, node: UnitNode) -> None:
        """A hit used ``node``: LRU refreshes the whole path (deeper = more recent), Marconi only the
        node itself ("only update the timestamp of a single node on prefix matching")."""
        now = self.tick()
        if self.eviction == "marconi":
            node.last_access = now
            return
        while node is not None and node is not self.root:
            node.last_access = now
            self._push(node)
            node = node.parent

    # ---- eviction ----------------------------------------------------------------------------------
    def _nearest_state_above(self, node: UnitNode) -> int:
        p = node.parent
        while p is not None and p is not self.root:
            if p.state is not None:
                return p.end
            p = p.parent
        return 0

    def _push(self, node: UnitNode) -> None:
        if self.eviction != "lru":
            return
        heapq.heappush(self._heap, (node.last_access, -node.end, next(self._seq), node))
        if len(self._heap) > 4 * (len(self.table) + len(self.states)) + 1024:  # drop stale entries
            self._heap = [(n.last_access, -n.end, next(self._seq), n) for n in self.table.values() if self._evictable(n)]
            heapq.heapify(self._heap)

    def _evictable(self, node: UnitNode) -> bool:
        return node.state is not None or (not node.children and node.lock == 0 and self.table.get(node.key) is node)

    def _candidates(self) -> list[UnitNode]:
        """Marconi's candidates: entries with at most one child — states on non-branching nodes and
        unlocked leaves."""
        leaves = [n for n in self.leaves if n.lock == 0]
        return list({*leaves, *(n for n in self.states if len(n.children) <= 1)})

    def _value(self, node: UnitNode) -> tuple[float, int]:
        """(FLOPs saved, bytes freed) of evicting ``node`` under the cost model."""
        flops = self.cost.prefill_flops(self._nearest_state_above(node), node.end) if node.state is not None else 0
        freed = (self.cost.state_bytes if node.state is not None else 0)
        if not node.children and node.lock == 0:
            freed += self.cost.kv_bytes(self.unit)
        return flops, max(freed, 1)

    def marconi_order(self) -> list[UnitNode]:
        """Candidates from the lowest utility up: ``alpha * norm(FLOPs saved / byte) + norm(recency)``."""
        cands = self._candidates()
        if not cands:
            return []
        eff = []
        for n in cands:
            flops, freed = self._value(n)
            eff.append(flops / freed)
        rec = [1.0 / (self.clock - n.last_access + 1) for n in cands]

        def norm(xs):
            lo, hi = min(xs), max(xs)
            return [0.0] * len(xs) if hi == lo else [(x - lo) / (hi - lo) for x in xs]

        util = [self.alpha * e + r for e, r in zip(norm(eff), norm(rec))]
        order = sorted(range(len(cands)), key=lambda i: (util[i], cands[i].last_access, -cands[i].end))
        return [cands[i] for i in order]

    def _branching_states(self) -> list[UnitNode]:
        """States on branching nodes, least recent first: Marconi's candidates leave them out (a junction
        is worth keeping), but when nothing else is left they must go too, or a request that needs the
        memory would wait forever (the engine's progress guarantee)."""
        return sorted((n for n in self.states if len(n.children) > 1), key=lambda n: (n.last_access, -n.end))

    def _pop_lru(self) -> UnitNode | None:
        while self._heap:
            t, _neg_end, _, node = heapq.heappop(self._heap)
            if node.last_access == t and self._evictable(node):
                return node
        return None

    def evict_one(self) -> bool:
        """Evict one entry by the policy; False when nothing is evictable."""
        if self.eviction == "lru":
            node = self._pop_lru()
        else:
            order = self.marconi_order()
            node = order[0] if order else None
        if node is None:
            return False
        self._evict(node)
        return True

    def _evict(self, node: UnitNode) -> None:
        if node.state is not None:
            slot, node.state = node.state, None
            if self.journals:
                self.journals.remove(STATE_GROUP, *self.event(node))
            self.states.discard(node)
            self.stats["states_evicted"] += 1
            self.free_state_cb(slot)
        if not node.children and node.lock == 0 and self.table.get(node.key) is node:
            parent = node.parent
            del parent.children[node.key]
            del self.table[node.key]
            if self.journals:
                self.journals.remove(MLA_GROUP, *self.event(node))
            self.leaves.discard(node)
            if parent is not self.root and not parent.children:
                self.leaves.add(parent)
                if parent.lock == 0:
                    self._push(parent)
            self.stats["kv_pages_evicted"] += 1
            self.free_kv_cb([node.kv_page])

    def evict_until(self, satisfied: Callable[[], bool]) -> bool:
        """Evict entries until ``satisfied()``; returns whether it is. Marconi scores the candidates
        once per round and evicts in that order (re-scoring when the round runs out) — the ranking
        barely moves within a round, and re-scoring after every single eviction is quadratic."""
        if self.eviction == "lru":
            while not satisfied():
                if not self.evict_one():
                    return satisfied()
            return True
        while not satisfied():
            order = self.marconi_order() or self._branching_states()
            if not order:
                return satisfied()
            for node in order:
                if satisfied():
                    return True
                if self._evictable(node) and (node.state is not None or not node.children):
                    self._evict(node)
        return True

    def flush(self) -> None:
        """Drop every unlocked entry (states anywhere, KV of unlocked leaves, repeatedly)."""
        for node in list(self.states):
            self._evict(node)
        stack = [n for n in self.leaves if n.lock == 0]
        while stack:
            node = stack.pop()
            parent = node.parent
            self._evict(node)
            if parent is not self.root and not parent.children and parent.lock == 0:
                stack.append(parent)

    def kv_blocks(self) -> BlockIndex:
        """The table as KV-event blocks (:mod:`kda_ref.kv_events.index`): every cached unit is a block of
        the MLA group (``block_size`` = the hash unit), and a unit whose end holds a state is one of the
        mamba group too, under the same hash. A whole walk: publishing starts from it, then follows the
        changes (:attr:`journals`)."""
        index = BlockIndex(self.unit)
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            h, block = self.event(node)
            index.add(MLA_GROUP, h, block)
            if node.state is not None:
                index.add(STATE_GROUP, h, block)
            stack.extend(node.children.values())
        return index

    def event(self, node: UnitNode) -> tuple[int, Block]:
        """``(KV-event hash, Block)`` of a cached unit: ``block_hash`` of its parent's event hash and its tokens,
        made once per node (a node's parent and tokens never change; parents first, as the walk goes)."""
        path = []
        while node is not self.root and node.event is None:  # the nodes not named yet, deepest first
            path.append(node)
            node = node.parent
        parent = None if node is self.root else node.event[0]
        for n in reversed(path):
            n.event = (block_hash(parent, n.tokens), Block(parent, n.tokens, n.end - self.unit))
            parent = n.event[0]
        return (path[0] if path else node).event

    def check(self) -> None:
        """Assert the structure's invariants (tests call this after every scenario): the hash table
        is exactly the trie, depths match, pages are unique, locks are non-negative and a parent is
        locked at least as much as its children, ``states`` lists exactly the nodes holding one."""
        seen, stack, pages = set(), [self.root], set()
        while stack:
            n = stack.pop()
            for k, ch in n.children.items():
                assert ch.key == k and ch.parent is n and ch.end == n.end + self.unit
                assert self.table.get(k) is ch, f"node at {ch.end} missing from the table"
                assert ch.kv_page not in pages, f"page {ch.kv_page} cached twice"
                assert 0 <= ch.lock and (n is self.root or ch.lock <= n.lock)
                pages.add(ch.kv_page)
                seen.add(ch)
                stack.append(ch)
        assert len(seen) == len(self.table), "the table holds nodes the trie does not reach"
        assert self.states == {n for n in seen if n.state is not None}
        assert self.leaves == {n for n in seen if not n.children}

    # ---- views ---------------------------------------------------------------------------------------
    def num_states(self) -> int:
        return len(self.states)

    def num_kv_pages(self) -> int:
        return len(self.table)

    def state_positions(self) -> list[int]:
        return sorted(n.end for n in self.states)


def check_block_args(chunk_size: int, block_size: int, hash_unit: int, mode: str, retention_interval: int | None,
                     partial_hits: bool, eviction: str, alpha: float, replay_granularity: str) -> None:
    """The block cache's arguments against the model's chunk size (``ValueError`` naming the option).
    The constructor runs it, and so does :meth:`~kda_ref.cache.BlockCacheOptions.check`, which ``LLM``
    calls before it allocates the pool."""
    check_table_args(block_size, hash_unit, eviction, alpha)
    if mode not in MAMBA_CACHE_MODES:
        raise ValueError(f"mamba_cache_mode: must be one of {MAMBA_CACHE_MODES}, got {mode!r}")
    if retention_interval is not None and (not isinstance(retention_interval, int) or isinstance(retention_interval, bool)
                                           or retention_interval < 0):
        raise ValueError(f"retention_interval: must be None, 0 or a positive int, got {retention_interval!r}")
    if retention_interval and retention_interval % block_size:
        raise ValueError(f"retention_interval: {retention_interval} is not a multiple of block_size={block_size}")
    if mode == "all" and block_size % chunk_size:
        raise ValueError(f"block_size: mamba_cache_mode='all' takes states from the chunk kernel, so block_size "
                         f"must be a multiple of the chunk size {chunk_size}, got {block_size}")
    if not isinstance(partial_hits, bool):
        raise ValueError(f"partial_hits: must be True or False, got {partial_hits!r}")
    if replay_granularity not in ("block", "unit"):
        raise ValueError(f"replay_granularity: must be 'block' or 'unit', got {replay_granularity!r}")
    if replay_granularity == "unit" and not partial_hits:
        raise ValueError("replay_granularity: 'unit' keeps replay points inside blocks, which needs partial_hits=True")
