"""Typed trace events: what the engine did at each step, as small JSON-able records.

Every event is a frozen, slotted dataclass with a class-level ``kind`` (its key in
:data:`EVENT_TYPES`), its engine ``step``, fields named the way SGLang / vLLM name the same thing and
holding only plain JSON values (never tensors: :func:`~kda_ref.trace.summary.summarize_tensor`), and
``concepts``, the ids of the article concepts it illustrates. Construction validates every field
(:mod:`kda_ref.trace.fields`); errors are :class:`EventFieldError` (a ``TypeError`` and a
``ValueError``) naming the event class and the field.

Design notes: ``docs/trace.md#events``.
"""

import re
import typing
from dataclasses import MISSING, dataclass, fields
from typing import ClassVar, Literal

from .fields import JSON, EventFieldError, compile_checker, describe

__all__ = [
    "BLOCK_TABLE_TAIL", "JSON", "EventFieldError", "TraceEvent", "EVENT_TYPES", "PHASES", "SLOT_OPS", "PAGE_OPS", "CACHE_OPS",
    "RequestArrived", "RequestFinished", "RequestAborted", "ScheduleDecision", "BatchComposition",
    "KernelDispatch", "StateSlotEvent", "ConvStateUpdate", "KVPageEvent", "Preemption", "PoolSnapshot",
    "CacheEvent", "AdmissionRefused", "EngineStall", "SpecVerify", "GraphBucket", "event_concepts",
]

PHASES = ("extend", "decode", "verify")  # KDAPhase values (kda_ref.ops.dispatcher)
SLOT_OPS = ("alloc", "free", "read", "write", "copy")
PAGE_OPS = ("alloc", "free")
# Ops the prefix-cache issues are expected to emit with CacheEvent; informative, not enforced.
CACHE_OPS = ("match", "backoff", "checkpoint_create", "copy_on_write", "snapshot", "donate", "evict",
             "tombstone", "insert", "lock", "unlock", "partial_hit", "pending", "commit", "track")

_CONCEPT_ID = re.compile(r"[a-z_]+(\.[a-z0-9_]+)+")


# ---------------------------------------------------------------------------------------------
# the base class and the registry
# ---------------------------------------------------------------------------------------------

