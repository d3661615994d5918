"""``RadixPrefixCache``: the KDA-aware radix tree wired to the pool and to requests.

Article sections 5.1 and 5.4 (``sglang.radix.kda_aware``, ``sglang.cow_snapshot_donate``); the
request-side half of SGLang's ``MambaRadixCache`` (``match_prefix`` + copy-on-write at admission,
``cache_unfinished_req`` between prefill chunks, ``cache_finished_req`` at the end).

* **admission** — match the request's known tokens (all but the last: its logits must be computed)
  and back off to the deepest checkpoint; the request reuses the tree's KV units for that prefix
  (locked for its lifetime) and gets a fresh active state slot holding a **copy** of the
  checkpoint: an active state is never shared (copy-on-write, article section 4.3).
* **snapshot** — when a prefill step ends on a chunk-aligned boundary, the active state is copied
  into a new checkpoint slot and the prefix is inserted (the scheduler aligns chunk ends for this,
  as vLLM's ``mamba_cache_mode="align"`` does).
* **donate** — when a request finishes, its active slot *becomes* the checkpoint of everything it
  computed: the slot is re-tagged in the pool, not copied.

The KV of the prefix moves to the tree in the same way (re-tagged units); a request's block table
is then the tree's units for the shared prefix followed by its own. ``page_size`` must be 1, as in
SGLang's ``MambaRadixCache`` v1, so that a checkpoint boundary can fall on any token.
"""

from __future__ import annotations

import torch

from ..cache import RadixCache
from ..memory import PageKind, UnifiedMemoryPool
from ..trace import NULL_TRACER, CacheEvent

CACHE_OWNER = "cache"
# which boundaries become checkpoints (besides the donated end state of every finished request):
#   chunk   -- every chunk-aligned boundary a prefill or decode passes (SGLang-like tracking)
#   every_n -- every ``checkpoint_interval`` tokens (a multiple of the chunk size)
#   branch  -- only the branching point a match reported (Marconi-like: leaves and branch points)
CHECKPOINT_POLICIES = ("chunk", "every_n", "branch")


def iter_chunk_states(items, batch, kda_layers: list[int], pool):
    """``(req, step start, position, write)`` for every chunk-start state the chunk kernel returned in
    this step (``batch.chunk_states``, SGLang's tracked ``h``); ``write(slot)`` stores that state —
    recurrent and conv, all KDA layers — into checkpoint ``slot``."""
    if not batch.chunk_states:
        return
    first = batch.chunk_states[kda_layers[0]]
    recs = [batch.chunk_states[layer] for layer in kda_layers]
    row = 0
    for j, n in enumerate(first["seq_ids"].tolist()):
        positions = first["positions"][j].tolist()
        for c, p in enumerate(positions):
            def write(ckpt, r=row + c):
                pool.write_checkpoint(ckpt, torch.stack([x["recurrent"][r] for x in recs]),
                                      torch.stack([x["conv"][r] for x in recs]))
            yield items[n].req, items[n].start, p, write
        row += len(positions)


class BoundaryMismatchError(RuntimeError):
    """A checkpoint about to be restored does not describe the boundary of the reused KV
    (article section 4.2, boundary consistency): restoring it would silently change the answer."""


