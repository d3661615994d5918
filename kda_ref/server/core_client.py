"""``EngineCoreClient``: the HTTP server's side of the engine process (:mod:`kda_ref.server.engine_core`).

It stands where :class:`~kda_ref.server.loop.EngineLoop` stands for the routes (``submit`` returning a
:class:`~kda_ref.server.loop.Stream`, ``stop``, ``alive``, ``accepting``, ``error``, ``max_waiting``,
``checker``), and :class:`RemoteMetrics` / :class:`RemoteLive` stand where the metrics and the live trace
stood; each asks the engine process over the pipe. vLLM: ``AsyncMPClient`` (``vllm/v1/engine/core_client.py``).

Contract: :meth:`submit` tokenizes and checks a request here (the engine's
:class:`~kda_ref.engine.RequestError`; :class:`~kda_ref.server.loop.Overloaded` past ``max_waiting``) and
is called from a worker thread, never the event loop. Once the engine process is dead, waiting calls raise
:class:`~kda_ref.server.loop.LoopStopped`; once it is unresponsive, waiting and new calls raise
:class:`~kda_ref.server.loop.EngineUnresponsive`; a call unanswered within its timeout raises
``TimeoutError``. When the engine process dies, ``alive`` turns False and ``error`` says how it ended.
Design notes: ``docs/serving.md#1-the-shape-one-loop-owns-the-engine-in-a-process-of-its-own``;
the pipe: ``docs/serving.md#the-engine-processs-pipe``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING

from ..utils.procs import quiet_forkserver, stop_process, worker_context, worker_process
from .engine_core import BEAT, CALL, CLOSE, ENDED, FAILED, NOTE, OUTPUTS, READY, RETURN, CoreSpec, core_main
from .heartbeat import beat_interval, check_timeout
from .loop import EngineUnresponsive, LoopStopped, Overloaded, Stream, TokenDelta

if TYPE_CHECKING:
    from ..engine import SamplingParams

log = logging.getLogger("uvicorn.error")  # the server's log
CALL_TIMEOUT_S = 60.0  # a call the engine process leaves unanswered this long raises TimeoutError
START_TIMEOUT_S = 1800.0  # building the engine there (loading a released checkpoint can take minutes)


class EngineCoreClient:
    """The engine process for ``spec``, started and built when this is made (its build error, if any,
    raised here: a bad model is refused before the server listens). ``start()`` is a no-op (the loop there
    runs from the start)."""

    def __init__(self, spec: CoreSpec, start_timeout: float = START_TIMEOUT_S):
        self.spec, self.max_waiting = spec, spec.max_waiting
        self.heartbeat_timeout = check_timeout(spec.heartbeat_timeout)
        self._heard, self._frozen = time.monotonic(), False  # the last message's time; unresponsive now
        self.error: BaseException | None = None
        self._accepting, self._ended, self._closed, self._ready = False, False, False, False
        self._dead = False  # the pipe ended (the engine process exited)
        self._send_lock, self._close_lock = threading.Lock(), threading.Lock()
        self._streams: dict[int, Stream] = {}
        self._admit_lock = threading.Lock()  # the admission bound: counted and sent as one
        self._sent = 0  # submissions sent to the engine process
        self._engine_counts = (0, 0)  # (submissions it took, requests waiting there), as it last said
        self._cancelled: set[int] = set()
        self._calls: dict[int, list] = {}  # call_id -> [threading.Event, (ok, value) once answered]
        self._keys, self._ids = itertools.count(), itertools.count()
        ctx = worker_context("gloo")
        self._conn, child = ctx.Pipe(duplex=True)
        # not a daemon: the engine may start processes of its own (context-parallel ranks); it exits when the
        # pipe ends, and the finalizer below terminates it if this client is dropped unstopped
        self.process = worker_process(ctx, core_main, (child, spec), daemon=False, name="kda-engine-core")
        quiet_forkserver(ctx)  # a terminal's Ctrl-C is the server's to handle, not its children's
        self.process.start()
        child.close()  # only the engine process holds its end: its death ends the pipe here
        self._finalizer = weakref.finalize(self, stop_process, self.process, 0.0)
        try:
            self.front = self._wait_ready(start_timeout)
        except BaseException:
            self.close()
            raise
        self.checker = self.front.checker()
        self._accepting = self._ready = True
        self._heard = time.monotonic()
        threading.Thread(target=self._read, name="kda-core-reader", daemon=True).start()
        threading.Thread(target=self._watchdog, name="kda-core-watchdog", daemon=True).start()

    def _wait_ready(self, timeout: float):
        """The engine's :class:`~kda_ref.server.engine_core.Front`, or its build error raised here."""
        if not self._conn.poll(timeout):
            raise TimeoutError(f"the engine process did not start within {timeout:g} s")
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            raise RuntimeError(f"the engine process exited while starting (exit code {self.process.exitcode})") \
                from None
        if kind == FAILED:
            raise value
        if kind != READY:
            raise RuntimeError(f"the engine process answered {kind!r} before it was ready")
        return value

    # ---- what the routes use (EngineLoop's client side) ---------------------------------------------
    def start(self) -> "EngineCoreClient":
        return self

    @property
    def alive(self) -> bool:
        """Whether the engine loop there runs (not stopped, not dead)."""
        return not (self._ended or self._closed)

    @property
    def accepting(self) -> bool:
        return self._accepting

    @property
    def responsive(self) -> bool:
        """False while the engine process has not been heard from within its heartbeat timeout."""
        return not self._frozen

    def live_count(self) -> int:
        """Requests submitted from here and not yet ended (as :meth:`EngineLoop.live_count` counts the engine's:
        a test or a health check waits on it)."""
        return len(self._streams)

    def silent_for(self) -> float:
        """Seconds since the engine process last sent anything (a beat comes a few times a second)."""
        return time.monotonic() - self._heard

    @property
    def waiting(self) -> int:
        """Requests waiting there as the engine process last said, plus those sent since it said so."""
        taken, waiting = self._engine_counts
        return waiting + self._sent - taken

    def submit(self, prompt, params=None, on_event=None, live_text: bool = True) -> Stream:
        """As :meth:`EngineLoop.submit`: checked and counted against the bound here, sent one way (a
        blocking call for a long prompt's tokenizing: from a worker thread). One difference: with
        ``live_text=False`` the stream gets no ``tokens`` events (the ids and the text come with the
        output), so a request answered whole costs no message per step."""
        if not self._accepting:
            raise LoopStopped(self._why())
        if self._frozen:
            raise EngineUnresponsive(self.unresponsive_reason())
        return self.admit(*self.check(prompt, params), on_event, live_text)

    def check(self, prompt, params=None) -> tuple[list[int], str | None, SamplingParams]:
        """As :meth:`EngineLoop.check`: the request checked here, from the configuration alone."""
        return self.checker.check_request(prompt, params)

    def admit(self, ids: list[int], text: str | None, params: SamplingParams, on_event=None,
              live_text: bool = True) -> Stream:
        """As :meth:`EngineLoop.admit` for a request :meth:`check` passed: counted against the bound, sent."""
        if not self._accepting:
            raise LoopStopped(self._why())
        if self._frozen:
            raise EngineUnresponsive(self.unresponsive_reason())
        stream = Stream(self, on_event)
        stream.live_text, stream.prompt_ids = live_text, ids
        with self._admit_lock:
            if self.waiting >= self.max_waiting:
                raise Overloaded.past(self.max_waiting)
            key = next(self._keys)
            self._streams[key] = stream
            try:
                self._send((NOTE, "submit", (key, ids, text, params, live_text)))
            except BaseException:
                self._streams.pop(key, None)
                raise
            self._sent += 1
        return stream

    def wake(self) -> None:
        """A stream was cancelled (:meth:`Stream.cancel` calls this): tell the engine process."""
        for key, s in list(self._streams.items()):
            if s.cancelled.is_set() and key not in self._cancelled:
                self._cancelled.add(key)
                self.note("cancel", key, s.cancel_reason)

    def stop(self, drain: bool = True, timeout: float = 60.0) -> None:
        """As :meth:`EngineLoop.stop` (``TimeoutError`` if the loop there did not stop within ``timeout``),
        then the engine process exits."""
        self._accepting = False
        if self._closed:
            return
        if not self._ended:
            try:
                self.call("stop", drain, timeout, timeout=timeout + CALL_TIMEOUT_S)
            except LoopStopped:  # it died meanwhile: nothing left to stop
                pass
        self.close()

    def close(self) -> None:
        """End the engine process (asked to exit, then terminated if it does not): any thread, idempotent."""
        self._accepting = False
        with self._close_lock:  # the signal handler's stop threads may close at once
            if self._closed:
                return
            self._closed = True
        try:
            self._send((CLOSE,))
        except LoopStopped:
            pass
        stop_process(self.process, grace=10.0 if self._ready else 0.0)  # still building: it reads nothing
        self._finalizer.detach()
        self._conn.close()

    def counters(self) -> dict:
        """``{"step_seconds", "observer_seconds", "steps"}`` of the loop there (:class:`EngineLoop`'s
        ``step_seconds`` and ``observer_seconds``, the engine's step count): what the fill benchmark reads."""
        return self.call("counters")

    # ---- the pipe -------------------------------------------------------------------------------------
    def call(self, name: str, *args, timeout: float = CALL_TIMEOUT_S):
        """Run ``name`` there and return its value (its exception raised here)."""
        if self._frozen:
            raise EngineUnresponsive(self.unresponsive_reason())
        call_id = next(self._ids)
        slot = self._calls[call_id] = [threading.Event(), None]
        try:
            self._send((CALL, call_id, name, args))
            if not slot[0].wait(timeout):
                raise TimeoutError(f"timeout: the engine process did not answer {name!r} within {timeout:g} s")
        finally:
            self._calls.pop(call_id, None)
        ok, value = slot[1]
        if ok:
            return value
        raise value

    def note(self, name: str, *args) -> None:
        """Tell the engine process ``name`` without waiting (dropped if it is gone)."""
        try:
            self._send((NOTE, name, args))
        except LoopStopped:
            pass

    def _send(self, msg: tuple) -> None:
        with self._send_lock:
            if self._dead or (self._closed and msg[0] != CLOSE):
                raise LoopStopped(self._why())
            try:
                self._conn.send(msg)
            except (OSError, ValueError):
                raise LoopStopped(self._why()) from None

    def _why(self) -> str:
        return str(self.error) if self.error else "the engine loop is not taking requests"

    def _read(self) -> None:
        """The reader thread: every message from the engine process, until the pipe ends."""
        handlers = {OUTPUTS: self._outputs, RETURN: self._answered, ENDED: self._loop_ended, BEAT: lambda: None}
        while True:
            try:
                kind, *rest = self._conn.recv()
            except (EOFError, OSError, ValueError):
                break
            now = time.monotonic()
            if self._frozen:
                self._frozen = False
                log.warning("the engine process answers again (after %.1f s of silence)", now - self._heard)
            self._heard = now
            try:
                handlers[kind](*rest)
            except Exception as err:  # noqa: BLE001 -- one bad message must not stop every other stream
                log.warning("the engine process's %s message failed here: %r", kind, err)
        self._gone()

    def _outputs(self, events: list, taken: int, waiting: int) -> None:
        """One turn of the engine's loop: its streams' events, then its admission counts."""
        for key, kind, value in events:
            self._event(key, kind, value)
        self._engine_counts = (taken, waiting)

    def _event(self, key: int, kind: str, value) -> None:
        stream = self._streams.get(key)
        if stream is None:
            return
        if kind == "tokens":
            value = TokenDelta(*value)
        else:
            self._streams.pop(key, None)
            self._cancelled.discard(key)
            if kind == "done":
                stream.output = value
            else:
                stream.error = value
        stream.put(kind, value)
        if stream.cancelled.is_set():  # its client's event loop is gone (Stream.put): stop it there too
            self.wake()

    def _watchdog(self) -> None:
        """Call the engine process unresponsive once it was silent for the heartbeat timeout (:mod:`.heartbeat`):
        fail every waiting call and every open stream here, and cancel the streams there (the engine drops
        them unrun when it runs again). Ends with the pipe."""
        every = beat_interval(self.heartbeat_timeout)
        while not (self._dead or self._closed):
            time.sleep(every)
            silent = time.monotonic() - self._heard
            if self._frozen or silent < self.heartbeat_timeout or self._dead or self._closed:
                continue
            self._frozen = True
            why = self.unresponsive_reason()
            log.warning("%s: /health answers 503 and new requests are refused until it answers again", why)
            given_up = [(key, self._streams.pop(key, None)) for key in list(self._streams)]
            for key, _ in given_up:  # first, so that the cancels wait in the pipe before any client hears
                self.note("cancel", key, "abort")
            for _, stream in given_up:
                if stream is not None:
                    stream.error = why
                    stream.put("error", why)
            for slot in list(self._calls.values()):
                slot[1] = (False, EngineUnresponsive(why))
                slot[0].set()

    def unresponsive_reason(self) -> str:
        """Why the engine counts as unresponsive (``/health`` says it): how long it has been silent."""
        return (f"the engine process has not answered for {self.silent_for():.1f} s (its heartbeat timeout is "
                f"{self.heartbeat_timeout:g} s): it is stopped or stalled")

    def _answered(self, call_id: int, ok: bool, value) -> None:
        slot = self._calls.get(call_id)
        if slot is not None:
            slot[1] = (ok, value)
            slot[0].set()

    def _loop_ended(self, why: str | None) -> None:
        self._accepting, self._ended = False, True
        if why is not None:
            self.error = RuntimeError(f"the engine loop died: {why}")

    def _gone(self) -> None:
        """The pipe ended: the engine process exited (closed by :meth:`close`, or died)."""
        self._accepting, self._ended, self._dead = False, True, True
        if not self._closed and self.error is None:
            self.process.join(5)
            self.error = RuntimeError(f"the engine process exited (exit code {self.process.exitcode})")
        for slot in list(self._calls.values()):
            slot[1] = (False, LoopStopped(self._why()))
            slot[0].set()
        for key in list(self._streams):
            stream = self._streams.pop(key, None)  # None: a route thread took it meanwhile (its cancel)
            if stream is None:
                continue
            stream.error = str(self.error or "the engine loop stopped")
            stream.put("error", stream.error)


