"""``RadixPrefixCache``: the KDA-aware radix tree wired to the pool and to requests.

``docs/article.md#s5-1``, ``#s5-4`` (``sglang.radix.kda_aware``, ``sglang.cow_snapshot_donate``); the
request-side half of SGLang's ``MambaRadixCache`` (``match_prefix`` + copy-on-write at admission,
``cache_unfinished_req`` between prefill chunks, ``cache_finished_req`` at the end). Admission backs
off to the deepest checkpoint and copies it into a fresh active slot (copy-on-write,
``docs/article.md#s4-3``); a step that ends on a chunk-aligned boundary is snapshotted (copied); a
finished request's slot and KV are donated (re-tagged). ``page_size`` must be 1, as in SGLang's
``MambaRadixCache`` v1 (its no_buffer mode). Names as read at commit c1eb00f9; SGLang 0.5.23 does the same
through ``UnifiedRadixCache`` + ``unified_cache/components/mamba.py::MambaComponent``
(``checkpoint(req, up_to=...)`` for both calls, ``docs/radix_cache.md``).

Design notes: ``docs/radix_cache.md#a-requests-life-with-the-cache``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from ...kv_events.index import EVENT_BLOCK_SIZE
from ...memory import PageKind, PoolAccounting
from ...trace import NULL_TRACER, StepClock
from ...utils import cdiv
from ..base import CACHE_OWNER, PrefixCache
from ..sequence import Sequence
from ..picture import TREE_STEPS, tree_step
from .kv_blocks import RadixBlocks, walk_blocks
from .policies import CheckpointPolicy, check_radix_args, make_policy
from .tree import RadixTree, TreeNode

# which boundaries become checkpoints: one CheckpointPolicy object per name (kda_ref/cache/radix/policies.py)
DEFAULT_TRACK_INTERVAL = 256  # SGLang ServerArgs.mamba_track_interval's default


@dataclass
class _RadixSeq:
    """The cache's record of one running sequence."""

    node: TreeNode | None = None  # the node whose path the sequence keeps locked
    shared_len: int = 0  # leading tokens whose KV units belong to the tree
    branching_len: int | None = None  # where the match asked for a checkpoint (branch / sglang policy)


class BoundaryMismatchError(RuntimeError):
    """A checkpoint about to be restored does not describe the boundary of the reused KV
    (``docs/article.md#s4-2``, boundary consistency): restoring it would silently change the answer."""


