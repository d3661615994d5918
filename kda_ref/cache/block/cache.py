"""``BlockPrefixCache``: the vLLM-style hashed block cache wired to the pool and to requests.

``docs/article.md#s7``, ``#s8``, ``#s9-2``; the request side of vLLM's ``KVCacheManager`` +
``HybridKVCacheCoordinator`` + ``MambaManager`` (``vllm/v1/core/``) over our
:class:`~kda_ref.cache.block.BlockHashTable`: admission (the hybrid hit, its state copied on write;
partial hits: ``_cache_partial_tail_block``), states per ``mamba_cache_mode``
(vLLM 0.32.0 ``Scheduler._mamba_block_aligned_split``, earlier ``MambaPrefillChunkAlignmentPolicy``),
retention (vLLM PR #45845), and full KV
units hashed in at every step end (``cache_full_blocks``). The pool's ``page_size`` must equal
``hash_unit``. :attr:`BlockPrefixCache.observers` get a :class:`BlockObservation` after every
``admit`` and ``snapshot``.

Design notes: ``docs/block_cache.md`` (``#retention-vllmretention``, ``#observers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...memory import PageKind, PoolAccounting
from ...trace import NULL_TRACER, StepClock
from ...utils import cdiv
from ..base import CACHE_OWNER, PrefixCache
from ..cost import CostModel
from ..picture import BLOCK_STEPS
from .table import BlockHashTable, UnitNode, chain_hashes, check_block_args, retention_mask

@dataclass
class _BlockSeq:
    """The cache's record of one running sequence."""

    hashes: list[int] = field(default_factory=list)  # chained unit hashes of the known tokens
    targets: set[int] = field(default_factory=set)  # reachable boundaries to keep (junction, partial tail)
    pending: tuple[int, int] | None = None  # (boundary, checkpoint slot): the replay point so far
    node: UnitNode | None = None  # deepest cached node of the sequence's prefix (its locked path)
    hit_len: int = 0
    shared_len: int = 0  # leading tokens whose KV pages belong to the cache
    state_block_table: list = field(default_factory=list)  # logical: None = null block, else a slot


@dataclass(frozen=True)
class BlockObservation:
    """What an observer of :class:`BlockPrefixCache` is shown (a copy: nothing here is live).

    ``when`` is ``"admit"`` (right after admission: ``length`` is the hit, 0 on a miss) or ``"snapshot"``
    (right after a step's end: ``length`` is the tokens the active state describes). ``slot`` is the
    request's active state slot (on a hit, the copy-on-write destination), ``state_block_table`` its
    logical state block table (vLLM's ``MambaManager`` block table: ``None`` = null block, else the
    checkpoint slot of a cached state)."""

    when: str
    req_id: int
    length: int
    slot: int | None
    state_block_table: tuple


