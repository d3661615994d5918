"""``LiveTrace``: the last N engine steps of a running server -- their trace events and what the engine held
after each -- kept in a ring and read incrementally by step number.

It is both the engine's tracer and a :class:`~kda_ref.server.loop.StepObserver` (after each step it closes
the step into one record): ``{"step", "events": [JSONL event dicts], "state": {"running", "waiting",
"pool_used_bytes", "budget_bytes", "stats", "requests"}, "cache": {...} | absent}``. The ring holds
``max_steps`` records and about ``max_bytes`` of them as JSON; a reader asks for the records after its
last step (:meth:`since`). It records only while a reader is attached (:data:`READER_TTL_S`; ``enabled``
follows it in :meth:`between_steps`), and a cache snapshot is bounded to :data:`MAX_TREE_NODES` nodes.
:attr:`LiveTrace.work` counts what the tracing touched, for the tests that hold it flat.

Design notes: ``docs/serving.md#5-the-live-trace-and-the-live-page``.
"""

from __future__ import annotations

import collections
import threading
import time

from ..cache.picture import cache_picture
from ..trace import PoolSnapshot, TraceEvent, Tracer
from ..trace.header import engine_header
from .flags import MAX_TRACE_BYTES
from .loop import EngineLoop, StepObserver, Stream

SCALAR_BYTES = 6  # a number or short string in JSON, with its comma (the estimate's unit)
MAX_TREE_NODES = 400  # nodes of one tree snapshot (the request's path, then the top of the tree)
READER_TTL_S = 10.0  # a reader that asked within this many seconds is attached (cache snapshots are taken)
SUMMARY_STEPS = 65_536  # steps whose compact summary is kept (a few hundred bytes each: minutes of a busy server)
SNAPSHOT_EVERY_S = 0.5  # at most one cache snapshot this often (the Live page reads once a second)


