"""Checkpoint policies of the radix cache: which token boundaries keep a KDA state -- one class each.

Article concepts ``sglang.checkpoint_policy`` and ``ckpt.density`` (``docs/article.md#s5-2``, ``#s9-2``).
:class:`~kda_ref.cache.radix.RadixPrefixCache` asks its :class:`CheckpointPolicy` at five moments
(``on_admit``, ``cuts_chunks``, ``wants``, ``snapshot`` / ``offer_chunk_state``, ``donate``); a new
policy is one subclass registered in :data:`CHECKPOINT_POLICIES`. Ours: ``"chunk"``, ``"every_n"``,
``"branch"`` (Marconi-like), ``"sglang_no_buffer"`` (SGLang's ``cache_unfinished_req`` /
``cache_finished_req``) and ``"sglang"`` (SGLang's ``extra_buffer`` tracking).

Design notes: ``docs/radix_cache.md#the-policy-interface``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import ClassVar


class CheckpointPolicy:
    """The dense default: keep every chunk-aligned boundary (subclasses narrow :meth:`wants` or take
    over the moments they handle differently)."""

    name: ClassVar[str] = "chunk"
    needs_interval: ClassVar[bool] = False  # takes checkpoint_interval (every_n)
    uses_track_interval: ClassVar[bool] = False  # tracks decode states every track_interval tokens (sglang)

    @classmethod
    def check_options(cls, interval: int | None, chunk_size: int) -> None:
        """The policy's own options against the model's chunk size (``ValueError`` naming the option);
        :func:`check_radix_args` asks it, no caller compares policy names."""

    def __init__(self, interval: int | None = None):
        self.interval = interval  # every_n: tokens between checkpoints

    def on_admit(self, cache, seq) -> None:
        """A request is being admitted (before its match)."""

    def pinned_checkpoints(self) -> list[tuple[str, int]]:
        """Checkpoints one running request holds that eviction cannot take: the state at the end of its
        locked path (a leaf keeps its state; SGLang's ``inc_lock_ref`` locks the node's ``mamba_value``)."""
        return [("checkpoint its path's lock pins", 1)]

    def cuts_chunks(self) -> bool:
        """Whether prefill chunks are cut at chunk multiples so that their end states are checkpoints."""
        return True

    def wants(self, rec, position: int) -> bool:
        """Keep the state at ``position`` (chunk-aligned, past the request's shared prefix)? ``rec``: the
        cache's record of the request (its branching point)."""
        return True

    def snapshot(self, cache, seq, length: int, start: int | None, decode: bool, force: bool) -> None:
        """A step of ``seq`` ended after ``length`` tokens (it began at ``start``): save the active state if
        the policy keeps that boundary (always with ``force``)."""
        if force and length > cache.shared_len(seq) or cache.wants(seq, length):
            cache.checkpoint_active(seq, length)

    def offer_chunk_state(self, cache, seq, start: int, p: int, write) -> None:
        """The state after ``p`` tokens exists inside a step that began at ``start`` (a chunk start of the
        chunk kernel); ``write(slot)`` copies it out."""
        if p > start and cache.wants(seq, p):
            cache.checkpoint_from(seq, p, write)

    def donate(self, cache, seq) -> None:
        """``seq`` finished: its active slot becomes the checkpoint of everything it computed."""
        cache.donate_active(seq)

    def release(self, cache, seq) -> None:
        """``seq`` leaves the cache (finish, abort, preemption): give back what the policy reserved for it."""


class ChunkPolicy(CheckpointPolicy):
    name = "chunk"


class EveryNPolicy(CheckpointPolicy):
    name = "every_n"
    needs_interval = True

    @classmethod
    def check_options(cls, interval, chunk_size):
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < chunk_size or interval % chunk_size:
            raise ValueError(f"checkpoint_interval: every_n needs a positive multiple of the chunk size "
                             f"{chunk_size}, got {interval!r}")

    def wants(self, rec, position: int) -> bool:
        return position % self.interval == 0


class BranchPolicy(CheckpointPolicy):
    name = "branch"

    def wants(self, rec, position: int) -> bool:
        return position == rec.branching_len


class SGLangNoBufferPolicy(CheckpointPolicy):
    name = "sglang_no_buffer"

    def cuts_chunks(self) -> bool:
        return False  # SGLang's chunked prefill aligns only to the page size

    def wants(self, rec, position: int) -> bool:
        return False  # it chooses its states itself, at step ends

    def snapshot(self, cache, seq, length, start, decode, force):
        # cache_unfinished_req after a prefill chunk that leaves the prompt unfinished
        super().snapshot(cache, seq, length, start, decode, force or length < len(seq.prompt_token_ids))

    def offer_chunk_state(self, cache, seq, start, p, write):
        """no_buffer keeps only step-end states."""


@dataclass
class _Tracking:
    """One request's tracking: its two ping-pong slots (CHECKPOINT units it owns), the one the next state
    goes to, the last state tracked ``(position, slot)``, and this step's chunk-start states
    (``position -> write``) that the step's end picks from."""

    slots: list[int]
    next: int = 0
    last: tuple[int, int] | None = None
    step_writes: dict = field(default_factory=dict)


class SGLangPolicy(CheckpointPolicy):
    """SGLang's tracking (mamba strategy ``extra_buffer``), all of its state here, per request: one state
    per prefill step and the decode state every ``track_interval`` tokens go to two ping-pong track slots
    reserved at admission (``mamba_ping_pong_track_buffer``); a prefill step that leaves the prompt
    unfinished also inserts a copy into the tree (``cache_unfinished_req``); at finish the last tracked
    state is donated from its track slot (``cache_finished_req``). The radix cache gives the primitives
    (``reserve_slots``, ``adopt_copy``, ``adopt_slot``, ``free_slots``)."""

    name = "sglang"
    uses_track_interval = True

    def __init__(self, interval: int | None = None):
        super().__init__(interval)
        self.tracks: dict[int, _Tracking] = {}  # req_id -> its tracking; a request without room runs untracked

    def on_admit(self, cache, seq):
        if seq.req_id not in self.tracks:  # the request's two ping-pong track slots
            slots = cache.reserve_slots(seq, 2)
            if slots:
                self.tracks[seq.req_id] = _Tracking(slots)

    def pinned_checkpoints(self):
        return [*super().pinned_checkpoints(), ("ping-pong track slots of checkpoint_policy='sglang'", 2)]

    def cuts_chunks(self) -> bool:
        return False  # the tracked position is aligned relative to where the extend starts

    def wants(self, rec, position: int) -> bool:
        return False  # it chooses its states itself (tracking)

    def offer_chunk_state(self, cache, seq, start, p, write):
        t = self.tracks.get(seq.req_id)
        if t is not None and p > start:  # noted only: the step's end picks the one state it tracks
            t.step_writes[p] = write

    def snapshot(self, cache, seq, length, start, decode, force):
        t = self.tracks.get(seq.req_id)
        if start is None or t is None:
            return
        writes, t.step_writes = t.step_writes, {}
        if decode or (length - start == 1 and start >= len(seq.prompt_token_ids)):  # a decode or speculative step
            self._track_decode(cache, seq, t, start, length, writes)
        else:
            self._track_prefill(cache, seq, t, start, length, writes)

    def _track(self, cache, seq, t: _Tracking, p: int, write) -> None:
        """The state after ``p`` tokens into the next track slot (flip ping-pong)."""
        slot = t.slots[t.next]
        write(slot)
        t.last, t.next = (p, slot), 1 - t.next
        cache.record_track(seq, p, slot)

    def _track_decode(self, cache, seq, t: _Tracking, start: int, end: int, writes: dict) -> None:
        """A decode: the state when ``end`` is a multiple of ``track_interval`` (``ScheduleBatch.
        prepare_for_decode``'s ``mamba_track_mask``); a speculative step that accepted several tokens: the
        state at the last multiple its accepted run crossed, from the verify's per-token states."""
        bucket = end // cache.track_interval * cache.track_interval  # the last interval multiple reached
        write = cache.active_writer(seq) if bucket == end else writes.get(bucket)
        if bucket > start and write is not None:
            self._track(cache, seq, t, bucket, write)

    def _track_prefill(self, cache, seq, t: _Tracking, start: int, end: int, writes: dict) -> None:
        """A prefill step of at least one chunk: ONE state, at ``start + (L // C) * C`` -- or at the
        branching point the match reported, if it falls in this step at a chunk multiple from ``start``
        (``_mamba_radix_cache_v2_req_prepare_for_extend``); a step that does not finish the prompt also
        inserts a copy into the tree (``cache_unfinished_req``)."""
        L, C = end - start, cache.chunk_size
        if L < C:
            return
        tracked = start + L // C * C
        b = cache.branching_len(seq)
        if b is not None and start < b <= end and (b - start) % C == 0:
            tracked = b
        write = cache.active_writer(seq) if tracked == end else writes.get(tracked)
        if write is None:
            return
        self._track(cache, seq, t, tracked, write)
        if end < len(seq.prompt_token_ids):
            cache.adopt_copy(seq, tracked, write)

    def donate(self, cache, seq):
        """The last tracked state goes to the tree from its track slot; the working state is not kept."""
        t = self.tracks.get(seq.req_id)
        if t is not None and t.last is not None and cache.adopt_slot(seq, *t.last):
            t.slots.remove(t.last[1])
            t.last = None

    def release(self, cache, seq):
        t = self.tracks.pop(seq.req_id, None)
        if t is not None:  # the ping-pong slots the tree did not take
            cache.free_slots(t.slots)


CHECKPOINT_POLICIES: dict[str, type[CheckpointPolicy]] = {
    cls.name: cls for cls in (SGLangPolicy, SGLangNoBufferPolicy, ChunkPolicy, EveryNPolicy, BranchPolicy)}


def policy_class(policy) -> type[CheckpointPolicy]:
    """The class of ``checkpoint_policy``: a registered name's, or an object's own (a public policy hook,
    as ``spec_state`` takes a strategy); ``ValueError`` naming the option otherwise."""
    if isinstance(policy, CheckpointPolicy):
        return type(policy)
    if not isinstance(policy, str) or policy not in CHECKPOINT_POLICIES:
        raise ValueError(f"checkpoint_policy: must be one of {tuple(CHECKPOINT_POLICIES)} or a CheckpointPolicy, "
                         f"got {policy!r}")
    return CHECKPOINT_POLICIES[policy]


def make_policy(policy, interval: int | None = None) -> CheckpointPolicy:
    """The policy object for ``checkpoint_policy`` (a registered name, built with ``interval``, every_n's;
    or a :class:`CheckpointPolicy` given as an object, copied: each cache keeps its own per-request state)."""
    if isinstance(policy, CheckpointPolicy):  # its own copy: a policy keeps per-request state (tracking)
        return copy.deepcopy(policy)
    return policy_class(policy)(interval)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_radix_args(chunk_size: int, policy: str, interval: int | None, max_per_path: int | None,
                     track_interval: int) -> None:
    """The radix cache's arguments against the model's chunk size (``ValueError`` naming the option).
    The constructor runs it, and so does :meth:`~kda_ref.cache.RadixCacheOptions.check`, which ``LLM``
    calls before it allocates the pool."""
    cls = policy_class(policy)  # a registered name or a CheckpointPolicy object
    if not _is_int(track_interval) or track_interval < chunk_size or track_interval % chunk_size:
        raise ValueError(f"track_interval: must be a positive multiple of the chunk size {chunk_size}, "
                         f"got {track_interval!r}")
    cls.check_options(interval, chunk_size)
    if max_per_path is not None and (not _is_int(max_per_path) or max_per_path < 1):
        raise ValueError(f"max_checkpoints_per_path: must be a positive int or None, got {max_per_path!r}")