class RemoteMetrics:
    """The engine process's :class:`~kda_ref.server.metrics.ServerMetrics`, as the routes use it. An engine
    process that does not answer within its heartbeat timeout -- unresponsive, or gone -- never holds a
    scrape up: it is answered from this side with the engine's metrics as last read (their age stated in a
    comment); the route adds what this process knows (:func:`~kda_ref.server.metrics.engine_liveness`)."""

    def __init__(self, client: EngineCoreClient):
        self.client = client
        self.refused = _Counter(client, "refused")
        self._last, self._read_at = b"", None  # the engine's metrics as last read, and when (monotonic)

    def render(self) -> bytes:
        c = self.client
        try:
            self._last, self._read_at = c.call("metrics", timeout=c.heartbeat_timeout), time.monotonic()
            engine = self._last
        except (LoopStopped, TimeoutError):
            age = "never read" if self._read_at is None else f"read {time.monotonic() - self._read_at:.1f} s ago"
            engine = f"# the engine process does not answer: its metrics below were {age}\n".encode() + self._last
        return engine


class _Counter:
    def __init__(self, client: EngineCoreClient, name: str):
        self.client, self.name = client, name

    def inc(self) -> None:
        self.client.note(self.name)


class RemoteLive:
    """The engine process's :class:`~kda_ref.server.live.LiveTrace`, as the routes read it."""

    def __init__(self, client: EngineCoreClient):
        self.client, self.max_steps = client, client.front.trace_steps

    def since(self, step: int, limit: int | None = None) -> dict:
        return self.client.call("since", step, limit)

    def summaries_since(self, step: int, limit: int | None = None) -> dict:
        return self.client.call("summaries_since", step, limit)

    def attach(self) -> None:
        self.client.note("attach")

    def wait_after(self, step: int, timeout: float) -> bool:
        return self.client.call("wait_after", step, timeout, timeout=timeout + CALL_TIMEOUT_S)
