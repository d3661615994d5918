"""``EngineLoop``: one thread owns the engine and runs every step; clients hand it requests through a queue.

vLLM's engine core loop (``EngineCoreProc.run_busy_loop``, behind ``AsyncLLM``) and SGLang's scheduler process,
reduced to threads in one process: every call into :class:`~kda_ref.engine.LLM` (not thread-safe) happens on the
loop's thread. A client thread:

* :meth:`EngineLoop.submit` checks the request on the client's thread, refuses it with :class:`Overloaded`
  past ``max_waiting``, and returns a :class:`Stream` (:meth:`EngineLoop.admit`: a request checked elsewhere);
* reads the stream: ``("tokens", [ids])`` per step, then ``("done", RequestOutput)`` or ``("error", message)``;
* :meth:`Stream.cancel`: the loop aborts the request at its next step.

:meth:`EngineLoop.stop` stops taking requests, lets what was accepted finish (or cancels it, ``drain=False``)
and joins the thread.
Design notes: ``docs/serving.md#1-the-shape-one-loop-owns-the-engine-in-a-process-of-its-own``;
``docs/serving.md#the-engine-loop``.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

from ..engine import LLM, OutputKind, SamplingParams


class Overloaded(RuntimeError):
    """Refused at admission: ``max_waiting`` requests are already waiting (a server answers 503)."""

    @classmethod
    def past(cls, max_waiting: int) -> "Overloaded":
        """The refusal of a bound of ``max_waiting`` (:meth:`EngineLoop.admit`, and the engine process's
        client, which keeps the bound in the server's process)."""
        return cls(f"max_waiting: {max_waiting} requests are already waiting")


class LoopStopped(RuntimeError):
    """The loop no longer takes requests (stopped, or stopping)."""


class EngineUnresponsive(LoopStopped):
    """The engine process has not answered within its heartbeat deadline (frozen: :mod:`.heartbeat`); a
    server answers 503, and serves again once the engine does."""


@dataclass
class _Submit:
    stream: "Stream"
    ids: list[int]
    text: str | None
    params: SamplingParams


@dataclass
class StreamTimes:
    """When a request's tokens reached its stream (``time.perf_counter`` seconds, stamped on the loop's
    thread as each step hands them over): what a server reports as TTFT, TPOT, ITL and e2e latency, the
    quantities ``vllm bench serve`` measures on the client side."""

    submitted: float = field(default_factory=time.perf_counter)
    token_times: list[float] = field(default_factory=list)  # one stamp per token (a step's tokens share it)
    ended: float | None = None

    @property
    def ttft(self) -> float | None:
        return None if not self.token_times else self.token_times[0] - self.submitted

    @property
    def tpot(self) -> float | None:
        """Mean seconds per output token after the first (None with fewer than two)."""
        n = len(self.token_times)
        return None if n < 2 else (self.token_times[-1] - self.token_times[0]) / (n - 1)

    def itl(self) -> list[float]:
        """Seconds between successive steps that gave this request tokens (several tokens of one
        speculative step arrive together: one gap)."""
        stamps = sorted(set(self.token_times))
        return [b - a for a, b in zip(stamps, stamps[1:])]

    @property
    def e2e(self) -> float | None:
        return None if self.ended is None else self.ended - self.submitted


class TokenDelta(list):
    """The token ids one step added to a request's output (a list), with ``text``: what they added to its
    text, as the engine's detokenizer settled it (:class:`kda_ref.engine.stopping.IncrementalDetokenizer`: held-back characters
    arrive with a later step; the deltas add up to the output's text)."""

    def __init__(self, ids, text: str = ""):
        super().__init__(ids)
        self.text = text


class Stream:
    """One request's events, in order: ``("tokens", TokenDelta)`` per step that added tokens, then
    ``("done", RequestOutput)`` or ``("error", message)``. Iterating yields them until the last.
    ``on_event(kind, value)``, when given, receives them instead of the stream's queue (called on the
    loop's thread; an asyncio server hands them to its event loop with ``call_soon_threadsafe``)."""

    def __init__(self, loop: "EngineLoop", on_event=None):
        self._loop = loop
        self._events: queue.Queue = queue.Queue()
        self._on_event = on_event
        self.req_id: int | None = None  # set by the loop when the engine queued it
        self.cancelled = threading.Event()
        self.times = StreamTimes()
        self.prompt_ids: list[int] = []
        self.output = None  # the RequestOutput, once done
        self.error: str | None = None  # why it failed or was cancelled, once it did
        self.cancel_reason = "abort"
        self.live_text = True  # each step's TokenDelta carries its text (EngineLoop.submit)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def finish_reason(self) -> str:
        """How an ended request ended: its output's reason, else why it was cancelled (``cancel_reason``), else
        "error" (the metrics' ``finished_reason`` label and the live trace's step summaries)."""
        if self.output is not None:
            return self.output.finish_reason
        return self.cancel_reason if self.cancelled.is_set() else "error"

    def get(self, timeout: float | None = None):
        """The next event (``queue.Empty`` after ``timeout`` seconds without one)."""
        return self._events.get(timeout=timeout)

    def __iter__(self):
        while True:
            kind, value = self.get()
            yield kind, value
            if kind != "tokens":
                return

    def cancel(self, reason: str = "abort") -> None:
        """The client is gone (``reason`` "abort"): the loop aborts the request at its next step (its memory
        returns to the pool)."""
        self.cancel_reason = reason
        self.cancelled.set()
        self._loop.wake()

    def put(self, kind: str, value) -> None:
        """Called by the loop's thread only. A client whose ``on_event`` fails (its event loop closed: the
        server is gone) counts as a client that left: the request is cancelled."""
        now = time.perf_counter()
        if kind == "tokens":
            self.times.token_times += [now] * len(value)
        elif self.times.ended is None:  # the loop may have closed it already (EngineLoop._close)
            self.times.ended = now
        if self._on_event is None:
            self._events.put((kind, value))
            return
        try:
            self._on_event(kind, value)
        except RuntimeError:  # asyncio: "Event loop is closed"
            self.cancelled.set()


_WHEN = {"after_step": "after a step", "between_steps": "between steps", "loop_ended": "when the loop ended"}  # for the warning of a failed observer


class StepObserver(ABC):
    """Watches the loop (metrics, the live trace ring): :meth:`after_step` runs on the loop's thread after
    every engine step (``stepped``) and after cancellations that needed no step, with the streams that
    ended there (finished, failed or cancelled). It may read the engine; it must not change it."""

    @abstractmethod
    def after_step(self, loop: "EngineLoop", ended: list[Stream], stepped: bool) -> None:
        """Called after a step (or cancellations); ``loop.step_stats`` is the engine's counters now."""

    def between_steps(self, loop: "EngineLoop") -> None:
        """Called at the top of every turn of the loop (also when idle, every ``idle_wait_s``), before new
        requests are handed to the engine: where an observer may change how the engine is traced (the live
        trace starts and stops recording here), never in the middle of a step. Nothing by default."""

    def loop_ended(self, loop: "EngineLoop") -> None:
        """Called once on the loop's thread when it ends (stopped or died): release what the observer holds
        (the KV-event publisher closes its sockets). Nothing by default."""


class EngineLoop:
    """The thread that owns ``llm`` (module docstring). ``max_waiting``: requests accepted and not yet
    running, past which :meth:`submit` raises :class:`Overloaded`."""

    def __init__(self, llm: LLM, max_waiting: int = 64, idle_wait_s: float = 0.05, observers=()):
        if isinstance(max_waiting, bool) or not isinstance(max_waiting, int) or max_waiting < 1:
            raise ValueError(f"max_waiting: must be an int >= 1, got {max_waiting!r}")
        self.llm, self.max_waiting, self.idle_wait_s = llm, max_waiting, idle_wait_s
        self.observers = list(observers)  # StepObserver objects, called on the loop's thread
        self.step_stats: dict = {}  # LLM.stats() after the last step, for the observers (the loop's thread)
        self.step_seconds = 0.0  # time in engine steps (LLM.step and delivery), read by benchmarks
        self.observer_seconds = 0.0  # time in the observers after steps (metrics, the live trace)
        self._inbox: queue.Queue = queue.Queue()
        self._wake = threading.Event()
        self._live: dict[int, Stream] = {}  # req_id -> its stream, while the engine holds it
        self._lock = threading.Lock()  # guards the admission count and the accepting flag (client threads)
        self._queued = 0  # requests in the engine's waiting queue, as of the loop's last look (LLM.num_waiting)
        self._accepting = False
        self._drain = True
        self._thread = threading.Thread(target=self._run, name="kda-engine-loop", daemon=True)
        self.error: BaseException | None = None  # what stopped the loop, if it died

    # ---- client side ------------------------------------------------------------------------------
    def start(self) -> "EngineLoop":
        with self._lock:
            self._accepting = True
        self._thread.start()
        return self

    def submit(self, prompt, params: SamplingParams | None = None, on_event=None,
               live_text: bool = True) -> Stream:
        """Check and queue one request; returns its :class:`Stream` (``on_event``: see :class:`Stream`;
        ``live_text``: each step's text too, else the text comes whole with the output, and the engine
        decodes it once at the end).
        Raises the engine's :class:`~kda_ref.engine.RequestError` for bad input (nothing queued),
        :class:`Overloaded` when ``max_waiting`` requests wait, :class:`LoopStopped` when the loop takes
        no more."""
        return self.admit(*self.check(prompt, params), on_event, live_text)

    def check(self, prompt, params: SamplingParams | None = None) -> tuple[list[int], str | None, SamplingParams]:
        """:meth:`submit`'s check alone: ``(ids, text, params)`` for :meth:`admit`, or the engine's
        :class:`~kda_ref.engine.RequestError`. Any thread: it reads the configuration only (RequestChecker: the
        model's limits, the tokenizer, the demand arithmetic); the engine's state is touched on the loop's thread
        alone. The HTTP layer checks every prompt of a request before it admits any."""
        return self.llm.check_request(prompt, params)

    def admit(self, ids: list[int], text: str | None, params: SamplingParams, on_event=None,
              live_text: bool = True, bounded: bool = True, cancelled: str | None = None) -> Stream:
        """Queue a request already checked (:meth:`submit`, or the engine process for a request its server's
        process checked: ``bounded=False``, that process keeps the admission bound). The request's
        ``output_kind`` is set from ``live_text``: ``DELTA`` (each step's ids and text) or ``TOKENS`` (each
        step's ids; the text once, with the output). ``cancelled``: a cancel reason -- the request is queued
        cancelled, so the loop answers it unrun and its observers count it (the engine process, for a
        submission whose cancel came with it). Raises :class:`Overloaded` and :class:`LoopStopped` as
        :meth:`submit`."""
        params = replace(params, output_kind=OutputKind.DELTA if live_text else OutputKind.TOKENS)
        stream = Stream(self, on_event)
        stream.live_text = live_text
        stream.prompt_ids = ids
        if cancelled is not None:
            stream.cancel(cancelled)
        with self._lock:  # the put too: a loop that stops or dies flips _accepting under this lock, then
            if not self._accepting:  # drains the inbox, so no accepted request lands where nobody reads it
                raise LoopStopped("the engine loop is not taking requests")
            if bounded and self.waiting >= self.max_waiting:
                raise Overloaded.past(self.max_waiting)
            self._inbox.put(_Submit(stream, ids, text, params))
        self.wake()
        return stream

    def wake(self) -> None:
        self._wake.set()

    def stop(self, drain: bool = True, timeout: float = 60.0) -> None:
        """Take no more requests; finish what was accepted (``drain``) or cancel it; join the thread."""
        with self._lock:
            self._accepting = False
            self._drain = self._drain and drain  # a cancel is final: a later draining stop does not undo it
        self.wake()
        if self._thread.ident is None:  # never started (a signal while the server was being built)
            return
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"timeout: the engine loop did not stop within {timeout} s")

    @property
    def alive(self) -> bool:
        """Whether the loop's thread runs (started and not yet stopped or dead)."""
        return self._thread.is_alive()

    responsive = True  # a thread of the server's own process cannot freeze alone (EngineCoreClient's can)

    def silent_for(self) -> float:
        """Seconds the engine has not been heard from: always 0 here (see ``EngineCoreClient.silent_for``)."""
        return 0.0

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until the loop's thread ended (stopped, or died: :attr:`error`); whether it has. The engine
        process tells the server's process with it (:class:`~kda_ref.server.engine_core.EngineCore`)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def checker(self):
        """The engine's :class:`~kda_ref.engine.request_check.RequestChecker`: what the HTTP side reads of
        the engine (its configuration, ``max_model_len``, the tokenizer) -- safe from any thread."""
        return self.llm.checker

    @property
    def accepting(self) -> bool:
        """Whether :meth:`submit` takes requests now (False once stopping, stopped or dead)."""
        return self._accepting

    def inbox_size(self) -> int:
        """Requests submitted and not yet handed to the engine (any thread)."""
        return self._inbox.qsize()

    @property
    def waiting(self) -> int:
        """Requests accepted and not running: handed over and not yet taken by the loop, or in the engine's
        waiting queue (new or preempted) at the loop's last look (the admission bound counts them)."""
        return self._inbox.qsize() + self._queued

    # ---- the loop's thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._turns()
        finally:
            self._each_observer("loop_ended", self)

    def _turns(self) -> None:
        try:
            self._notify([], stepped=False)  # a first look before any request: /metrics has the pool's budget
            while True:
                self._each_observer("between_steps", self)
                gone = self._take_inbox() + self._cancel_gone()
                if self.llm.has_unfinished():
                    self._step(gone)
                    continue
                if gone:
                    self._notify(gone, stepped=False)
                if not self._accepting and self._inbox.empty():
                    return
                self._wake.wait(self.idle_wait_s)
                self._wake.clear()
        except BaseException as err:  # noqa: BLE001 -- reported to every stream it holds, then kept on the loop
            self.error = err
            with self._lock:
                self._accepting = False  # a later submit gets LoopStopped, not a stream nobody serves
            streams = list(self._live.values())
            while not self._inbox.empty():
                streams.append(self._inbox.get_nowait().stream)
            for stream in streams:  # the one whose enqueue failed was answered by _take_inbox
                self._settle(stream, "error", f"the engine loop died: {type(err).__name__}: {err}")

    def _take_inbox(self) -> list[Stream]:
        """Hand the submitted requests to the engine; the streams cancelled before they started are answered
        here and returned (the observers count them with the turn's other ended ones). A request the engine
        fails to take is answered with the error, which then ends the loop."""
        unrun = []
        while True:
            with self._lock:  # taken from the inbox and counted in the queue at once (the bound never dips)
                try:
                    sub = self._inbox.get_nowait()
                except queue.Empty:
                    break
                self._queued += 1
            if sub.stream.cancelled.is_set() or (not self._accepting and not self._drain):
                self._settle(sub.stream, "error", "cancelled before it started")
                unrun.append(sub.stream)
                continue
            try:
                sub.stream.req_id = self.llm.enqueue(sub.ids, sub.text, sub.params)
            except BaseException as err:
                self._settle(sub.stream, "error", f"the engine loop died: {type(err).__name__}: {err}")
                raise
            self._live[sub.stream.req_id] = sub.stream
        self._count_queued()
        return unrun

    def _count_queued(self) -> None:
        with self._lock:
            self._queued = self.llm.num_waiting

    def _cancel_gone(self) -> list[Stream]:
        stop_all = not self._accepting and not self._drain
        gone = []
        for req_id, stream in list(self._live.items()):
            if stream.cancelled.is_set() or stop_all:
                self.llm.abort(req_id)
                del self._live[req_id]
                self._settle(stream, "error", "cancelled: the server is stopping" if stop_all else "cancelled")
                gone.append(stream)
        return gone

    def _step(self, gone: list[Stream]) -> None:
        """One engine step: tokens to the streams, then the observers (metrics, the live trace) count the
        requests that ended, and only then are those requests' clients answered -- so a client that reads
        ``/metrics`` after its answer always finds its request counted."""
        t0 = time.perf_counter()
        done = self._deliver(self.llm.step())
        self._count_queued()
        self.step_seconds += time.perf_counter() - t0
        self._notify(gone + [s for s, _, _ in done], stepped=True)
        for stream, kind, value in done:
            stream.put(kind, value)

    def _notify(self, ended: list[Stream], stepped: bool) -> None:
        """Tell the observers; one that raises is dropped with a warning (metrics or the live trace must
        not take serving down with them). The engine's counters are read once for all of them."""
        t0 = time.perf_counter()
        if self.observers:
            self.step_stats = self.llm.stats()
        self._tell(ended, stepped)
        self.observer_seconds += time.perf_counter() - t0

    def _tell(self, ended: list[Stream], stepped: bool) -> None:
        self._each_observer("after_step", self, ended, stepped)

    def _each_observer(self, method: str, *args) -> None:
        for obs in list(self.observers):
            try:
                getattr(obs, method)(*args)
            except Exception as err:  # noqa: BLE001 -- reported, and the observer dropped
                self.observers.remove(obs)
                warnings.warn(f"{type(obs).__name__} failed {_WHEN[method]} and was detached: {err!r}",
                              RuntimeWarning, stacklevel=1)

    def _deliver(self, outs: list) -> list[tuple[Stream, str, object]]:
        """Hand each stream what the step returned for it (``LLM.step``: its new tokens and text); close the
        finished ones and return them with their last event (``"done"`` or ``"error"``), which :meth:`_step`
        puts after the observers ran."""
        ended = []
        for out in outs:
            stream = self._live.get(out.req_id)
            if stream is None:  # cancelled meanwhile (the engine aborted it: nothing to deliver)
                continue
            if out.new_token_ids or out.new_text:
                stream.put("tokens", TokenDelta(out.new_token_ids, out.new_text if stream.live_text else ""))
            if out.finished:
                del self._live[out.req_id]
                kind, value = ("error", out.error or "the request failed") if out.finish_reason == "error" \
                    else ("done", out)
                self._close(stream, kind, value)
                ended.append((stream, kind, value))
        return ended

    def live_count(self) -> int:
        """Requests the engine holds now (any thread: a test or a health check waits for it to reach 0)."""
        return len(self._live)

    def live_streams(self) -> list[Stream]:
        """The streams of the requests the engine holds now. The loop's thread only: a
        :class:`StepObserver` (the live trace) reads them in ``after_step``."""
        return list(self._live.values())

    def _close(self, stream: Stream, kind: str, value) -> None:
        """Record how ``stream`` ended (its output or error, the time) without telling its client yet."""
        if kind == "done":
            stream.output = value
        else:
            stream.error = value
        stream.times.ended = time.perf_counter()

    def _settle(self, stream: Stream, kind: str, value) -> None:
        self._close(stream, kind, value)
        stream.put(kind, value)