class RadixPrefixCache:
    def __init__(self, pool: UnifiedMemoryPool, chunk_size: int = 64, tracer=NULL_TRACER, policy: str = "chunk",
                 interval: int | None = None, max_per_path: int | None = None):
        if policy not in CHECKPOINT_POLICIES:
            raise ValueError(f"checkpoint_policy: must be one of {CHECKPOINT_POLICIES}, got {policy!r}")
        if policy == "every_n" and (not isinstance(interval, int) or interval < chunk_size or interval % chunk_size):
            raise ValueError(f"checkpoint_interval: every_n needs a positive multiple of the chunk size "
                             f"{chunk_size}, got {interval!r}")
        if max_per_path is not None and (not isinstance(max_per_path, int) or max_per_path < 1):
            raise ValueError(f"max_checkpoints_per_path: must be a positive int or None, got {max_per_path!r}")
        self.policy, self.interval, self.max_per_path = policy, interval, max_per_path
        if pool.sizes.page_size != 1:
            raise ValueError(f"page_size: the radix prefix cache needs page_size=1 (one KV unit per token, "
                             f"as SGLang's MambaRadixCache v1), got {pool.sizes.page_size}")
        self.pool, self.chunk_size, self.tracer = pool, chunk_size, tracer
        self.tree = RadixCache(free_kv=lambda ids: pool.free(PageKind.MLA_KV, ids),
                               free_state=self._free_checkpoint, chunk_size=chunk_size)
        # checkpoint slot -> (token boundary, hash of the tokens before it) of its recurrent state and
        # conv windows, written when the checkpoint is made and checked when it is restored
        self.boundary: dict[int, tuple[int, int]] = {}
        self.step_id = 0
        self.needs_chunk_states = True
        self.evict_slack_bytes = 0
        self.stats = {"checkpoints_created": 0, "checkpoints_donated": 0, "checkpoints_evicted": 0, "hits": 0}

    def _free_checkpoint(self, slot: int) -> None:
        """Called when the tree drops a checkpoint (eviction, path cap, flush)."""
        boundary = self.boundary.pop(slot, None)
        self.pool.free(PageKind.CHECKPOINT, [slot])
        self.stats["checkpoints_evicted"] += 1
        self._emit("evict", None, None if boundary is None else boundary[0], "sglang.radix.tombstone", checkpoint=slot)

    def check_boundary(self, slot: int, tokens: list[int], kv_units: list[int]) -> None:
        """Raise :class:`BoundaryMismatchError` unless checkpoint ``slot`` holds the state (recurrent
        and conv) after exactly ``tokens`` and the KV to reuse covers exactly those tokens."""
        want = (len(tokens), hash(tuple(tokens)))
        got = self.boundary.get(slot)
        if got != want or len(kv_units) != len(tokens):
            raise BoundaryMismatchError(
                f"checkpoint {slot}: state recorded at boundary {None if got is None else got[0]}, restore "
                f"asked for {len(tokens)} tokens with {len(kv_units)} KV units; recurrent state, conv state and "
                f"MLA KV must describe the same token boundary")

    def _emit(self, op: str, req_id, position, concept: str, **detail) -> None:
        if self.tracer.enabled:
            self.tracer.emit(CacheEvent(step=self.step_id, op=op, req_id=req_id, node_id=None, position=position,
                                        detail=detail, concepts=(concept,)))

    # ---- admission -------------------------------------------------------------------------------
    def admit(self, req) -> int:
        """Reuse the longest checkpointed prefix of ``req``; returns its length (0 on a miss).

        On a hit ``req.pages`` starts with the tree's KV units, ``req.slot`` is a fresh active slot
        with a copy of the checkpoint, and the tree path is locked until :meth:`release`."""
        known = req.all_token_ids[: req.num_tokens - 1]
        if not known:
            return 0
        m = self.tree.match_prefix(known)
        self._emit("match", req.req_id, m.kv_len, "sglang.radix.match_backoff", kv_len=m.kv_len,
                   state_len=m.state_len, branching_len=m.branching_len)
        req.branching_len = m.branching_len
        if m.state_len < m.kv_len:
            self._emit("backoff", req.req_id, m.state_len, "sglang.radix.match_backoff", from_len=m.kv_len)
        if m.state_len == 0:
            return 0
        self.check_boundary(m.state_slot, known[: m.state_len], m.usable_indices)
        self.tree.inc_lock(m.state_node, state=True)
        (slot,) = self.pool.alloc(PageKind.KDA_STATE, 1, owner=req.req_id)
        self.pool.restore_checkpoint(m.state_slot, slot)
        self.tree.dec_lock(m.state_node, state=True)
        self.tree.inc_lock(m.state_node)  # keep the KV path for the request's lifetime
        self._emit("copy_on_write", req.req_id, m.state_len, "sglang.cow_snapshot_donate",
                   checkpoint=m.state_slot, active=slot)
        req.slot, req.pages = slot, list(m.usable_indices)
        req.shared_len, req.cache_node = m.state_len, m.state_node
        req.num_computed_tokens = m.state_len
        self.stats["hits"] += 1
        return m.state_len

    # ---- checkpoints ----------------------------------------------------------------------------
    def align_chunk(self, req, n: int) -> int:
        """A prefill chunk that does not finish the known tokens ends on a multiple of the chunk size
        when it can, so its final state is a checkpoint at a chunk-aligned boundary."""
        end = req.num_computed_tokens + n
        if end < req.num_tokens:
            aligned = end // self.chunk_size * self.chunk_size
            if aligned > req.num_computed_tokens:
                n = aligned - req.num_computed_tokens
        return n

    def wants(self, req, position: int) -> bool:
        """Does the policy keep a checkpoint at this (chunk-aligned) boundary of ``req``?"""
        if position <= req.shared_len or position % self.chunk_size:
            return False
        if self.policy == "every_n":
            return position % self.interval == 0
        if self.policy == "branch":
            return position == req.branching_len
        return True

    def _enforce_path_cap(self, node) -> None:
        """Keep at most ``max_per_path`` states on every root-to-leaf path through ``node``: tombstone
        the shallowest unlocked internal holders first, never ``node`` itself nor a leaf (SGLang's
        ``mamba_max_states_per_path``; a leaf without its state would be deleted)."""
        if self.max_per_path is None:
            return
        leaves, stack = [], [node]
        while stack:
            n = stack.pop()
            if n.is_leaf:
                leaves.append(n)
            stack.extend(n.children.values())
        for leaf in leaves:
            path = []
            n = leaf
            while n is not None and n is not self.tree.root:
                path.append(n)
                n = n.parent
            holders = [n for n in reversed(path) if n.state is not None]
            excess = len(holders) - self.max_per_path
            for n in holders:
                if excess <= 0:
                    break
                if n.state_lock == 0 and not n.is_leaf and n is not node:
                    self._free_checkpoint(n.state)
                    n.state = None
                    excess -= 1
                    self._emit("tombstone", None, None, "sglang.radix.tombstone", reason="per-path cap")

    def _adopt(self, req, length: int, state: int, kind: PageKind) -> bool:
        """Insert ``req``'s first ``length`` tokens with ``state``; move KV ownership to the tree.
        Returns whether the tree took the state."""
        tokens = req.all_token_ids[:length]
        units = req.pages[:length]
        existing, taken, last_node, tree_units = self.tree.insert_path(tokens, units, state)
        own_new = units[max(existing, req.shared_len):]
        if own_new:  # the request's units that now store tree tokens
            self.pool.retag(PageKind.MLA_KV, own_new, CACHE_OWNER)
        dup = units[req.shared_len:existing]  # the request's private copies of KV the tree already had
        req.pages[:length] = tree_units  # read the tree's units from now on
        if dup:
            self.pool.free(PageKind.MLA_KV, dup)
        if taken:
            self.pool.retag(kind, [state], CACHE_OWNER, PageKind.CHECKPOINT)
            self.boundary[state] = (length, hash(tuple(tokens)))
            self._enforce_path_cap(last_node)
        # the request now shares ``length`` tokens: move its lock down to the new node
        self.tree.inc_lock(last_node)
        if req.cache_node is not None:
            self.tree.dec_lock(req.cache_node)
        req.cache_node, req.shared_len = last_node, length
        return taken

    def snapshot(self, req, length: int, force: bool = False) -> None:
        """Save the active state of ``req`` (after exactly ``length`` tokens) as a checkpoint if the
        policy keeps that boundary (always with ``force``)."""
        if not (force and length > req.shared_len or self.wants(req, length)):
            return
        if not self.make_room(PageKind.CHECKPOINT, 1):
            return
        (ckpt,) = self.pool.alloc(PageKind.CHECKPOINT, 1, owner=req.req_id)
        self.pool.checkpoint_from_active(req.slot, ckpt)
        if self._adopt(req, length, ckpt, PageKind.CHECKPOINT):
            self.stats["checkpoints_created"] += 1
            self._emit("snapshot", req.req_id, length, "sglang.cow_snapshot_donate", checkpoint=ckpt)
        else:
            self.pool.free(PageKind.CHECKPOINT, [ckpt])

    def save_chunk_states(self, items, batch, kda_layers: list[int], align: int) -> None:
        """Free checkpoints: the chunk kernel's chunk-start states (and the matching conv windows,
        recorded by the KDA layers) at chunk-aligned positions inside this step's prefills."""
        for req, start, p, write in iter_chunk_states(items, batch, kda_layers, self.pool):
            self.offer_chunk_state(req, start, p, write)

    def offer_chunk_state(self, req, start: int, p: int, write) -> None:
        """The state after ``p`` tokens of ``req`` exists inside a step that started at ``start``;
        ``write(slot)`` copies it into a checkpoint slot. Kept if the policy wants ``p``."""
        if p > start and self.wants(req, p) and self.make_room(PageKind.CHECKPOINT, 1):
            (ckpt,) = self.pool.alloc(PageKind.CHECKPOINT, 1, owner=req.req_id)
            write(ckpt)
            if self._adopt(req, p, ckpt, PageKind.CHECKPOINT):
                self.stats["checkpoints_created"] += 1
                self._emit("checkpoint_create", req.req_id, p, "kda.chunk_checkpoints", checkpoint=ckpt)
            else:
                self.pool.free(PageKind.CHECKPOINT, [ckpt])

    def donate(self, req) -> None:
        """At finish: the active slot becomes the checkpoint after ``num_computed_tokens`` tokens."""
        length = req.num_computed_tokens
        if length <= req.shared_len:
            return
        if not self.pool.donates_by_retag:  # compressed checkpoints: a compressing copy, not a donation
            self.snapshot(req, length, force=True)
            return
        if self._adopt(req, length, req.slot, PageKind.KDA_STATE):
            self.stats["checkpoints_donated"] += 1
            self._emit("donate", req.req_id, length, "sglang.cow_snapshot_donate", checkpoint=req.slot)
            req.slot = None  # the tree owns it now

    # ---- release / memory -------------------------------------------------------------------------
    def release(self, req) -> None:
        if req.cache_node is not None:
            self.tree.dec_lock(req.cache_node)
            req.cache_node = None

    def make_room(self, kind: PageKind, n: int) -> bool:
        """Evict from the tree until ``n`` units of ``kind`` can be allocated (and, once evicting,
        until ``evict_slack_bytes`` more are free: the simulator evicts in batches)."""
        if self.pool.can_alloc(kind, n):
            return True
        target = n * self.pool.sizes.of(kind) + self.evict_slack_bytes
        sizes = self.pool.sizes
        while not (self.pool.can_alloc(kind, n) and self.pool.free_bytes >= target):
            deficit = max(target - self.pool.free_bytes, 1)
            freed = 0
            if kind is not PageKind.MLA_KV:  # states first (least recent), as many as the deficit needs
                freed = self.tree.evict_states(-(-deficit // sizes.of(PageKind.CHECKPOINT)))
            if not freed:
                freed = self.tree.evict_kv(max(n, -(-deficit // sizes.kv_page_bytes)))
            if not freed and kind is PageKind.MLA_KV:  # the bytes may sit in states on locked paths
                freed = self.tree.evict_states(-(-deficit // sizes.of(PageKind.CHECKPOINT)))
            if not freed:
                return self.pool.can_alloc(kind, n)
        return True

    def flush(self) -> None:
        """Drop every unlocked entry (used at shutdown and by tests to check nothing leaks)."""
        self.tree.evict_states(10**12)
        self.tree.evict_kv(10**12)

    def occupancy(self) -> dict:
        return {"cached_states": self.tree.num_states(), "cached_kv_tokens": self.tree.num_kv_tokens()}
