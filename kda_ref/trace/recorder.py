"""Tracers: where the engine's events go.

The engine holds one tracer and guards every emission with ``if tracer.enabled:``, so with the
default :data:`NULL_TRACER` (``enabled = False``) tracing costs one attribute check and the event is
never built. :class:`TraceRecorder` keeps the events in memory, can filter them, and writes them as
JSONL (:mod:`kda_ref.trace.jsonl`); its ``summaries`` (off by default) asks emitters to attach
:func:`~kda_ref.trace.summary.summarize_tensor` summaries.

Design notes: ``docs/trace.md#emitting-and-recording``.
"""

from abc import ABC, abstractmethod
from collections.abc import Container, Iterator

from .events import EVENT_TYPES, TraceEvent

__all__ = ["Tracer", "NullTracer", "NULL_TRACER", "TraceRecorder", "TraceOverflow", "StepClock"]


class StepClock:
    """The engine step number that stamps every event. One owner advances it (the scheduler, or the
    simulator per request); the prefix cache and the memory pool only read it."""

    __slots__ = ("step",)

    def __init__(self, step: int = 0):
        self.step = step

    def advance(self) -> int:
        self.step += 1
        return self.step

    def __repr__(self) -> str:
        return f"StepClock(step={self.step})"


class TraceOverflow(RuntimeError):
    """A :class:`TraceRecorder` with ``max_events`` and ``on_full="error"`` is full."""


class Tracer(ABC):
    """Interface: ``enabled`` (check it before building an event), ``summaries`` (attach tensor
    summaries?) and ``emit(event)``."""

    __slots__ = ()
    enabled: bool = False
    summaries: bool = False

    @abstractmethod
    def emit(self, event: TraceEvent) -> None:
        """Record one event (implementations decide what recording means)."""

    def describe(self, header: dict) -> None:
        """What an engine that emits here says about itself (:func:`kda_ref.trace.header.engine_header`: its
        layer layout, chunk and pool sizes), for the trace's header. ``LLM.__init__`` calls it; this one keeps
        nothing."""

    def part(self, name: str) -> "Tracer":
        """The tracer engine ``name`` of several (a local disaggregation's ``prefill0``, ``decode0``, ...) emits
        to: this one, here; :meth:`TraceRecorder.part` keeps each engine's trace apart as well."""
        return self


class NullTracer(Tracer):
    """The engine's default: records nothing. Use the :data:`NULL_TRACER` singleton."""

    __slots__ = ()
    enabled = False
    summaries = False

    def emit(self, event: TraceEvent) -> None:
        return None

    def __repr__(self) -> str:
        return "NULL_TRACER"


NULL_TRACER = NullTracer()