def approx_json_bytes(obj) -> int:
    """About how many bytes ``obj`` is as JSON, found from its containers' lengths: a list of scalars costs
    :data:`SCALAR_BYTES` each without visiting them (a step's pool changes can list thousands of units).
    Within ~30% of ``len(json.dumps(obj))`` for trace records; what bounds
    the ring (:class:`LiveTrace`)."""
    if isinstance(obj, dict):
        if len(obj) > 16 and not isinstance(next(iter(obj.values())), (dict, list, tuple)):
            return 2 + (2 * SCALAR_BYTES + 2) * len(obj)  # a map of units to owners: counted, not visited
        return 2 + sum(len(str(k)) + 4 + approx_json_bytes(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        if not obj or not isinstance(obj[0], (dict, list, tuple)):
            return 2 + SCALAR_BYTES * len(obj)
        return 2 + sum(1 + approx_json_bytes(v) for v in obj)
    if isinstance(obj, str):
        return len(obj) + 3
    return SCALAR_BYTES


def _times(stream: Stream) -> dict:
    t = stream.times
    return {"prompt_tokens": stream.prompt_tokens, "output_tokens": len(t.token_times),
            "ttft_s": t.ttft, "tpot_s": t.tpot, "finish_reason": stream.finish_reason}


def summary(record: dict, ended: list[Stream]) -> dict:
    """One step in a few numbers: ``{"step", "wall", "running", "waiting", "generated", "hits", "ended"}`` --
    requests running and waiting (the engine's queue + not yet handed over), the engine's generated and
    cached-prompt token counters, and the requests that ended there with their tokens and latencies."""
    state = record["state"]
    stats = state.get("stats", {})
    return {"step": record["step"], "wall": record["wall"], "running": len(state["running"]),
            "waiting": len(state["waiting"]) + state.get("inbox", 0),
            "generated": stats.get("generated_tokens", 0), "hits": stats.get("cached_prompt_tokens", 0),
            "ended": {str(s.req_id): _times(s) for s in ended if s.req_id is not None}}


class LiveTrace(Tracer, StepObserver):
    """The ring of the module docstring: at most ``max_steps`` records (>= 1) and about ``max_bytes`` of them
    as JSON (:func:`approx_json_bytes`; the newest record stays whatever its size); ``max_tree_nodes``
    bounds one tree snapshot (the request's path, then the top of the tree)."""

    summaries = False

    def __init__(self, max_steps: int = 256, max_tree_nodes: int = MAX_TREE_NODES,
                 max_bytes: int = MAX_TRACE_BYTES, snapshot_every_s: float = SNAPSHOT_EVERY_S):
        for name, v in (("max_steps", max_steps), ("max_tree_nodes", max_tree_nodes), ("max_bytes", max_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {v!r}")
        if isinstance(snapshot_every_s, bool) or not isinstance(snapshot_every_s, (int, float)) \
                or not 0 <= snapshot_every_s <= 60:
            raise ValueError(f"snapshot_every_s: must be a number of seconds in [0, 60], got {snapshot_every_s!r}")
        self.max_steps, self.max_tree_nodes, self.max_bytes = max_steps, max_tree_nodes, max_bytes
        self.snapshot_every_s = float(snapshot_every_s)
        self._snapshot_at = float("-inf")  # time.monotonic() of the last cache snapshot
        self._stale = False  # a request finished after the last snapshot (one is due once the interval passed)
        self._records: collections.deque = collections.deque()  # (record, its approx_json_bytes)
        self._summaries: collections.deque = collections.deque(maxlen=SUMMARY_STEPS)  # every recorded step, compact
        self.bytes = 0  # the records' approx_json_bytes, summed
        self._building: list[TraceEvent] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.header: dict = {}
        self.requests: dict[int, Stream] = {}  # req_id -> stream, while it lives (the loop's thread only)
        # whether the engine builds events now: True until the first step ended (the header and the pool's
        # first whole snapshot), then whether a reader is attached (set on the loop's thread between steps)
        self.enabled = True
        self._base: dict = {}  # {kind: {unit: owner}} before the ring's first record (folded as records leave)
        self._reader_seen = float("-inf")  # time.monotonic() of the last reader's request (any thread)
        self._pending = False  # a reader just attached: the next step snapshots the cache even if none finished
        self._last_done = None  # the last finished request's output (what a pending snapshot is taken after)
        self.work = 0  # entries the tracing touched: pool owners recorded, tree nodes / block units visited

    # ---- the engine's side (its loop thread) ----------------------------------------------------------
    def emit(self, event: TraceEvent) -> None:
        self._building.append(event)

    def after_step(self, loop: EngineLoop, ended: list[Stream], stepped: bool) -> None:
        llm = loop.llm
        if not self.header:
            self.header = engine_header(llm)
        finished = [s for s in ended if s.output is not None]
        if finished:  # what a cache snapshot shows: the last request that finished (recorded or not)
            out = finished[-1].output
            self._last_done = (out, out.metrics.get("cached_tokens", 0))
        if self.enabled:
            self._record(loop, ended, bool(finished))
        for s in ended:
            self.requests.pop(s.req_id, None)

    def between_steps(self, loop: EngineLoop) -> None:
        """Record from now on while a reader is attached; pause (:meth:`_pause`) when the last one left. A
        cache snapshot that came due while the server idles is added to the last step's record."""
        if self.enabled and self._stale and self._records:
            cache = self._cache(loop.llm, False)
            if cache is not None:
                self._late_cache(loop.llm.clock.step, cache)
        attached = self.reader_attached
        if self.enabled and not attached and self.header:  # (the first step is always recorded)
            self._pause()
        if self.header:
            self.enabled = attached

    def _record(self, loop: EngineLoop, ended: list[Stream], finished: bool) -> None:
        """This step's record (its events, the engine's state, a cache snapshot after a finished request)."""
        llm = loop.llm
        for s in loop.live_streams():
            self.requests[s.req_id] = s
        record = {"step": llm.clock.step, "wall": time.time(),
                  "events": [e.to_dict() for e in self._building],
                  "state": self._state(loop, ended)}
        self._building = []
        cache = self._cache(llm, finished)
        if cache is not None:
            record["cache"] = cache
        self.work += sum(len(p) for e in record["events"] if e["kind"] == "pool_snapshot" for p in e["owners"].values())
        self._append(record, summary(record, ended))

    def _late_cache(self, step: int, cache: dict) -> None:
        """``cache`` into the record of ``step`` (the newest), its size counted."""
        with self._changed:
            record, size = self._records[-1]
            if record["step"] != step:
                return
            record["cache"] = cache
            extra = approx_json_bytes(cache)
            self._records[-1] = (record, size + extra)
            self.bytes += extra
            self._changed.notify_all()

    def _pause(self) -> None:
        """The last reader left: every record's pool owners into the base, the ring emptied, the streams
        forgotten (the loop's thread; a reader that arrives later starts from the base)."""
        with self._changed:
            for record, _ in self._records:
                self._fold(self._base, record)
            self._records.clear()
            self._summaries.clear()
            self.bytes = 0
        self.requests.clear()

    def _append(self, record: dict, brief: dict) -> None:
        """Into the ring (a cancel with no step merges into the step's record); the oldest records leave
        while the ring is over ``max_steps`` or ``max_bytes``, their pool owners folded into the base. The
        step's compact summary (``brief``) goes into the longer summary ring."""
        size = approx_json_bytes(record)
        with self._changed:
            if self._summaries and self._summaries[-1]["step"] == brief["step"]:
                brief["ended"] = {**self._summaries.pop()["ended"], **brief["ended"]}
            self._summaries.append(brief)
            if self._records and self._records[-1][0]["step"] == record["step"]:
                prev, prev_size = self._records.pop()
                record["events"] = prev["events"] + record["events"]
                self.bytes -= prev_size
                size += prev_size
            while self._records and (len(self._records) >= self.max_steps or self.bytes + size > self.max_bytes):
                old, old_size = self._records.popleft()
                self._fold(self._base, old)
                self.bytes -= old_size
            self._records.append((record, size))
            self.bytes += size
            self._changed.notify_all()

    @staticmethod
    def _fold(owners: dict, record: dict) -> None:
        for e in record["events"]:
            if e["kind"] == "pool_snapshot":
                PoolSnapshot.fold(owners, e["owners"], e.get("full", True))

    @property
    def reader_attached(self) -> bool:
        """Whether a reader asked for records within :data:`READER_TTL_S` seconds."""
        return time.monotonic() - self._reader_seen < READER_TTL_S

    def _state(self, loop: EngineLoop, ended: list[Stream]) -> dict:
        llm, stats = loop.llm, loop.step_stats
        return {"running": [r.req_id for r in llm.scheduler.running],
                "waiting": [r.req_id for r in llm.scheduler.waiting], "inbox": loop.inbox_size(),
                "pool_used_bytes": stats["pool_used_bytes"], "budget_bytes": stats["budget_bytes"],
                "stats": {k: v for k, v in stats.items() if isinstance(v, int)},
                "requests": {str(s.req_id): {**_times(s), "done": s in ended}
                             for s in [*self.requests.values()] if s.req_id is not None}}

    def _cache(self, llm, finished: bool) -> dict | None:
        """``{"key", "snapshot"}``: the cache after the last request that finished, taken when one finished
        since the last snapshot (at most once per ``snapshot_every_s``: a burst of finishes costs one) or a
        reader just attached -- and only while a reader is attached (None otherwise, or without a cache)."""
        self._stale |= finished
        now = time.monotonic()
        due = self._pending or (self._stale and now - self._snapshot_at >= self.snapshot_every_s)
        if not due or self._last_done is None or not self.reader_attached:
            return None  # nobody watching, nothing new, too soon, or nothing finished yet: no snapshot to pay for
        self._pending, self._stale, self._snapshot_at = False, False, now
        (out, reused), step = self._last_done, llm.clock.step
        snap = cache_picture(llm.prefix_cache, out.prompt_token_ids, out.token_ids, out.req_id, f"r{out.req_id}",
                              [step, step], reused, self.max_tree_nodes)
        if snap is None:
            return None
        self.work += len(snap[1].get("tree", snap[1].get("units", [])))  # nodes / units it visited
        return {"key": snap[0], "snapshot": snap[1]}

    # ---- readers (any thread) -------------------------------------------------------------------------
    def since(self, step: int, limit: int | None = None) -> dict:
        """The records after ``step`` (at most ``limit``, oldest first), with the window's bounds; a reader
        that does not hold the record before the ring's first (a new one, or one that fell behind) also
        gets ``pool_base``: the pool's owners before that first record, ``{kind: [[unit, owner], ...]}``.
        Marks a reader as attached (:meth:`attach`)."""
        self.attach()
        with self._lock:
            records = [r for r, _ in self._records if r["step"] > step]
            first = self._records[0][0]["step"] if self._records else None
            last = self._records[-1][0]["step"] if self._records else None
            base = ({k: sorted(v.items()) for k, v in self._base.items() if v}
                    if first is not None and step < first else None)
        if limit is not None:
            records = records[:limit]
        doc = {"header": self.header, "first_step": first, "last_step": last, "max_steps": self.max_steps,
               "records": records}
        if base is not None:
            doc["pool_base"] = base
        return doc

    def summaries_since(self, step: int, limit: int | None = None) -> dict:
        """The compact summaries of the steps after ``step`` (at most ``limit``, oldest first): what a reader
        that draws only the newest steps in detail reads of every step (queues, tokens, hits, the requests
        that ended), from a ring far longer than the records'. Marks a reader as attached."""
        self.attach()
        with self._lock:
            out = [s for s in self._summaries if s["step"] > step]
            first = self._summaries[0]["step"] if self._summaries else None
            last = self._summaries[-1]["step"] if self._summaries else None
        return {"first_step": first, "last_step": last, "summaries": out[:limit] if limit is not None else out}

    def attach(self) -> None:
        """A reader is here (any thread; :meth:`since` and the server's ``/kda/trace/stream`` call it): the
        ring records from the next step on, for :data:`READER_TTL_S` seconds after the last call; a reader
        that just attached gets a cache snapshot at the next step."""
        if not self.reader_attached:
            self._pending = True
        self._reader_seen = time.monotonic()

    def wait_after(self, step: int, timeout: float) -> bool:
        """Block until a record after ``step`` exists (True) or ``timeout`` seconds pass (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: bool(self._records) and self._records[-1][0]["step"] > step,
                                          timeout)
