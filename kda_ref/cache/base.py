"""``PrefixCache``: the one interface the scheduler and the simulator drive every prefix cache through.

Three implementations, built by :func:`kda_ref.cache.options.make_prefix_cache`: :class:`NoPrefixCache`
(``prefix_cache="none"``), :class:`~kda_ref.cache.radix.RadixPrefixCache` (``"radix"``, SGLang's
``MambaRadixCache``) and :class:`~kda_ref.cache.block.BlockPrefixCache` (``"block"``, vLLM's
``KVCacheManager`` + ``HybridKVCacheCoordinator`` + ``MambaManager``). The scheduler calls ``make_room``,
``admit``, ``align_chunk``, then per step ``save_boundary_states`` / ``snapshot``, and at finish ``donate``
and ``release`` (SGLang's ``match_prefix`` -> ``cache_unfinished_req`` -> ``cache_finished_req``; vLLM's
``get_computed_blocks`` -> ``allocate_slots`` / ``cache_blocks`` -> ``free``). Per-sequence records live
in the cache, keyed by ``req_id``.

Design notes: ``docs/radix_cache.md#the-prefixcache-interface``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Iterator

import torch

from ..memory import PageKind, PoolAccounting
from ..trace import NULL_TRACER, CacheEvent, StepClock
from .sequence import Sequence

CACHE_OWNER = "cache"  # the owner tag of pool units that belong to a prefix cache


def iter_boundary_states(scheduled: list[tuple[Sequence, int]], chunk_states: dict,
                         pool: PoolAccounting) -> Iterator[tuple[Sequence, int, int, Callable[[int], None]]]:
    """``(seq, step start, position, write)`` for every chunk-start state a forward returned.

    ``scheduled[n] = (seq, start)`` is the n-th sequence of the batch and the token it started at;
    ``chunk_states`` maps each KDA layer to its :class:`~kda_ref.model.output.BoundaryStates`
    (SGLang's tracked ``h``). ``write(slot)`` stores that state -- recurrent and conv, all KDA
    layers -- into checkpoint ``slot``.
    """
    if not chunk_states:
        return
    layers = [layer for layer in pool.config.kda_layer_ids if layer in chunk_states]
    first, recs = chunk_states[layers[0]], [chunk_states[layer] for layer in layers]
    row = 0
    for j, n in enumerate(first.seq_ids.tolist()):
        positions = first.positions[j].tolist()
        seq, start = scheduled[n]
        for c, p in enumerate(positions):
            def write(ckpt, r=row + c):
                pool.write_checkpoint(ckpt, torch.stack([x.recurrent[r] for x in recs]),
                                      torch.stack([x.conv[r] for x in recs]))
            yield seq, start, p, write
        row += len(positions)


class PrefixCache(ABC):
    """The interface (see the module docstring). Subclasses keep per-sequence records in
    ``self._seqs`` (``req_id -> record`` with a ``shared_len`` attribute), made by ``seq_record()``."""

    kind: ClassVar[str]
    seq_record: ClassVar[type] = object  # a subclass's per-sequence record, made on first use by _rec
    needs_chunk_states: bool = False  # the runner must return the chunk kernel's chunk-start states

    def __init__(self, pool: PoolAccounting, tracer=NULL_TRACER, clock: StepClock | None = None):
        self.pool, self.tracer = pool, tracer
        self.clock = clock if clock is not None else StepClock()
        self.evict_slack_bytes = 0  # once evicting, free this many bytes beyond the need (simulator)
        self.stats: dict[str, int] = {}
        self._seqs: dict[int, object] = {}

    enabled: bool = True  # False only for NoPrefixCache (a class attribute: the scheduler asks every step)

    def kv_blocks(self, block_size: int | None = None):
        """What this cache holds as KV-event blocks (a :class:`~kda_ref.kv_events.index.BlockIndex`: the
        MLA KV blocks and the blocks that end at a cached KDA state), by a walk of the whole cache; None for a
        cache that holds nothing."""
        return None

    def kv_journal(self):
        """A new :class:`~kda_ref.kv_events.journal.BlockJournal` of this cache's KV-event blocks: its first batch
        stores what :meth:`kv_blocks` holds now, and the cache tells it every change from then on, until
        :meth:`close_kv_journal`; None for a cache that holds nothing. The server's KV-event recorder
        (:mod:`kda_ref.server.kv_publish`) opens one and takes its batches from it."""
        return None

    def close_kv_journal(self, journal) -> None:
        """Stop telling ``journal`` (its recorder closed); with none open the cache's hooks do nothing."""

    def picture(self, prompt: list[int], output: list[int], req_id: int, label: str, steps: list[int],
                       reused: int = 0, max_nodes: int | None = None) -> tuple[str, dict] | None:
        """``(header key, snapshot)``: what the cache holds after request ``req_id`` finished, in the format
        its page draws (:mod:`kda_ref.cache.picture`), or None for a cache without a picture. The Lab and
        the server's live trace take it through :func:`~kda_ref.cache.picture.cache_picture`."""
        return None

    # ---- admission and scheduling -----------------------------------------------------------------
    @abstractmethod
    def admit(self, seq: Sequence, reuse: bool = True) -> int:
        """Reuse the longest usable cached prefix of ``seq``; returns its length (0 on a miss). On a
        hit ``seq.slot`` is a fresh active slot holding a copy of the cached state and ``seq.pages``
        starts with the cache's KV pages, locked while the sequence runs. ``reuse=False``: a miss by
        request (its prompt must be computed whole: prompt logprobs), with the admission's bookkeeping."""

    def admitted(self, seq: Sequence, hit: int) -> None:
        """The admission of ``seq`` that :meth:`admit` answered with ``hit`` holds (the scheduler found room
        for its chunk): a cache counts its hits here, once per admission -- one undone for want of room
        (:meth:`release`) is retried at a later step and would otherwise count again each time. The scheduler
        passes ``hit = 0`` for a preempted request's readmission (its recompute is not a hit, as the prompt
        tokens it counts). Nothing by default."""

    @abstractmethod
    def align_chunk(self, seq: Sequence, n: int) -> int:
        """How many of the ``n`` tokens the budget allows to run now, so that the states this cache
        wants exist at the end of the step."""

    @abstractmethod
    def make_room(self, kind: PageKind, n: int) -> bool:
        """Evict until ``n`` units of ``kind`` can be allocated; returns whether they can."""

    def decode_stride(self) -> int:
        """Tokens between the positions where this cache may keep a state while a request decodes: the
        cost-model simulator (:class:`~kda_ref.sim.CacheSimulator`) stops a decode stretch at each of them.
        Without a cache, one KV page."""
        return self.pool.sizes.page_size

    def pinned_checkpoints(self) -> list[tuple[str, int]]:
        """``[(what, count)]``: the checkpoint units one running request may hold that no eviction can
        take while it runs (its own track or pending slots, the state its path's lock pins). The
        scheduler counts them in a request's peak (:func:`kda_ref.engine.demand.request_demand`)."""
        return []

    # ---- states at boundaries ---------------------------------------------------------------------
    @abstractmethod
    def offer_chunk_state(self, seq: Sequence, start: int, p: int, write: Callable[[int], None], *,
                          speculative: bool = False) -> None:
        """The state after ``p`` tokens of ``seq`` exists inside a step that started at ``start``;
        ``write(slot)`` copies it into a checkpoint slot. ``speculative``: it is a state inside the
        kept run of a speculative verify (not a chunk-start state of a prefill)."""

    def save_boundary_states(self, scheduled: list[tuple[Sequence, int]], chunk_states: dict, *,
                             speculative: bool = False) -> None:
        """Offer every boundary state of a forward (see :func:`iter_boundary_states`): the chunk
        kernel's chunk-start states, or with ``speculative`` the states inside kept speculative runs."""
        for seq, start, p, write in iter_boundary_states(scheduled, chunk_states, self.pool):
            self.offer_chunk_state(seq, start, p, write, speculative=speculative)

    @abstractmethod
    def snapshot(self, seq: Sequence, length: int, start: int | None = None, *, decode: bool = False) -> None:
        """After a step that began at token ``start``, the active state of ``seq`` describes ``length``
        tokens: keep it if wanted. ``decode``: the step was a decode or a speculative verify (its
        tokens were generated, not prefilled)."""

    def keep_state(self, seq: Sequence, length: int) -> bool:
        """Keep the active state of ``seq`` (after exactly ``length`` tokens, computed elsewhere: a
        disaggregated prefill's handoff) as a cached state, whatever the checkpoint policy would
        choose; whether the cache now holds it. Caches that only keep what they computed themselves
        ignore it."""
        return False

    @abstractmethod
    def donate(self, seq: Sequence) -> None:
        """``seq`` finished: its active state may become a cached state (a re-tag, not a copy)."""

    # ---- end of a sequence, memory ---------------------------------------------------------------------
    @abstractmethod
    def release(self, seq: Sequence) -> None:
        """Unlock what ``seq`` borrowed and forget its record (finish, abort, preemption)."""

    def shared_tokens(self, seq: Sequence) -> int:
        """Leading tokens of ``seq`` whose KV pages belong to the cache (not freed with ``seq``)."""
        rec = self._seqs.get(seq.req_id)
        return 0 if rec is None else rec.shared_len

    def _rec(self, seq: Sequence):
        """``seq``'s record, made (``seq_record()``) on first use."""
        rec = self._seqs.get(seq.req_id)
        if rec is None:
            rec = self._seqs[seq.req_id] = self.seq_record()
        return rec

    def active_writer(self, seq: Sequence):
        """``write(slot)`` copying ``seq``'s active state (recurrent and conv) into a checkpoint slot (the
        radix policies call it for the state a step ends on)."""
        return lambda ckpt: self.pool.checkpoint_from_active(seq.slot, ckpt)

    def _new_checkpoint(self, seq: Sequence, write) -> int | None:
        """Make room for a checkpoint slot (owned by ``seq`` until the cache adopts it), ``write(slot)`` the state
        into it and return the slot; None when there is no room."""
        if not self.make_room(PageKind.CHECKPOINT, 1):
            return None
        (ckpt,) = self.pool.alloc(PageKind.CHECKPOINT, 1, owner=seq.req_id)
        write(ckpt)
        return ckpt

    @abstractmethod
    def flush(self) -> None:
        """Drop every unlocked entry (shutdown; tests use it to check that nothing leaks)."""

    @abstractmethod
    def occupancy(self) -> dict:
        """What the cache holds now (``cached_states``, ``cached_kv_tokens``)."""

    def _emit(self, op: str, req_id, position, concept: str, **detail) -> None:
        if self.tracer.enabled:
            self.tracer.emit(CacheEvent(step=self.clock.step, op=op, req_id=req_id, node_id=None, position=position,
                                        detail=detail, concepts=(concept,)))


class NoPrefixCache(PrefixCache):
    """``prefix_cache="none"``: nothing is shared; every request prefills from token 0."""

    kind = "none"
    enabled = False

    def admit(self, seq: Sequence, reuse: bool = True) -> int:
        return 0

    def align_chunk(self, seq: Sequence, n: int) -> int:
        return n

    def make_room(self, kind: PageKind, n: int) -> bool:
        return self.pool.can_alloc(kind, n)

    def offer_chunk_state(self, seq, start, p, write, *, speculative: bool = False) -> None:
        return None

    def snapshot(self, seq: Sequence, length: int, start: int | None = None, *, decode: bool = False) -> None:
        return None

    def donate(self, seq: Sequence) -> None:
        return None

    def release(self, seq: Sequence) -> None:
        return None

    def flush(self) -> None:
        return None

    def occupancy(self) -> dict:
        return {}