class TraceRecorder(Tracer):
    """Keeps every emitted event, in order, in :attr:`events`.

    ``max_events`` (optional) bounds memory: once that many events are kept, ``on_full="error"``
    (default) raises :class:`TraceOverflow` and ``on_full="drop"`` silently drops the new event
    and counts it in :attr:`dropped` -- the trace is then an exact prefix of the run, which the
    JSONL header records (``"dropped"``). Set :attr:`enabled` to ``False`` to pause recording.
    """

    enabled = True  # class default; an instance may set its own to pause

    def __init__(self, max_events: int | None = None, on_full: str = "error", summaries: bool = False):
        if max_events is not None and (isinstance(max_events, bool) or not isinstance(max_events, int)
                                       or max_events < 1):
            raise ValueError(f"max_events: must be None or an int >= 1, got {max_events!r}")
        if on_full not in ("error", "drop"):
            raise ValueError(f"on_full: must be 'error' or 'drop', got {on_full!r}")
        self.events: list[TraceEvent] = []
        self.max_events = max_events
        self.on_full = on_full
        self.summaries = bool(summaries)
        self.dropped = 0
        self.header: dict = {}  # the engine's own description (describe), written first in the JSONL header
        self.engines = 0  # engines that described themselves here (a local disaggregation has several)
        self.parts: dict[str, "TraceRecorder"] = {}  # name -> the recorder of one engine among several (part)

    def part(self, name: str) -> "TraceRecorder":
        """The recorder of one engine among several that emit here (a local disaggregation's ``prefill0``,
        ``decode0``, ...): it keeps that engine's events and header alone, so its JSONL is one engine's trace
        that the pages step through, and passes each event on to this recorder, which keeps them all in
        order. Pausing this recorder pauses its parts. The same name gives the same part."""
        if name not in self.parts:
            self.parts[name] = _Part(self, name)
        return self.parts[name]

    def describe(self, header: dict) -> None:
        """Keep ``header`` for :meth:`write_jsonl`, and count the engine: the JSONL header says ``"engines": n``
        when several emit into this one recorder (each numbers its own steps and requests)."""
        self.header = dict(header)
        self.engines += 1

    def emit(self, event: TraceEvent) -> None:
        if not isinstance(event, TraceEvent):
            raise TypeError(f"TraceRecorder.emit: expected a TraceEvent, got {type(event).__name__}")
        if self.max_events is not None and len(self.events) >= self.max_events:
            if self.on_full == "drop":
                self.dropped += 1
                return
            raise TraceOverflow(
                f"TraceRecorder: max_events={self.max_events} reached at a {event.kind!r} event "
                f"(step {event.step}); raise max_events, or pass on_full='drop' to keep the first "
                f"{self.max_events} events")
        self.events.append(event)

    # ---- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(self.events)

    def clear(self) -> None:
        self.events.clear()
        self.dropped = 0
        for part in self.parts.values():
            part.clear()

    def events_of(self, kind: str | type[TraceEvent]) -> list[TraceEvent]:
        """The events of one kind (a kind string such as ``"kernel_dispatch"`` or the class)."""
        cls = _resolve_kind(kind)
        return [e for e in self.events if type(e) is cls]

    def filter(self, step: int | Container[int] | None = None, concept: str | None = None,
               kind: str | type[TraceEvent] | None = None) -> list[TraceEvent]:
        """Events matching every given criterion, in order.

        ``step``: one step or a container of steps (``range(3, 6)``); ``concept``: an exact concept
        id, or a prefix that ends at a dot boundary (``"memory"`` matches ``"memory.page_kind"``);
        ``kind``: as in :meth:`events_of`.
        """
        cls = _resolve_kind(kind) if kind is not None else None
        if step is None:
            step_ok = None
        elif isinstance(step, int) and not isinstance(step, bool):
            step_ok = (step,)
        else:
            step_ok = step
        out = []
        for e in self.events:
            if cls is not None and type(e) is not cls:
                continue
            if step_ok is not None and e.step not in step_ok:
                continue
            if concept is not None and not any(c == concept or c.startswith(concept + ".") for c in e.concepts):
                continue
            out.append(e)
        return out

    def by_step(self) -> dict[int, list[TraceEvent]]:
        """``{step: [events of that step, in order]}``, steps ascending."""
        out: dict[int, list[TraceEvent]] = {}
        for e in self.events:
            out.setdefault(e.step, []).append(e)
        return dict(sorted(out.items()))

    def write_jsonl(self, path_or_file, **metadata) -> int:
        """Write the events with :func:`kda_ref.trace.jsonl.write_jsonl`; the header holds what the engine
        described (:meth:`describe`), ``dropped``, ``engines`` when more than one emitted here, then ``metadata``."""
        from .jsonl import write_jsonl

        several = {"engines": self.engines} if self.engines > 1 else {}
        return write_jsonl(self.events, path_or_file, metadata={**self.header, "dropped": self.dropped, **several,
                                                                 **metadata})

    def __repr__(self) -> str:
        return f"TraceRecorder({len(self.events)} events, dropped={self.dropped})"


class _Part(TraceRecorder):
    """One engine's share of a :class:`TraceRecorder` (:meth:`TraceRecorder.part`). It records while both it
    and its recorder are enabled; ``summaries`` is the recorder's flag."""

    def __init__(self, parent: TraceRecorder, name: str):
        self.parent, self.name, self.own_enabled = parent, name, True
        super().__init__(summaries=parent.summaries)

    @property
    def enabled(self) -> bool:
        return self.own_enabled and self.parent.enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self.own_enabled = bool(value)

    @property
    def summaries(self) -> bool:
        return self.parent.summaries

    @summaries.setter
    def summaries(self, value: bool) -> None:
        self.parent.summaries = bool(value)

    def describe(self, header: dict) -> None:
        super().describe(header)
        self.parent.describe(header)

    def emit(self, event: TraceEvent) -> None:
        kept = len(self.parent.events)
        self.parent.emit(event)  # the parent's bound first: an event it refuses or drops is not kept here either
        if len(self.parent.events) > kept:
            self.events.append(event)
        else:
            self.dropped += 1

    def __repr__(self) -> str:
        return f"TraceRecorder.part({self.name!r}: {len(self.events)} events, dropped={self.dropped})"


def _resolve_kind(kind) -> type[TraceEvent]:
    if isinstance(kind, type) and issubclass(kind, TraceEvent):
        return kind
    try:
        return EVENT_TYPES[kind]
    except (KeyError, TypeError):
        raise KeyError(f"unknown event kind {kind!r}; known kinds: {sorted(EVENT_TYPES)}") from None