class BlockPrefixCache(PrefixCache):
    kind = "block"
    seq_record = _BlockSeq

    def __init__(self, pool: PoolAccounting, *, block_size: int = 64, hash_unit: int = 16, mode: str = "align",
                 retention_interval: int | None = None, partial_hits: bool = False, eviction: str = "lru",
                 alpha: float = 1.0, chunk_size: int = 64, cost: CostModel | None = None, tracer=NULL_TRACER,
                 clock: StepClock | None = None, replay_granularity: str = "block"):
        check_block_args(chunk_size, block_size, hash_unit, mode, retention_interval, partial_hits, eviction, alpha,
                         replay_granularity)
        if pool.sizes.page_size != hash_unit:
            raise ValueError(f"page_size: the block cache keeps one KV page per hash unit; page_size must equal "
                             f"hash_unit={hash_unit}, got {pool.sizes.page_size}")
        if eviction == "marconi" and cost is None:
            cost = CostModel(pool.config)
        super().__init__(pool, tracer, clock)
        self.table = BlockHashTable(block_size, hash_unit, free_kv=lambda ids: pool.free(PageKind.MLA_KV, ids),
                                    free_state=self._free_checkpoint, eviction=eviction, alpha=alpha, cost=cost,
                                    allow_partial=partial_hits)
        self.block_size, self.unit, self.mode = block_size, hash_unit, mode
        self.retention, self.partial, self.chunk_size = retention_interval, partial_hits, chunk_size
        self.unit_replay = replay_granularity == "unit"
        self.needs_chunk_states = mode == "all"
        self.stats = {"hits": 0, "partial_hits": 0, "checkpoints_created": 0, "checkpoints_donated": 0,
                      "checkpoints_evicted": 0, "pending_committed": 0, "fixed_point_rounds": 0}
        # called with a BlockObservation after every admit and snapshot (see the module docstring);
        # append to observe, remove to stop. Empty: the cache does no extra work.
        self.observers: list[Callable[[BlockObservation], None]] = []

    # ---- helpers --------------------------------------------------------------------------------
    def _free_checkpoint(self, slot: int) -> None:
        self.pool.free(PageKind.CHECKPOINT, [slot])
        self.stats["checkpoints_evicted"] += 1
        self._emit("evict", None, None, "vllm.block_eviction", checkpoint=slot, policy=self.table.eviction)

    def hashes(self, seq, upto: int) -> list[int]:
        """Chained unit hashes of ``seq``'s first ``upto`` tokens (computed incrementally)."""
        rs = self._rec(seq)
        need = upto // self.unit
        if len(rs.hashes) < need:
            start = len(rs.hashes) * self.unit
            tail = seq.all_token_ids[start: need * self.unit]
            rs.hashes.extend(chain_hashes(tail, self.unit, *rs.hashes[-1:]))
        return rs.hashes[:need]

    def state_block_table(self, seq) -> list:
        """The request's logical state block table (for the visualizer): ``None`` = null block."""
        return list(self._rec(seq).state_block_table)

    def _observe(self, when: str, seq, length: int) -> None:
        """Show every observer where ``seq`` stands (called by :meth:`admit` and :meth:`snapshot`)."""
        if not self.observers:
            return
        rs = self._seqs.get(seq.req_id)
        seen = BlockObservation(when, seq.req_id, length, seq.slot, tuple(rs.state_block_table) if rs else ())
        for observer in list(self.observers):
            observer(seen)

    # ---- admission ------------------------------------------------------------------------------
    def admit(self, seq, reuse: bool = True) -> int:
        """vLLM's ``get_computed_blocks`` + copy-on-write of the hit's state; returns the hit (0 on a
        miss, and with ``reuse=False``). The observers see the request right after."""
        hit = self._admit(seq) if reuse else 0
        self._observe("admit", seq, hit)
        return hit

    def _admit(self, seq) -> int:
        known = seq.num_tokens - 1
        if known < self.unit:
            return 0
        hashes = self.hashes(seq, known)
        hit = self.table.find_longest_cache_hit(hashes, known)
        rs = self._rec(seq)
        self.stats["fixed_point_rounds"] += hit.rounds
        junction = hit.junction_len if self.partial else hit.junction_len // self.block_size * self.block_size
        if junction > hit.state_len:
            rs.targets.add(junction)  # a shared-prefix junction: worth a state (Marconi's branch-off point)
        if self.partial:
            tail = len(seq.prompt_token_ids) // self.unit * self.unit
            if tail % self.block_size and tail > hit.state_len:
                rs.targets.add(tail)  # the prompt's last hash boundary: the partial tail block
        self._emit("match", seq.req_id, hit.state_len, "vllm.hybrid_hit", kv_len=hit.junction_len,
                   state_len=hit.state_len, rounds=hit.rounds)
        if hit.state_len == 0:
            return 0
        node = hit.state_node
        (slot,) = self.pool.alloc(PageKind.KDA_STATE, 1, owner=seq.req_id)
        self.pool.restore_checkpoint(node.state, slot)  # copy-on-write: the cached state stays untouched
        self.table.lock(node)
        self.table.touch(node)
        seq.slot, seq.pages = slot, list(hit.kv_pages)
        rs.shared_len, seq.num_computed_tokens = hit.state_len, hit.state_len
        rs.node, rs.hit_len = node, hit.state_len
        rs.state_block_table = hit.state_block_table(self.block_size)
        if hit.state_len % self.block_size:
            self._emit("partial_hit", seq.req_id, hit.state_len, "vllm.state_block.partial_hit", checkpoint=node.state,
                       active=slot)
        self._emit("copy_on_write", seq.req_id, hit.state_len, "vllm.state_block", checkpoint=node.state, active=slot)
        return hit.state_len

    def admitted(self, seq, hit: int) -> None:
        if hit:
            self.stats["hits"] += 1
            self.stats["partial_hits"] += bool(hit % self.block_size)

    def decode_stride(self) -> int:
        """States are named by hash unit (a block's end, or any unit with partial hits): one unit."""
        return self.unit

    def picture(self, prompt, output, req_id, label, steps, reused=0, max_nodes=None):
        """The block table along the request's tokens, in the Lab's ``block_steps`` format."""
        return BLOCK_STEPS, {"req_id": req_id, "label": label, "steps": list(steps), "block_size": self.block_size,
                             "units": self.block_units([*prompt, *output])}

    def block_units(self, seq: list[int]) -> list[dict]:
        """What the cache holds along ``seq``: per hash unit, whether its KV is cached and which state slot
        (if any) is kept at its end (vLLM's state blocks). Called by :meth:`picture`."""
        hashes = chain_hashes(seq, self.unit)
        units = []
        for j in range(len(hashes)):
            node = self.table.node_at(hashes, (j + 1) * self.unit)  # the unit ending there, or None
            units.append({"end": (j + 1) * self.unit, "kv": node is not None,
                          "state": None if node is None else node.state})
        return units

    def pinned_checkpoints(self) -> list[tuple[str, int]]:
        """The pending replay point a request holds while it runs (when some boundaries are not kept, or
        replay points move by hash unit); cached states themselves are always evictable here."""
        if self.retention is None and not self.unit_replay:
            return []
        return [("pending replay checkpoint", 1)]

    # ---- scheduling ------------------------------------------------------------------------------
    def _keep(self, rs: _BlockSeq, p: int) -> bool:
        return retention_mask([p], self.retention, rs.targets)[0]

    def align_chunk(self, seq, n: int) -> int:
        """Cut a prefill chunk of ``n`` tokens so the states this cache wants exist afterwards."""
        start = seq.num_computed_tokens
        end = start + n
        if end < seq.num_tokens:  # not the last chunk: end on a block boundary when possible
            aligned = end // self.block_size * self.block_size
            if aligned > start:
                end = aligned
        rs = self._rec(seq)
        cuts = {p for p in rs.targets if start < p < end}
        if self.mode == "align" and start < len(seq.prompt_token_ids):
            last = seq.num_tokens // self.block_size * self.block_size  # force the last cacheable chunk
            if start < last < end:
                cuts.add(last)
        elif self.mode == "all":  # boundaries the chunk kernel cannot deliver from this start
            b = (start // self.block_size + 1) * self.block_size
            while b < end:
                if (b - start) % self.chunk_size and self._keep(rs, b):
                    cuts.add(b)
                    break
                b += self.block_size
        return (min(cuts) if cuts else end) - start

    # ---- states -----------------------------------------------------------------------------------
    def _cache_kv(self, seq, upto: int) -> None:
        """Hash the request's full units up to ``upto`` into the cache and share them from now on."""
        upto = upto // self.unit * self.unit
        rs = self._rec(seq)
        start = rs.shared_len // self.unit * self.unit
        if upto <= start:
            return
        hashes = self.hashes(seq, upto)
        mine = seq.pages[start // self.unit: upto // self.unit]  # one page per unit
        cached = self.table.insert_kv(hashes, seq.pages, upto, start, seq.all_token_ids)
        taken = [p for p, c in zip(mine, cached) if p == c]
        dups = [p for p, c in zip(mine, cached) if p != c]
        if taken:
            self.pool.retag(PageKind.MLA_KV, taken, CACHE_OWNER)
        if dups:
            self.pool.free(PageKind.MLA_KV, dups)
        seq.pages[start // self.unit: upto // self.unit] = cached
        node = self.table.node_at(hashes, upto)
        self.table.move_lock(rs.node, node)
        rs.node, rs.shared_len = node, upto

    def _commit(self, seq, p: int, ckpt: int, op: str) -> bool:
        """Hand checkpoint ``ckpt`` (state after ``p`` tokens) to the cache under ``p``'s hash."""
        self._cache_kv(seq, p)
        if not self.table.insert_state(self.hashes(seq, p), p, ckpt):
            return False
        self.pool.retag(PageKind.CHECKPOINT, [ckpt], CACHE_OWNER)
        rs = self._rec(seq)
        n = cdiv(p, self.block_size)
        rs.state_block_table = rs.state_block_table[:n] + [None] * (n - len(rs.state_block_table))
        rs.state_block_table[n - 1] = ckpt
        self.stats["checkpoints_created"] += 1
        concept = "vllm.state_block.partial_hit" if p % self.block_size else "vllm.state_block"
        self._emit(op, seq.req_id, p, concept, checkpoint=ckpt, mode=self.mode)
        return True

    def _offer(self, seq, p: int, write, step_end: bool) -> None:
        """The state after ``p`` tokens is available (``write`` fills a slot with it): keep it, make it
        the pending replay point, or let it go."""
        rs = self._rec(seq)
        if p <= rs.hit_len or p % self.unit:
            return
        on_block = p % self.block_size == 0
        target = self.partial and p in rs.targets
        if not on_block and not target and not self.unit_replay:
            return
        if target or (on_block and self._keep(rs, p)):
            ckpt = self._new_checkpoint(seq, write)
            if ckpt is None:
                return
            if not self._commit(seq, p, ckpt, "snapshot" if step_end else "checkpoint_create"):
                self.pool.free(PageKind.CHECKPOINT, [ckpt])  # that boundary was cached already
            if on_block and rs.pending is not None and rs.pending[0] < p:  # a later kept block replaces it
                self.pool.free(PageKind.CHECKPOINT, [rs.pending[1]])
                rs.pending = None
            return
        # not retained: hold it as the pending replay point (replacing the previous one)
        if rs.pending is not None and rs.pending[0] >= p:
            return
        old = rs.pending
        ckpt = self._new_checkpoint(seq, write)
        if ckpt is None:
            return
        if old is not None:
            self.pool.free(PageKind.CHECKPOINT, [old[1]])
        rs.pending = (p, ckpt)
        self._emit("pending", seq.req_id, p, "vllm.retention", checkpoint=ckpt)

    def snapshot(self, seq, length: int, start: int | None = None, *, decode: bool = False) -> None:
        """After a step: the active state describes ``length`` tokens. Also share its full KV units.
        The observers see the request right after."""
        self._cache_kv(seq, min(length, seq.num_computed_tokens))
        if seq.slot is not None:
            self._offer(seq, length, self.active_writer(seq), step_end=True)
        self._observe("snapshot", seq, length)

    def keep_state(self, seq, length: int) -> bool:
        """A state computed elsewhere (a disaggregated prefill's handoff) after ``length`` tokens: its full
        KV units join the cache, and the state becomes a state block when this cache can name
        ``length`` -- a block boundary, or any hash-unit boundary with partial hits -- whatever the
        retention policy says. A state inside a block (without partial hits) or inside a hash unit has no
        hash to live under; only its KV is kept (vLLM 0.32.0 keeps Mamba states at block boundaries, and in
        align mode also at the prompt's last hash-unit boundary, a partial tail block)."""
        self._cache_kv(seq, length)
        nameable = length % self.block_size == 0 or (self.partial and length % self.unit == 0)
        if seq.slot is None or not nameable or length <= self._rec(seq).hit_len:
            return False
        node = self.table.node_at(self.hashes(seq, length), length)
        if node is not None and node.state is not None:
            return True  # that boundary was cached already
        ckpt = self._new_checkpoint(seq, self.active_writer(seq))
        if ckpt is None:
            return False
        if not self._commit(seq, length, ckpt, "snapshot"):
            self.pool.free(PageKind.CHECKPOINT, [ckpt])
            return False
        return True

    def offer_chunk_state(self, seq, start: int, p: int, write, *, speculative: bool = False) -> None:
        """A state inside a step, offered if on a block boundary: with ``mamba_cache_mode="all"``
        always; with ``"align"`` when a speculative step's kept run crossed the boundary (vLLM 0.32.0's
        ``postprocess_mamba_fused_kernel`` copies exactly that boundary's state, ``accept_token_bias``
        into the accepted tokens)."""
        if (self.mode == "all" or speculative) and p > start and p % self.block_size == 0:
            self._cache_kv(seq, p)
            self._offer(seq, p, write, step_end=False)

    def donate(self, seq) -> None:
        """At finish: if the request ends on a boundary, its active state becomes a cached state block
        (a re-tag, no copy; a compressing copy when checkpoints are compressed) and supersedes the
        pending replay point; otherwise the pending replay point is committed."""
        length = seq.num_computed_tokens
        self._cache_kv(seq, length)
        rs = self._rec(seq)
        superseded = False
        on_boundary = length % self.block_size == 0 or (self.partial and length in rs.targets)
        if on_boundary and length > rs.hit_len and seq.slot is not None:
            hashes = self.hashes(seq, length)
            node = self.table.node_at(hashes, length)
            superseded = node is not None and node.state is not None
            if node is not None and not superseded:
                if self.pool.donates_by_retag:
                    self.pool.retag(PageKind.KDA_STATE, [seq.slot], CACHE_OWNER, PageKind.CHECKPOINT)
                    self.table.insert_state(hashes, length, seq.slot)
                    self.stats["checkpoints_donated"] += 1
                    self._emit("donate", seq.req_id, length, "vllm.state_block", checkpoint=seq.slot)
                    seq.slot = None
                    superseded = True
                else:
                    ckpt = self._new_checkpoint(seq, self.active_writer(seq))
                    if ckpt is not None:
                        superseded = self._commit(seq, length, ckpt, "snapshot")
                        if not superseded:
                            self.pool.free(PageKind.CHECKPOINT, [ckpt])
        if rs.pending is not None:
            p, ckpt = rs.pending
            rs.pending = None
            if not superseded and self._commit(seq, p, ckpt, "commit"):
                self.stats["pending_committed"] += 1
            else:
                self.pool.free(PageKind.CHECKPOINT, [ckpt])

    # ---- release / memory -------------------------------------------------------------------------
    def release(self, seq) -> None:
        rs = self._seqs.pop(seq.req_id, None)
        if rs is None:
            return
        if rs.node is not None:
            self.table.lock(rs.node, -1)
        if rs.pending is not None:
            self.pool.free(PageKind.CHECKPOINT, [rs.pending[1]])

    def make_room(self, kind: PageKind, n: int) -> bool:
        """Evict until ``n`` units of ``kind`` can be allocated (and, once evicting, until
        ``evict_slack_bytes`` more are free: the simulator evicts in batches)."""
        if self.pool.can_alloc(kind, n):
            return True
        target = n * self.pool.sizes.of(kind) + self.evict_slack_bytes
        self.table.evict_until(lambda: self.pool.can_alloc(kind, n) and self.pool.free_bytes >= target)
        return self.pool.can_alloc(kind, n)

    def flush(self) -> None:
        """Drop every unlocked entry (used at shutdown and by tests to check nothing leaks)."""
        self.table.flush()
        if self.table.journals:  # the next KV-event batch clears, then stores what is left
            self.table.journals.restart(self.kv_blocks())

    def kv_blocks(self, block_size: int | None = None):
        """The hash table as KV-event blocks, one per hash unit (``block_size`` is the unit here)."""
        return self.table.kv_blocks()

    def kv_journal(self):
        return self.table.journals.open(self.kv_blocks())

    def close_kv_journal(self, journal) -> None:
        self.table.journals.close(journal)

    def occupancy(self) -> dict:
        return {"cached_states": self.table.num_states(), "cached_kv_tokens": self.table.num_kv_pages() * self.unit}
