"""``kda_ref.trace``: typed trace events, tracers, and the JSONL trace format.

Every stage of the engine reports what it did as small typed events (:mod:`kda_ref.trace.events`, one
class per ``kind``); the visualizer reads them back. Nothing here depends on the rest of ``kda_ref``
(but ``kda_ref.utils``, which depends on nothing: the bounded reader of trace files) or on
``model_viz`` (only the standard library, plus torch inside :func:`summarize_tensor`), so any layer may
import it. Emit with ``if tracer.enabled: tracer.emit(KernelDispatch(...))``; record with
:class:`TraceRecorder`, read back with :func:`read_jsonl`, export with :func:`to_chrome_trace`.

Design notes: ``docs/trace.md`` (the table of event kinds: ``docs/trace.md#event-types``).
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
