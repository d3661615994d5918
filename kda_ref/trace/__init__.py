"""``kda_ref.trace``: typed trace events, tracers, and the JSONL trace format.

Every stage of the engine reports what it did as small typed events; the visualizer reads them
back. Nothing here depends on the rest of ``kda_ref`` (but ``kda_ref.utils``, which depends on nothing:
the bounded reader of trace files) or on ``model_viz`` (only the standard library, plus torch inside
:func:`summarize_tensor`), so any layer may import it.

Emitting (engine side)::

    from kda_ref.trace import NULL_TRACER, KernelDispatch

    if tracer.enabled:                      # NULL_TRACER: one attribute check, no event built
        tracer.emit(KernelDispatch(step=step, layer=i, phase="decode", kernel="fused_recurrent_kda",
                                   backend="torch", num_seqs=4, num_tokens=4))

Recording and reading back::

    rec = TraceRecorder()
    llm = LLM(..., tracer=rec); llm.generate(...)
    rec.write_jsonl("out.jsonl", model="tiny")
    header, events = read_jsonl("out.jsonl")   # TraceFormatError("line N: ...") if malformed
    to_chrome_trace(events, kda_layers=header["kda_layers"], mla_layers=header["mla_layers"])  # for Perfetto

Events (``kind`` -> class; each names the article concepts it illustrates in ``concepts``):

=====================  ====================  ===============================================
kind                   class                 shows
=====================  ====================  ===============================================
request_arrived        RequestArrived        a request queued (prompt length, max_tokens)
request_finished       RequestFinished       a request done (stop / length, output length)
request_aborted        RequestAborted        a request aborted
schedule_decision      ScheduleDecision      queues, admissions, prefill chunks, decodes, budget
batch_composition      BatchComposition      the varlen batch: cu_seqlens, context_lens, slots
kernel_dispatch        KernelDispatch        per KDA layer and phase: which kernel, which backend
state_slot             StateSlotEvent        KDA state slot alloc / free / read / write / copy
conv_state_update      ConvStateUpdate       short-conv windows updated
kv_page                KVPageEvent           MLA KV pages allocated / freed
preemption             Preemption            a request preempted (freed, recomputed later)
spec_verify            SpecVerify            drafts verified: accepted, kept, state rolled back
graph_bucket           GraphBucket           a static decode step: its bucket, PAD rows, graph replay
pool_snapshot          PoolSnapshot          bytes by page kind, and who owns which unit
cache                  CacheEvent            prefix-cache operations (match, checkpoint, ...)
admission_refused      AdmissionRefused      a request that can never fit the pool, finished with an error
engine_stall           EngineStall           no progress for many steps: the stuck requests errored
=====================  ====================  ===============================================
"""

from .events import (
    CACHE_OPS,
    AdmissionRefused,
    BLOCK_TABLE_TAIL,
    EngineStall,
    EVENT_TYPES,
    JSON,
    PAGE_OPS,
    PHASES,
    SLOT_OPS,
    BatchComposition,
    CacheEvent,
    ConvStateUpdate,
    EventFieldError,
    KernelDispatch,
    KVPageEvent,
    PoolSnapshot,
    Preemption,
    RequestAborted,
    RequestArrived,
    RequestFinished,
    ScheduleDecision,
    SpecVerify,
    GraphBucket,
    StateSlotEvent,
    TraceEvent,
    event_concepts,
)
from .summary import summarize_tensor
from .chrome import to_chrome_trace
from .jsonl import (
    SCHEMA_NAME,
    SCHEMA_VERSION,
    TraceFormatError,
    dumps_event,
    loads_event,
    read_jsonl,
    read_jsonl_string,
    write_jsonl,
)
from .recorder import NULL_TRACER, NullTracer, StepClock, TraceOverflow, Tracer, TraceRecorder

__all__ = [
    "AdmissionRefused", "BLOCK_TABLE_TAIL", "EngineStall", "BatchComposition", "CACHE_OPS", "CacheEvent", "ConvStateUpdate", "EVENT_TYPES", "EventFieldError",
    "JSON", "KVPageEvent", "KernelDispatch", "NULL_TRACER", "NullTracer", "PAGE_OPS", "PHASES",
    "PoolSnapshot", "Preemption", "RequestAborted", "RequestArrived", "RequestFinished", "SCHEMA_NAME", "SpecVerify", "GraphBucket",
    "SCHEMA_VERSION", "SLOT_OPS", "ScheduleDecision", "StepClock", "StateSlotEvent", "TraceEvent", "TraceFormatError",
    "TraceOverflow", "TraceRecorder", "Tracer", "dumps_event", "event_concepts", "loads_event", "read_jsonl",
    "read_jsonl_string", "summarize_tensor", "to_chrome_trace", "write_jsonl",
]