class RadixPrefixCache(PrefixCache):
    kind = "radix"
    seq_record = _RadixSeq
    needs_chunk_states = True

    def __init__(self, pool: PoolAccounting, chunk_size: int = 64, tracer=NULL_TRACER, clock: StepClock | None = None,
                 policy: str = "chunk", interval: int | None = None, max_per_path: int | None = None,
                 track_interval: int = DEFAULT_TRACK_INTERVAL):
        check_radix_args(chunk_size, policy, interval, max_per_path, track_interval)
        if pool.sizes.page_size != 1:
            raise ValueError(f"page_size: the radix prefix cache needs page_size=1 (one KV unit per token, "
                             f"as SGLang's MambaRadixCache v1), got {pool.sizes.page_size}")
        super().__init__(pool, tracer, clock)
        self.policy: CheckpointPolicy = make_policy(policy, interval)
        self.max_per_path = max_per_path
        self.track_interval = track_interval
        self.chunk_size = chunk_size
        self.tree = RadixTree(free_kv=lambda ids: pool.free(PageKind.MLA_KV, ids),
                              free_state=self._free_checkpoint, chunk_size=chunk_size)
        # checkpoint slot -> (token boundary, hash of the tokens before it) of its recurrent state and
        # conv windows, written when the checkpoint is made and checked when it is restored
        self.boundary: dict[int, tuple[int, int]] = {}
        # demonstration / debug switch: False lets admit restore a checkpoint without check_boundary
        # (see without_boundary_check); never turned off by the engine itself
        self.check_boundaries = True
        self.stats = {"checkpoints_created": 0, "checkpoints_donated": 0, "checkpoints_evicted": 0, "hits": 0,
                      "states_tracked": 0}

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

    @contextmanager
    def without_boundary_check(self) -> Iterator[None]:
        """A demonstration / debug switch: inside the ``with`` block, :meth:`admit` restores checkpoints
        without :meth:`check_boundary` (a direct call still checks), so a restore from the wrong boundary
        runs and changes the answer instead of raising. Used by the "Restore paths" page's "break it"
        (``model_viz/scenarios/restore_paths.py``) on its own engine; SGLang has no such switch. The
        previous setting of :attr:`check_boundaries` comes back on exit, also on error."""
        before, self.check_boundaries = self.check_boundaries, False
        try:
            yield
        finally:
            self.check_boundaries = before

    # ---- admission -------------------------------------------------------------------------------
    def admit(self, seq: Sequence, reuse: bool = True) -> int:
        """Reuse the longest checkpointed prefix of ``seq``; returns its length (0 on a miss).

        On a hit ``seq.pages`` starts with the tree's KV units, ``seq.slot`` is a fresh active slot
        with a copy of the checkpoint, and the tree path is locked until :meth:`release`."""
        self.policy.on_admit(self, seq)
        known = seq.all_token_ids[: seq.num_tokens - 1]
        if not known or not reuse:
            return 0
        m = self.tree.match_prefix(known)
        self._emit("match", seq.req_id, m.kv_len, "sglang.radix.match_backoff", kv_len=m.kv_len,
                   state_len=m.state_len, branching_len=m.branching_len)
        rec = self._rec(seq)
        rec.branching_len = m.branching_len
        if m.state_len < m.kv_len:
            self._emit("backoff", seq.req_id, m.state_len, "sglang.radix.match_backoff", from_len=m.kv_len)
        if m.state_len == 0:
            return 0
        if self.check_boundaries:
            self.check_boundary(m.state_slot, known[: m.state_len], m.usable_indices)
        self.tree.inc_lock(m.state_node, state=True)
        (slot,) = self.pool.alloc(PageKind.KDA_STATE, 1, owner=seq.req_id)
        self.pool.restore_checkpoint(m.state_slot, slot)
        self.tree.dec_lock(m.state_node, state=True)
        self.tree.inc_lock(m.state_node)  # keep the KV path for the sequence's lifetime
        self._emit("copy_on_write", seq.req_id, m.state_len, "sglang.cow_snapshot_donate",
                   checkpoint=m.state_slot, active=slot)
        seq.slot, seq.pages = slot, list(m.usable_indices)
        rec.shared_len, rec.node = m.state_len, m.state_node
        seq.num_computed_tokens = m.state_len
        return m.state_len

    def admitted(self, seq: Sequence, hit: int) -> None:
        if hit:
            self.stats["hits"] += 1

    def picture(self, prompt, output, req_id, label, steps, reused=0, max_nodes=None):
        """The tree along the request's path, then its top (:func:`~kda_ref.cache.picture.tree_step`)."""
        return TREE_STEPS, tree_step(self.tree, prompt, output, req_id, label, steps, reused, max_nodes)

    def pinned_checkpoints(self) -> list[tuple[str, int]]:
        """The policy's (:meth:`CheckpointPolicy.pinned_checkpoints`)."""
        return self.policy.pinned_checkpoints()

    def decode_stride(self) -> int:
        """States are kept at chunk-aligned boundaries: one chunk."""
        return self.chunk_size

    # ---- checkpoints ----------------------------------------------------------------------------
    def align_chunk(self, seq: Sequence, n: int) -> int:
        """A prefill chunk that does not finish the known tokens ends on a multiple of the chunk size
        when it can, so its final state is a checkpoint at a chunk-aligned boundary. (The sglang
        policy does not cut: SGLang's chunked prefill only aligns to the page size, and its tracked
        position is aligned relative to where the extend starts.)"""
        if not self.policy.cuts_chunks():
            return n
        end = seq.num_computed_tokens + n
        if end < seq.num_tokens:
            aligned = end // self.chunk_size * self.chunk_size
            if aligned > seq.num_computed_tokens:
                n = aligned - seq.num_computed_tokens
        return n

    def wants(self, seq: Sequence, position: int) -> bool:
        """Does the policy keep a checkpoint at this (chunk-aligned) boundary of ``seq``?"""
        rec = self._rec(seq)
        if position <= rec.shared_len or position % self.chunk_size:
            return False
        return self.policy.wants(rec, position)

    def _enforce_path_cap(self, tail: TreeNode) -> None:
        """After the tree took a state at ``tail``: keep at most ``max_per_path`` states on the path from the root
        to ``tail``, tombstoning the shallowest eligible holders first. ``tail`` itself, forks (a node with other
        than one child: the state serves several branches) and locked nodes keep theirs, so the cap is a soft
        limit, as in SGLang (``--mamba-max-states-per-path``: ``unified_cache/components/mamba.py::
        MambaComponent._evict_excess_path_states``, run after each insert that stores a state)."""
        if self.max_per_path is None:
            return
        holders, n = [], tail
        while n is not None and n is not self.tree.root:
            if n.state is not None:
                holders.append(n)
            n = n.parent
        excess = len(holders) - self.max_per_path
        for n in reversed(holders):  # the shallowest first
            if excess <= 0 or n is tail:
                break
            if n.state_lock or len(n.children) != 1:
                continue
            self.tree.drop_state(n)
            excess -= 1
            self._emit("tombstone", None, None, "sglang.radix.tombstone", reason="per-path cap")

    def _adopt(self, seq: Sequence, length: int, state: int, kind: PageKind) -> bool:
        """Insert ``seq``'s first ``length`` tokens with ``state``; move KV ownership to the tree.
        Returns whether the tree took the state."""
        rec = self._rec(seq)
        tokens = seq.all_token_ids[:length]
        units = seq.pages[:length]
        existing, taken, last_node, tree_units = self.tree.insert_path(tokens, units, state)
        own_new = units[max(existing, rec.shared_len):]
        if own_new:  # the sequence's units that now store tree tokens
            self.pool.retag(PageKind.MLA_KV, own_new, CACHE_OWNER)
        dup = units[rec.shared_len:existing]  # the sequence's private copies of KV the tree already had
        seq.pages[:length] = tree_units  # read the tree's units from now on
        if dup:
            self.pool.free(PageKind.MLA_KV, dup)
        if taken:
            self.pool.retag(kind, [state], CACHE_OWNER, PageKind.CHECKPOINT)
            self.boundary[state] = (length, hash(tuple(tokens)))
            self._enforce_path_cap(last_node)
        # the sequence now shares ``length`` tokens: move its lock down to the new node
        self.tree.inc_lock(last_node)
        if rec.node is not None:
            self.tree.dec_lock(rec.node)
        rec.node, rec.shared_len = last_node, length
        return taken

    def snapshot(self, seq: Sequence, length: int, start: int | None = None, *, decode: bool = False,
                 force: bool = False) -> None:
        """Save the active state of ``seq`` (after exactly ``length`` tokens; this step began at
        ``start``) as a checkpoint if the policy keeps that boundary (always with ``force``)."""
        self.policy.snapshot(self, seq, length, start, decode, force)

    # ---- what a policy calls (kda_ref.cache.radix.policies) ------------------------------------------
    def shared_len(self, seq: Sequence) -> int:
        """Leading tokens of ``seq`` whose KV and state the tree already holds."""
        return self._rec(seq).shared_len

    def checkpoint_active(self, seq: Sequence, length: int) -> None:
        """A copy of ``seq``'s active state (after ``length`` tokens) adopted as a checkpoint."""
        self._checkpoint(seq, length, self.active_writer(seq), "snapshot", "sglang.cow_snapshot_donate")

    def checkpoint_from(self, seq: Sequence, p: int, write) -> None:
        """The state after ``p`` tokens, written by ``write(slot)``, adopted as a checkpoint (a chunk start)."""
        self._checkpoint(seq, p, write, "checkpoint_create", "kda.chunk_checkpoints")

    def branching_len(self, seq: Sequence) -> int | None:
        """Where ``seq``'s match asked for a checkpoint (the branching point), or None."""
        return self._rec(seq).branching_len

    def reserve_slots(self, seq: Sequence, n: int) -> list[int]:
        """``n`` checkpoint slots owned by ``seq`` with room left for its active slot (evicting for them), or
        ``[]`` when there is none: the sglang policy's ping-pong track slots (SGLang reserves
        ``mamba_ping_pong_track_buffer`` with the request)."""
        pool, sizes = self.pool, self.pool.sizes
        if pool.donates_by_retag:  # checkpoints are ordinary state slots: room for them and the active slot
            self.make_room(PageKind.KDA_STATE, n + 1)
            ok = pool.can_alloc(PageKind.KDA_STATE, n + 1)
        else:
            self.make_room(PageKind.CHECKPOINT, n)
            self.make_room(PageKind.KDA_STATE, 1)
            ok = (pool.can_alloc(PageKind.CHECKPOINT, n)
                  and pool.free_bytes >= n * sizes.of(PageKind.CHECKPOINT) + sizes.state_bytes)
        return pool.alloc(PageKind.CHECKPOINT, n, owner=seq.req_id) if ok else []

    def free_slots(self, slots: list[int]) -> None:
        """Give back checkpoint slots a request reserved and the tree did not take."""
        if slots:
            self.pool.free(PageKind.CHECKPOINT, slots)

    def record_track(self, seq: Sequence, p: int, slot: int) -> None:
        """Count and trace a state tracked into ``slot`` after ``p`` tokens (the sglang policy)."""
        self.stats["states_tracked"] += 1
        self._emit("track", seq.req_id, p, "sglang.checkpoint_policy", checkpoint=slot)

    def adopt_copy(self, seq: Sequence, p: int, write) -> None:
        """``cache_unfinished_req``: a copy of the state after ``p`` tokens (``write(slot)``) inserted into the
        tree, if there is room and the tree has no state there yet."""
        if p <= self._rec(seq).shared_len or not self.make_room(PageKind.CHECKPOINT, 1):
            return
        self._checkpoint(seq, p, write, "snapshot", "sglang.cow_snapshot_donate")

    def adopt_slot(self, seq: Sequence, p: int, slot: int) -> bool:
        """``cache_finished_req`` with extra_buffer: the reserved ``slot`` holding the state after ``p`` tokens
        goes to the tree (a re-tag, no copy); whether the tree took it."""
        if p <= self._rec(seq).shared_len or not self._adopt(seq, p, slot, PageKind.CHECKPOINT):
            return False
        self.stats["checkpoints_donated"] += 1
        self._emit("donate", seq.req_id, p, "sglang.cow_snapshot_donate", checkpoint=slot)
        return True

    def _checkpoint(self, seq: Sequence, length: int, write, op: str, concept: str) -> bool | None:
        """Make room, take a checkpoint slot, ``write(slot)`` the state after ``length`` tokens into it
        and adopt it into the tree at that boundary: True when adopted, False when the tree already
        had a node there (the slot goes back), None when there was no room."""
        ckpt = self._new_checkpoint(seq, write)
        if ckpt is None:
            return None
        if not self._adopt(seq, length, ckpt, PageKind.CHECKPOINT):
            self.pool.free(PageKind.CHECKPOINT, [ckpt])
            return False
        self.stats["checkpoints_created"] += 1
        self._emit(op, seq.req_id, length, concept, checkpoint=ckpt)
        return True

    def keep_state(self, seq: Sequence, length: int) -> bool:
        """Whatever the policy (the sglang policies included): a checkpoint of the active state at ``length``."""
        if seq.slot is None or length <= self._rec(seq).shared_len:
            return False
        kept = self._checkpoint(seq, length, self.active_writer(seq), "snapshot", "sglang.cow_snapshot_donate")
        if kept is False:
            node = self._rec(seq).node  # the node of exactly ``length`` tokens
            return node is not None and node.state is not None  # the tree had that state already
        return bool(kept)

    def offer_chunk_state(self, seq: Sequence, start: int, p: int, write, *, speculative: bool = False) -> None:
        """Free checkpoints: the state after ``p`` tokens of ``seq`` exists inside a step that started
        at ``start`` (a chunk-start state of the chunk kernel, with the matching conv window);
        ``write(slot)`` copies it into a checkpoint slot. Kept if the policy wants ``p`` (the sglang
        policy only notes it: :meth:`snapshot` picks the one state of the step)."""
        self.policy.offer_chunk_state(self, seq, start, p, write)

    def donate(self, seq: Sequence) -> None:
        """At finish: the active slot becomes the checkpoint after ``num_computed_tokens`` tokens
        (sglang policy: the last *tracked* state is donated instead, from its track slot)."""
        self.policy.donate(self, seq)

    def donate_active(self, seq: Sequence) -> None:
        """The active slot of finished ``seq`` adopted by the tree as its end state (a re-tag, no copy)."""
        length = seq.num_computed_tokens
        if length <= self._rec(seq).shared_len:
            return
        if not self.pool.donates_by_retag:  # compressed checkpoints: a compressing copy, not a donation
            self.snapshot(seq, length, force=True)
            return
        if self._adopt(seq, length, seq.slot, PageKind.KDA_STATE):
            self.stats["checkpoints_donated"] += 1
            self._emit("donate", seq.req_id, length, "sglang.cow_snapshot_donate", checkpoint=seq.slot)
            seq.slot = None  # the tree owns it now

    # ---- release / memory -------------------------------------------------------------------------
    def release(self, seq: Sequence) -> None:
        rec = self._seqs.pop(seq.req_id, None)
        if rec is not None and rec.node is not None:
            self.tree.dec_lock(rec.node)
        # what the policy reserved for it at admission (the sglang policy's track slots), record or not: a
        # one-token prompt has nothing to match, so admission keeps no record for it
        self.policy.release(self, seq)

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
                freed = self.tree.evict_states(cdiv(deficit, sizes.of(PageKind.CHECKPOINT)))
            if not freed:
                freed = self.tree.evict_kv(max(n, cdiv(deficit, sizes.kv_page_bytes)))
            if not freed and kind is PageKind.MLA_KV:  # the bytes may sit in states on locked paths
                freed = self.tree.evict_states(cdiv(deficit, sizes.of(PageKind.CHECKPOINT)))
            if not freed:
                return self.pool.can_alloc(kind, n)
        return True

    def flush(self) -> None:
        """Drop every unlocked entry (used at shutdown and by tests to check nothing leaks)."""
        self.tree.evict_states(10**12)
        self.tree.evict_kv(10**12)
        if self.tree.observer is not None:  # the next KV-event batch clears, then stores what is left
            self.tree.observer.journals.restart(self.kv_blocks())

    def kv_blocks(self, block_size: int | None = None):
        """The tree as KV-event blocks (:mod:`kda_ref.kv_events.index`): every full ``block_size`` block of
        KV along a path, and for each checkpoint the block that ends at it. The tree keeps KV per token
        (SGLang's ``page_size`` 1), so the default is vLLM's block of 16 tokens, or the pool's KV page when
        that is larger."""
        return walk_blocks(self.tree, block_size or max(EVENT_BLOCK_SIZE, self.pool.sizes.page_size))

    def kv_journal(self):
        index = self.kv_blocks()
        if self.tree.observer is None:
            self.tree.observer = RadixBlocks(self.tree, index.block_size)
        return self.tree.observer.journals.open(index)

    def close_kv_journal(self, journal) -> None:
        """Close ``journal``; with the last one the tree stops telling (and forgets the blocks it kept)."""
        if self.tree.observer is not None:
            self.tree.observer.journals.close(journal)
            if not self.tree.observer.journals:
                self.tree.observer = None

    def occupancy(self) -> dict:
        return {"cached_states": self.tree.num_states(), "cached_kv_tokens": self.tree.num_kv_tokens()}