EVENT_TYPES: dict[str, type["TraceEvent"]] = {}


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """Base of all events. Subclasses set ``kind`` and are registered in :data:`EVENT_TYPES`."""

    kind: ClassVar[str] = ""
    # ((field name, "Class.field", checker, exact scalar type or None, immutable default or a sentinel), ...)
    _checkers: ClassVar[tuple] = ()
    _field_names: ClassVar[frozenset] = frozenset()
    # the fields a decoded object must have, in order: those without a default (a field added later with a
    # default reads traces written before it)
    _required: ClassVar[tuple] = ()

    def __post_init__(self) -> None:
        for name, where, check, exact, default in self._checkers:
            v = getattr(self, name)
            if type(v) is exact or v is default:  # fast path: a plain int / str, or the default
                continue
            nv = check(v, where)
            if nv is not v:
                object.__setattr__(self, name, nv)
        self._check()

    def _check(self) -> None:
        """Cross-field consistency checks (override); raise :class:`EventFieldError`."""

    def _bad(self, field: str, message: str):
        raise EventFieldError(f"{type(self).__name__}.{field}", message)

    def to_dict(self) -> dict:
        """``{"kind": ..., field: value, ...}``, ready for ``json.dumps``."""
        d = {"kind": self.kind}
        for c in self._checkers:
            d[c[0]] = getattr(self, c[0])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TraceEvent":
        """Build and validate an event from a decoded JSON object (with or without ``"kind"``).

        Missing or unexpected fields and wrong types raise :class:`EventFieldError` naming them.
        """
        if not isinstance(d, dict):
            raise EventFieldError(cls.__name__, f"expected a JSON object, got {describe(d)}")
        kw = {k: v for k, v in d.items() if k != "kind"}
        if "kind" in d and d["kind"] != cls.kind:
            raise EventFieldError(f"{cls.__name__}.kind", f"expected {cls.kind!r}, got {d['kind']!r}")
        missing = [name for name in cls._required if name not in kw]
        if missing:
            raise EventFieldError(f"{cls.__name__}.{missing[0]}",
                                  f"missing field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
        extra = sorted(set(kw) - cls._field_names)
        if extra:
            raise EventFieldError(f"{cls.__name__}.{extra[0]}",
                                  f"unexpected field{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))}")
        return cls(**kw)


_NO_DEFAULT = object()


def _event(cls):
    """Make ``cls`` a frozen slotted dataclass, compile its field checkers, register its kind."""
    cls = dataclass(frozen=True, slots=True)(cls)
    if not cls.kind or not re.fullmatch(r"[a-z_]+", cls.kind):
        raise TypeError(f"{cls.__name__}: kind must be a snake_case string, got {cls.kind!r}")
    if cls.kind in EVENT_TYPES:
        raise TypeError(f"{cls.__name__}: kind {cls.kind!r} is already registered by {EVENT_TYPES[cls.kind].__name__}")
    hints = typing.get_type_hints(cls)
    flds = fields(cls)
    if not flds or flds[0].name != "step" or flds[-1].name != "concepts":
        raise TypeError(f"{cls.__name__}: fields must start with 'step' and end with 'concepts'")
    checkers = []
    for f in flds:
        tp = hints[f.name]
        exact = tp if tp in (int, str, bool) else None  # already normalised when of this exact type
        default = f.default if isinstance(f.default, (tuple, type(None))) else _NO_DEFAULT
        if default is None and type(None) not in typing.get_args(tp):
            default = _NO_DEFAULT
        checkers.append((f.name, f"{cls.__name__}.{f.name}", compile_checker(tp), exact, default))
    cls._checkers = tuple(checkers)
    cls._field_names = frozenset(f.name for f in flds)
    cls._required = tuple(f.name for f in flds if f.default is MISSING and f.default_factory is MISSING)
    EVENT_TYPES[cls.kind] = cls
    return cls


def event_concepts(cls: type[TraceEvent]) -> tuple[str, ...]:
    """The default concept ids of an event type (``()`` when the caller must pass them)."""
    for f in fields(cls):
        if f.name == "concepts":
            return tuple(f.default) if f.default is not MISSING else ()
    return ()


# ---------------------------------------------------------------------------------------------
# request lifecycle
# ---------------------------------------------------------------------------------------------

@_event
class RequestArrived(TraceEvent):
    """A request entered the waiting queue (``add_request``).

    Mirrors SGLang ``Scheduler.handle_generate_request`` (a ``Req`` appended to the waiting queue)
    and vLLM v1 ``Scheduler.add_request`` (``self.waiting.add_request``).
    """

    kind: ClassVar[str] = "request_arrived"
    step: int
    req_id: int
    prompt_len: int
    max_tokens: int
    concepts: tuple[str, ...] = ("engine.continuous_batching",)


@_event
class RequestFinished(TraceEvent):
    """A request finished; ``reason`` is ``"stop"`` (a stop token) or ``"length"`` (``max_tokens`` or
    the context limit), ``output_len`` the tokens it generated. Its slot and pages are freed in the
    same step (see :class:`StateSlotEvent` / :class:`KVPageEvent`).

    Mirrors SGLang ``Req.check_finished`` (0.5.23: ``update_finish_state``) + ``Scheduler.process_batch_result``
    and vLLM v1 ``Scheduler.update_from_output`` (``check_stop``, then ``_free_request``).
    """

    kind: ClassVar[str] = "request_finished"
    step: int
    req_id: int
    reason: str
    output_len: int
    concepts: tuple[str, ...] = ("engine.continuous_batching",)


@_event
class RequestAborted(TraceEvent):
    """A request was aborted by the caller (``LLM.abort``), waiting or running.

    Mirrors SGLang ``Scheduler.abort_request`` and vLLM v1 ``Scheduler.finish_requests``
    (with ``RequestStatus.FINISHED_ABORTED``).
    """

    kind: ClassVar[str] = "request_aborted"
    step: int
    req_id: int
    concepts: tuple[str, ...] = ("engine.continuous_batching",)


# ---------------------------------------------------------------------------------------------
# scheduling and the batch
# ---------------------------------------------------------------------------------------------

@_event
class ScheduleDecision(TraceEvent):
    """One scheduler decision: who runs this step and with how many tokens.

    ``running`` / ``waiting``: request ids in the queues after the decision; ``admitted``: ids moved
    from waiting to running this step; ``prefill_chunks``: ``(req_id, tokens)`` for every request
    that runs a prefill chunk (a whole prompt is one chunk); ``decodes``: ids that decode one token;
    ``verifies``: ``(req_id, tokens)`` for every speculative request that verifies drafts (its last
    committed token and the drafts, or a draft tree's nodes); ``tokens_scheduled`` of ``token_budget``
    (``max_num_batched_tokens``) were used.

    Mirrors vLLM v1 ``Scheduler.schedule`` (``token_budget``, ``num_scheduled_tokens``,
    ``scheduled_new_reqs`` / ``scheduled_running_reqs``) and SGLang ``Scheduler.get_next_batch_to_run``
    with ``PrefillAdder`` (``rem_chunk_tokens``, ``new_chunked_req``).
    """

    kind: ClassVar[str] = "schedule_decision"
    step: int
    running: list[int]
    waiting: list[int]
    admitted: list[int]
    prefill_chunks: list[tuple[int, int]]
    decodes: list[int]
    token_budget: int
    tokens_scheduled: int
    verifies: list[tuple[int, int]] | None = None  # None: a trace written before verifies had their own list
    concepts: tuple[str, ...] = ("engine.continuous_batching", "engine.chunked_prefill")

    def _check(self):
        if self.tokens_scheduled < 0 or self.token_budget < 0:
            self._bad("tokens_scheduled", "token counts must be >= 0")
        chunk_tokens = sum(n for _, n in self.prefill_chunks)
        verify_tokens = sum(n for _, n in self.verifies or ())
        if chunk_tokens + len(self.decodes) + verify_tokens != self.tokens_scheduled:
            self._bad("tokens_scheduled", f"{self.tokens_scheduled} != prefill chunk tokens {chunk_tokens} "
                                          f"+ decodes {len(self.decodes)} + verified tokens {verify_tokens}")


BLOCK_TABLE_TAIL = 16  # the pages of a sequence's block table a BatchComposition carries (its last ones)


@_event
class BatchComposition(TraceEvent):
    """The varlen batch of one forward: the new tokens of every scheduled sequence packed in one row.

    Per sequence n (in batch order): ``req_ids[n]``, its tokens ``cu_seqlens[n]:cu_seqlens[n+1]``,
    ``context_lens[n]`` tokens already cached before this batch (``has_initial_state`` is
    ``context_lens[n] > 0``), its phase (``"extend"`` or ``"decode"``; ``"verify"`` in speculative
    decoding), its KDA state slot ``state_indices[n]``, and optionally the last (at most
    :data:`BLOCK_TABLE_TAIL`) pages ``block_tables[n]`` of the ``num_pages[n]`` its MLA block table holds
    (``num_pages`` None: an older trace with whole rows; ``docs/trace.md#events-that-stay-small-on-long-runs``).
    ``own_forwards``: the sequences that ran in a forward of their own after the packed one -- a draft tree's
    root and nodes (:func:`kda_ref.engine.tree_verify.run_tree`), last in the batch; their segments count
    every token they computed (None: no such sequence, or a trace written before the field, whose tree
    segments hold the root alone).

    Mirrors SGLang ``ForwardBatch`` + ``MambaAttnBackendBase._forward_metadata``
    (``query_start_loc``, ``mamba_cache_indices``) and vLLM ``GDNAttentionMetadata``
    (``non_spec_query_start_loc``, ``non_spec_state_indices_tensor``, ``has_initial_state``); ours is
    :class:`kda_ref.model.batch.ForwardBatch`.
    """

    kind: ClassVar[str] = "batch_composition"
    step: int
    req_ids: list[int]
    cu_seqlens: list[int]
    context_lens: list[int]
    phases: list[Literal["extend", "decode", "verify"]]
    state_indices: list[int]
    num_tokens: int
    block_tables: list[list[int]] | None = None
    num_pages: list[int] | None = None
    own_forwards: list[int] | None = None
    concepts: tuple[str, ...] = ("varlen.metadata",)

    def _check(self):
        n = len(self.req_ids)
        for name in ("context_lens", "phases", "state_indices"):
            if len(getattr(self, name)) != n:
                self._bad(name, f"has {len(getattr(self, name))} entries for {n} sequences")
        if self.block_tables is not None and len(self.block_tables) != n:
            self._bad("block_tables", f"has {len(self.block_tables)} rows for {n} sequences")
        if self.num_pages is not None:
            if self.block_tables is None or len(self.num_pages) != n:
                self._bad("num_pages", f"needs block_tables and one count per sequence ({n}), got {self.num_pages}")
            if any(len(row) > min(k, BLOCK_TABLE_TAIL) for row, k in zip(self.block_tables, self.num_pages)):
                self._bad("block_tables", f"a row holds more than min(num_pages, {BLOCK_TABLE_TAIL}) pages")
        cu = self.cu_seqlens
        if len(cu) != n + 1 or cu[0] != 0 or any(b <= a for a, b in zip(cu, cu[1:])):
            self._bad("cu_seqlens", f"must be 0 then {n} strictly increasing offsets, got {cu}")
        if cu[-1] != self.num_tokens:
            self._bad("num_tokens", f"{self.num_tokens} != cu_seqlens[-1] = {cu[-1]}")
        own = self.own_forwards or []
        if own and own != list(range(n - len(own), n)):
            self._bad("own_forwards", f"must be the last sequences of the batch in order, got {own} of {n}")


@_event
class KernelDispatch(TraceEvent):
    """Which KDA kernel one layer ran for one phase group of the batch.

    ``phase`` picks the kernel: ``extend`` -> ``chunk_kda``, ``decode`` -> ``fused_recurrent_kda``,
    ``verify`` -> the recurrent kernel keeping every per-token state; ``backend`` is ``"torch"`` or
    ``"triton"``. One forward over a mixed batch gives two events per KDA layer.

    Mirrors SGLang ``KDAKernelDispatcher`` (``decode()`` / ``extend()``, called from
    ``KDAAttnBackend.forward_decode`` / ``forward_extend``) and the branch in vLLM
    ``KimiGatedDeltaNetAttention._forward`` (0.32.0: the chunk kernel if ``num_prefills > 0``, else the
    packed recurrent decode); ours is :class:`kda_ref.ops.dispatcher.KDAKernelDispatcher`.
    """

    kind: ClassVar[str] = "kernel_dispatch"
    step: int
    layer: int
    phase: Literal["extend", "decode", "verify"]
    kernel: str
    backend: str
    num_seqs: int
    num_tokens: int
    concepts: tuple[str, ...] = ("sglang.kda_dispatcher",)


# ---------------------------------------------------------------------------------------------
# memory: state slots, conv states, KV pages, preemption, the pool
# ---------------------------------------------------------------------------------------------

@_event
class StateSlotEvent(TraceEvent):
    """A KDA state slot was allocated, freed, read, written or copied.

    ``slots[i]`` belongs to ``req_ids[i]`` (``req_ids`` may be empty for slots no request owns,
    e.g. prefix-cache checkpoints); ``layer`` is the KDA layer for a per-layer read / write, or
    ``None`` for an operation on the whole slot (all KDA layers: alloc, free, copy). A ``copy``
    names its sources: ``slots[i]`` <- ``src_slots[i]``. ``page_kind`` is the pool the slots live
    in (``"kda_state"`` for active states, ``"checkpoint"`` for saved ones). ``summary`` is an
    optional :func:`summarize_tensor` of the state after a write.

    Mirrors SGLang ``MambaPool.alloc`` / ``free`` / ``copy_from`` / ``fork_from`` and the kernels'
    in-place update of ``ssm_states[cache_indices]``; in vLLM a state is a block of the Mamba
    KV-cache group, read and written through ``non_spec_state_indices_tensor``.
    """

    kind: ClassVar[str] = "state_slot"
    step: int
    op: Literal["alloc", "free", "read", "write", "copy"]
    slots: list[int]
    req_ids: list[int]
    layer: int | None = None
    src_slots: list[int] | None = None
    page_kind: str = "kda_state"
    summary: dict[str, JSON] | None = None
    concepts: tuple[str, ...] = ("state.kda_recurrent", "memory.state_slot")

    def _check(self):
        if self.req_ids and len(self.req_ids) != len(self.slots):
            self._bad("req_ids", f"has {len(self.req_ids)} entries for {len(self.slots)} slots (or leave it empty)")
        if self.op == "copy":
            if self.src_slots is None or len(self.src_slots) != len(self.slots):
                self._bad("src_slots", "a copy needs one source slot per destination slot")
        elif self.src_slots is not None:
            self._bad("src_slots", f"only a copy has source slots, not {self.op!r}")


@_event
class ConvStateUpdate(TraceEvent):
    """The short-conv windows (last ``W - 1`` q/k/v inputs) of ``slots`` were updated by ``layer``.

    Always at the same token boundary as the recurrent state of the same slot: the restore check
    (``docs/article.md#s4-2``) compares the two. ``summary``: optional :func:`summarize_tensor` of the
    window after the update.

    Mirrors SGLang ``causal_conv1d_fn`` / ``causal_conv1d_update`` on ``conv_states`` in
    ``KDAAttnBackend.forward_extend`` / ``forward_decode`` and vLLM's conv-state update in
    ``KimiGatedDeltaNetAttention._forward`` (one fused ``conv_state`` in 0.32.0; ``conv_state_q`` / ``_k`` /
    ``_v`` in the earlier ``KimiDeltaAttention``).
    """

    kind: ClassVar[str] = "conv_state_update"
    step: int
    layer: int
    slots: list[int]
    summary: dict[str, JSON] | None = None
    concepts: tuple[str, ...] = ("state.conv",)


@_event
class KVPageEvent(TraceEvent):
    """MLA latent-KV pages were allocated to, or freed from, a request (``req_id`` ``None`` when the
    prefix cache, not a request, frees them). One page holds ``page_size`` tokens for all MLA layers.

    Mirrors SGLang ``TokenToKVPoolAllocator.alloc`` / ``free`` behind ``MLATokenToKVPool``, and
    vLLM v1 ``KVCacheManager.allocate_slots`` / ``free`` (blocks of the ``MLAAttentionSpec`` group).
    """

    kind: ClassVar[str] = "kv_page"
    step: int
    op: Literal["alloc", "free"]
    pages: list[int]
    req_id: int | None
    concepts: tuple[str, ...] = ("state.mla_kv", "memory.page_kind")


@_event
class Preemption(TraceEvent):
    """A running request was preempted to make room: its slot and pages were freed and it went back
    to the waiting queue, to be recomputed from token 0 (a KDA state cannot be partially freed).

    Mirrors vLLM v1 ``Scheduler._preempt_request`` (called from ``Scheduler.schedule`` when
    ``allocate_slots`` fails) and SGLang ``ScheduleBatch.retract_decode``.
    """

    kind: ClassVar[str] = "preemption"
    step: int
    req_id: int
    reason: str
    freed_pages: int
    freed_slots: int
    concepts: tuple[str, ...] = ("engine.preemption",)


@_event
class AdmissionRefused(TraceEvent):
    """A request could not be given memory even with nothing else running and every cache entry that
    no running request holds dropped: it can never run under this configuration, so it finished with
    ``finish_reason == "error"`` (the progress guarantee, ``docs/architecture.md#progress``).
    ``need_bytes`` is its peak (``parts``: what each piece costs), against ``budget_bytes`` and the
    ``free_bytes`` the pool had at the time; ``message`` says it in words.

    Neither reference has this event: vLLM refuses an engine whose KV cache cannot hold one request of
    ``max_model_len`` at start-up (``check_enough_kv_cache_memory``); SGLang's idle check
    (``SchedulerRuntimeCheckerMixin.on_idle``) raises on leaked pool memory.
    """

    kind: ClassVar[str] = "admission_refused"
    step: int
    req_id: int
    need_bytes: int
    budget_bytes: int
    free_bytes: int
    parts: dict[str, int]
    message: str
    concepts: tuple[str, ...] = ("engine.progress",)


@_event
class EngineStall(TraceEvent):
    """The engine made no progress for ``idle_steps`` steps (no request computed a token past its own
    high-water mark, none finished) while ``req_ids`` were unfinished: a bug, caught instead of spun on.
    Every one of them finished with ``finish_reason == "error"``; ``waiting`` / ``running`` are the
    queues' lengths and ``used_bytes`` the pool by page kind when it was caught.

    SGLang's scheduler watchdog (``create_scheduler_watchdog``) kills the server when one forward runs
    longer than ``watchdog_timeout``; a loop of steps that each finish but move nothing passes it. vLLM's
    start-up check ``check_enough_kv_cache_memory`` is about memory (one request of ``max_model_len``
    must fit), not about progress.
    """

    kind: ClassVar[str] = "engine_stall"
    step: int
    req_ids: list[int]
    idle_steps: int
    waiting: int
    running: int
    used_bytes: dict[str, int]
    message: str
    concepts: tuple[str, ...] = ("engine.progress",)


@_event
class GraphBucket(TraceEvent):
    """A static-shape step (``LLM(static_decode=True)``): ``num_seqs`` live rows of ``tokens`` tokens
    (a decode, or a verify of ``1 + k``) ran as a bucket of ``bucket`` rows reading ``pages`` pages each;
    the tail rows are PAD rows (state index and block-table entries ``-1``, context 0) that read zeros
    and write nothing. ``mode``: a CUDA graph replayed the step (``emulated_graph``: emulated without
    CUDA, :mod:`kda_ref.engine.graphs`), a ``torch.compile``'d step ran (``LLM(torch_compile=True)``)
    or it ran eagerly; ``captured``: recorded / compiled in this step.

    Mirrors SGLang ``MambaAttnBackendBase._replay_metadata`` (padded rows get mamba index ``-1``) and
    vLLM's padded ``GDNAttentionMetadata`` for a captured batch size; ours is
    :class:`kda_ref.engine.static_decode.StaticDecode`.
    """

    kind: ClassVar[str] = "graph_bucket"
    step: int
    bucket: int
    num_seqs: int
    tokens: int  # tokens per row: 1 for a decode step, 1 + k for a speculative verify step
    pages: int
    mode: Literal["cuda_graph", "emulated_graph", "compiled", "eager"]
    captured: bool
    state_indices: list[int]
    context_lens: list[int]
    block_table: list[list[int]]
    concepts: tuple[str, ...] = ("static.pad_rows",)


def _tree_depth(parents: list[int]) -> int:
    """The depth of a draft tree given each node's parent (-1: the root), nodes breadth-first."""
    depth: list[int] = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    return max(depth, default=0)


@_event
class SpecVerify(TraceEvent):
    """One speculative request's verify in a step: the drafts, how many the target accepted, the
    token it added, how many verified tokens were ``kept`` (the run is cut where the request stops),
    and how the KDA state rolled back: ``strategy`` (``docs/spec_decode.md``) committed the state of
    kept row ``committed_row`` (0 = the last committed token, i = draft i; ``"slots"``: that slot of the
    request's ``1 + k`` becomes the active one, nothing copied; ``"replay"`` folds the ``kept`` tokens' records instead), the other ``rejected`` drafts' states were dropped (or never
    computed) with the KV pages ``freed_pages``. :meth:`verdicts` gives each draft position's fate. A
    draft tree (``tree_parents`` set) lists its nodes breadth-first as ``drafts``; ``num_accepted`` is
    the accepted branch's length (``accepted_path``, :meth:`kda_ref.engine.tree_verify.TreeStep.commit`).

    Mirrors SGLang's post-verify commit of ``intermediate_ssm`` (``TritonKDAKernel.target_verify`` writes
    it) and vLLM's ``num_accepted_tokens``; ours is :meth:`kda_ref.speculative.RollbackStrategy.commit`.
    """

    kind: ClassVar[str] = "spec_verify"
    step: int
    req_id: int
    context_len: int  # tokens cached before the step
    drafts: list[int]
    num_accepted: int  # drafts accepted by the target (before any stop cut)
    next_token: int  # the target's token after the accepted drafts
    kept: int  # verified tokens kept: the last committed token and the kept drafts
    strategy: str  # the RollbackStrategy's name (its spec_state)
    committed_row: int
    rejected: int  # drafts whose state and KV were dropped
    freed_pages: list[int]
    tree_parents: list[int] | None = None  # a draft tree: each draft's parent (-1: the last committed token)
    accepted_path: list[int] | None = None  # a draft tree: the accepted drafts' tokens, in order
    root_token: int | None = None  # the last committed token, the verified row's first (None: older traces)
    concepts: tuple[str, ...] = ("spec.state_rollback",)

    def verdicts(self) -> list[str]:
        """Per draft position of a chain: ``"accepted"`` (kept), ``"cut"`` (accepted, but after the token
        that stopped the request) or ``"rejected"``; for a tree, per position of the accepted branch
        and then ``"rejected"`` for the depths past it."""
        k = self.num_accepted
        depth = len(self.drafts) if self.tree_parents is None else _tree_depth(self.tree_parents)
        emitted = min(self.kept, k)  # a stop token among the drafts is emitted (its state is not kept)
        return ["accepted"] * emitted + ["cut"] * (k - emitted) + ["rejected"] * (depth - k)

    def _check(self):
        k = len(self.drafts)
        if not 0 <= self.num_accepted <= k:
            self._bad("num_accepted", f"{self.num_accepted} is not in [0, {k}] ({k} drafts)")
        if not 1 <= self.kept <= self.num_accepted + 1:
            self._bad("kept", f"{self.kept} is not in [1, num_accepted + 1 = {self.num_accepted + 1}]")
        if self.committed_row != self.kept - 1 or self.rejected != k + 1 - self.kept:
            self._bad("committed_row", f"row {self.committed_row} / rejected {self.rejected} do not follow from "
                                       f"kept={self.kept} of {k} drafts")


@_event
class PoolSnapshot(TraceEvent):
    """The memory pool's accounting at the end of a step, by page kind.

    ``capacity_bytes`` / ``used_bytes``: kind (``"mla_kv"``, ``"kda_state"``, ``"checkpoint"``, and
    ``"total"`` for the shared budget) -> bytes; ``owners``: kind -> ``(unit, owner)`` pairs, owner a
    request id or a string such as ``"cache"``. Build ``owners`` with :meth:`owners_from`.

    ``full``: ``owners`` lists every allocated unit; otherwise only the units whose owner changed in this
    step, ``None`` for a unit freed (``docs/trace.md#events-that-stay-small-on-long-runs``).

    Mirrors the accounting behind SGLang ``UnifiedKVPool`` (one byte buffer, two sub-pools) and the
    scheduler's token-usage stats, and vLLM's single ``BlockPool`` of equal-sized pages.
    """

    kind: ClassVar[str] = "pool_snapshot"
    step: int
    capacity_bytes: dict[str, int]
    used_bytes: dict[str, int]
    owners: dict[str, list[tuple[int, int | str | None]]]
    full: bool = True
    concepts: tuple[str, ...] = ("memory.unified_pool", "memory.page_kind")

    @staticmethod
    def owners_from(ownership: dict) -> dict[str, list[tuple[int, int | str | None]]]:
        """``{kind: {unit: owner}}`` (``UnifiedMemoryPool.ownership()``, or its ``take_changes()`` with
        ``None`` for a freed unit) -> sorted JSON-able pairs.

        Kinds that are enums are stored by value; owners that are neither ``int``, ``str`` nor ``None``
        by ``str(owner)``.
        """
        out = {}
        for kind, units in ownership.items():
            key = kind.value if hasattr(kind, "value") else str(kind)
            pairs = []
            for unit, owner in sorted(units.items()):
                if not (owner is None or type(owner) is int or isinstance(owner, str)):
                    owner = str(owner)
                pairs.append((int(unit), owner))
            out[key] = pairs
        return out

    @staticmethod
    def fold(state: dict, owners: dict, full: bool) -> None:
        """Apply one snapshot's ``owners`` (every unit when ``full``, else the step's changes; a decoded
        JSON object works too) to ``state`` = ``{kind: {unit: owner}}``, in place: how a reader rebuilds
        the owners at a step (``model_viz``'s views, the server's live ring and the Live page's window)."""
        if full:
            state.clear()
        for kind, pairs in owners.items():
            units = state.setdefault(kind, {})
            for unit, owner in pairs:
                if owner is None:
                    units.pop(unit, None)
                else:
                    units[unit] = owner


# ---------------------------------------------------------------------------------------------
# prefix caches (the radix and state-block issues)
# ---------------------------------------------------------------------------------------------

@_event
class CacheEvent(TraceEvent):
    """A prefix-cache operation. Generic on purpose: the cache issues emit it for ``op`` in
    :data:`CACHE_OPS` (match, back-off to the deepest checkpoint, checkpoint creation,
    copy-on-write restore, snapshot, donate, eviction, tombstoning, ...), with the node, the token
    ``position`` it concerns, op-specific ``detail`` (plain JSON) and, always, the ``concepts`` it
    illustrates (no default: the caller names them).

    Mirrors SGLang ``MambaRadixCache`` (``match_prefix``, ``cache_finished_req``, ``evict_mamba``,
    ``_tombstone_internal_node``) and vLLM's ``MambaManager.find_longest_cache_hit`` / the KV cache
    events the v1 scheduler publishes (``kv_cache_manager.take_events``).
    """

    kind: ClassVar[str] = "cache"
    step: int
    op: str
    req_id: int | None
    node_id: int | None
    position: int | None
    detail: dict[str, JSON]
    concepts: tuple[str, ...]

    def _check(self):
        if not self.concepts:
            self._bad("concepts", "a CacheEvent must name at least one concept id")
        for c in self.concepts:
            if not _CONCEPT_ID.fullmatch(c):
                self._bad("concepts", f"{c!r} is not a concept id like 'section.name'")
