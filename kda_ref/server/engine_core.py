"""The engine in a process of its own: ``kda-ref serve``'s engine core, fed by the HTTP server's process.

It runs the :class:`~kda_ref.server.loop.EngineLoop` with its observers (metrics, the live trace), so the
HTTP server's Python never holds the engine's GIL (measured: ``docs/benchmarks.md``, "The server as its
cache fills"); :class:`~kda_ref.server.core_client.EngineCoreClient`
in the server's process stands where the loop stood. vLLM: ``EngineCoreProc`` (``vllm/v1/engine/core.py``)
behind ``vllm/v1/engine/core_client.py``; SGLang: the ``Scheduler`` process fed by ``TokenizerManager``.

One duplex pipe carries tuples: submissions (one way), calls and notes from the server; ``ready`` /
``failed``, one ``outputs`` per turn, ``ended`` and ``beat`` from the engine. The engine process ignores
SIGINT and SIGHUP (the server's process owns the shutdown) and exits when its server is gone.
Design notes: ``docs/serving.md#1-the-shape-one-loop-owns-the-engine-in-a-process-of-its-own``;
the messages: ``docs/serving.md#the-engine-processs-pipe``.
"""

from __future__ import annotations

import pickle
import signal
import threading
import warnings
from dataclasses import dataclass

from .heartbeat import HEARTBEAT_TIMEOUT_S, Heartbeat, StallGuard

CALL, NOTE, CLOSE = "call", "note", "close"  # server -> engine
READY, FAILED, OUTPUTS, RETURN, ENDED, BEAT = "ready", "failed", "outputs", "return", "ended", "beat"  # engine -> server


@dataclass(frozen=True)
class CoreSpec:
    """What the engine process builds (picklable: it crosses to the new process). ``model`` and ``engine``
    are :func:`~kda_ref.server.models.load_llm`'s arguments; ``trace_steps`` 0 keeps no live trace."""

    model: str
    engine: dict
    threads: int
    max_waiting: int
    model_name: str
    trace_steps: int = 0
    trace_bytes: int = 32 << 20
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT_S  # both sides' deadline (:mod:`.heartbeat`)
    kv_events: object = None  # a KVEventsConfig: publish the prefix cache's KV events from there


@dataclass(frozen=True)
class Front:
    """What the server's process needs of the engine without asking it: what its request checker is
    built from (the model's and the engine's configuration, ``max_model_len``, the chunk size, the memory
    budget, the tokenizer or why there is none: :meth:`checker`) and the live trace's ring size (0
    without one)."""

    config: object
    engine_config: object
    max_model_len: int
    chunk_size: int
    budget_bytes: int
    tokenizer: object
    tokenizer_note: str | None
    trace_steps: int
    kv_event_sources: dict  # /kv_event_sources: {rank: the publisher's configuration} ({} when off)

    def checker(self):
        """The engine's :class:`~kda_ref.engine.request_check.RequestChecker`, built here: the server's
        process checks every request itself (the engine process then takes token ids only)."""
        from ..engine.request_check import RequestChecker

        return RequestChecker.for_engine(self.config, self.engine_config, self.max_model_len, self.chunk_size,
                                         self.budget_bytes, self.tokenizer, self.tokenizer_note)


def front_of(llm, trace_steps: int, kv_event_sources: dict | None = None) -> Front:
    """The engine's :class:`Front`; a tokenizer that cannot be pickled is replaced by ``None`` and a note."""
    from ..utils.procs import sendable_tokenizer

    tok, note = sendable_tokenizer(llm.tokenizer, llm.tokenizer_note, "the engine's")
    return Front(llm.config, llm.engine_config, llm.max_model_len, llm.chunk_size, llm.pool.budget_bytes, tok,
                 note, trace_steps, kv_event_sources or {})


def core_main(conn, spec: CoreSpec) -> None:
    """The engine process's entry point (:class:`~kda_ref.server.core_client.EngineCoreClient` starts it).
    A server's process that went away while this one built or served ends it quietly."""
    for sig in (signal.SIGINT, getattr(signal, "SIGHUP", None)):  # a terminal's Ctrl-C or hang-up reaches
        if sig is not None:  # the whole group: the server's process drains, then closes this one
            signal.signal(sig, signal.SIG_IGN)
    try:
        try:
            core = EngineCore(conn, spec)
        except Exception as err:  # noqa: BLE001 -- reported to the server's process, which refuses to start
            conn.send((FAILED, _picklable(err)))
            return
        core.serve()
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass


def _picklable(err: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(err).__name__}: {err}")


class EngineCore:
    """The engine process's side of the pipe (module docstring): builds the engine loop and its observers,
    then reads the server's messages until it says ``close`` or goes away."""

    def __init__(self, conn, spec: CoreSpec):
        import torch

        from .kv_publish import kv_events_observer
        from .live import LiveTrace
        from .loop import EngineLoop
        from .metrics import ServerMetrics
        from .models import load_llm
        from ..utils.malloc import tune_glibc_malloc

        torch.set_num_threads(spec.threads)
        # keep freed tensors' memory in the heap: a prefill's temporaries are otherwise page-faulted in on every
        # step (vLLM's CPU platform preloads tcmalloc into its workers for the same reason: platforms/cpu.py)
        tune_glibc_malloc()
        self.conn, self._send_lock = conn, threading.Lock()
        self.live = LiveTrace(spec.trace_steps, max_bytes=spec.trace_bytes) if spec.trace_steps else None
        llm, _ = load_llm(spec.model, spec.engine, self.live)
        self.metrics = ServerMetrics(spec.model_name)
        self.streams: dict = {}  # key -> the loop's Stream, while it runs
        self.outbox: list[tuple] = []  # (key, kind, value) events not yet sent (the loop's thread fills it)
        self._outbox_lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one flush at a time: a request's events leave in their order
        self.received = 0  # submissions taken (admitted, refused or given up)
        self._reported = (0, 0)  # (received, waiting) as last sent (the server starts from none)
        self.heartbeat = Heartbeat(lambda: self.send((BEAT,)), spec.heartbeat_timeout)
        self.guard = StallGuard(self.heartbeat, lambda: list(self.streams.values()))
        publish = kv_events_observer(llm, spec.kv_events)
        self.loop = EngineLoop(llm, max_waiting=spec.max_waiting, observers=[_Flush(self), self.guard, self.metrics]
                               + ([self.live] if self.live is not None else [])
                               + ([publish] if publish is not None else []))
        self.front = front_of(llm, spec.trace_steps, {} if publish is None else {"0": publish.publisher.source()})
        self.calls = {"stop": self.loop.stop,
                      "metrics": self.metrics.render,
                      "counters": self._counters,
                      "since": self._live("since"), "wait_after": self._live("wait_after"),
                      "summaries_since": self._live("summaries_since")}
        self.notes = {"submit": self._submit, "cancel": self._cancel, "attach": self._live("attach"),
                      "refused": self.metrics.refused.inc}

    def send(self, msg: tuple) -> None:
        """Any thread (the loop's for events, the reader's and the callers' for answers)."""
        with self._send_lock:
            self.conn.send(msg)

    def serve(self) -> None:
        self.loop.start()
        threading.Thread(target=self._watch, name="kda-core-watch", daemon=True).start()
        self.send((READY, self.front))
        self.heartbeat.start()
        while self._take(self._read_queued()):
            pass
        if self.loop.alive:
            self.loop.stop(drain=False)

    def _read_queued(self) -> list[tuple]:
        """The next message and every one already queued behind it (``[(CLOSE,)]`` when the pipe ended)."""
        try:
            batch = [self.conn.recv()]
            while self.conn.poll(0):
                batch.append(self.conn.recv())
        except (EOFError, OSError):  # the server's process is gone: nobody reads the answers
            return [(CLOSE,)]
        return batch

    def _take(self, batch: list[tuple]) -> bool:
        """Act on ``batch`` in order; False once told to close. A submission whose cancel is in the same batch
        is queued cancelled, so the loop answers it without running it and counts it an abort: the server
        gave up on it while this process was frozen (:mod:`.heartbeat`: both waited in the pipe; its client
        was told it failed, and the answer finds no stream there), or its client left at once."""
        given_up = {m[2][0]: m[2][1] for m in batch if m[0] == NOTE and m[1] == "cancel"}
        for msg in batch:
            if msg[0] == CLOSE:
                return False
            if msg[0] == NOTE and msg[1] == "submit" and msg[2][0] in given_up:
                self._submit(*msg[2], cancelled=given_up[msg[2][0]])
            elif msg[0] == NOTE:
                self._note(msg[1], msg[2])
            else:  # may block (a stop drains, a trace reader waits): a thread of its own
                threading.Thread(target=self._answer, args=msg[1:], daemon=True).start()
        return True

    def _note(self, name: str, args: tuple) -> None:
        try:
            self.notes[name](*args)
        except Exception as err:  # noqa: BLE001 -- a note has nobody to answer: reported, and serving goes on
            warnings.warn(f"the engine process could not take the note {name!r}: {err!r}", RuntimeWarning,
                          stacklevel=1)

    def _answer(self, call_id: int, name: str, args: tuple) -> None:
        try:
            value, ok = self.calls[name](*args), True
        except Exception as err:  # noqa: BLE001 -- raised again in the caller's process
            value, ok = _picklable(err), False
        try:
            self.send((RETURN, call_id, ok, value))
        except (OSError, ValueError):  # the pipe closed: the server's process is gone
            pass

    def _watch(self) -> None:
        """Tell the server's process when the loop stopped (asked to, or died: with its error)."""
        self.loop.wait_stopped()
        err = self.loop.error
        try:
            self.send((ENDED, None if err is None else f"{type(err).__name__}: {err}"))
        except (OSError, ValueError):
            pass

    def _submit(self, key: int, ids: list[int], text: str | None, params, live_text: bool,
                cancelled: str | None = None) -> None:
        """Queue one request the server's process checked; its events go back under ``key`` (a step's
        tokens only with ``live_text``: a request answered whole gets its ids and text with its output).
        Refused here only when the loop no longer takes requests (an ``error`` event). ``cancelled``: its
        cancel reason when the cancel came with it (:meth:`_take`)."""
        def on_event(kind, value, key=key):
            if kind == "tokens":
                if live_text:
                    self.push(key, kind, (list(value), value.text))
                return
            self.streams.pop(key, None)
            self.push(key, kind, value)

        try:
            stream = self.loop.admit(ids, text, params, on_event=on_event, live_text=live_text, bounded=False,
                                     cancelled=cancelled)
        except Exception as err:  # noqa: BLE001 -- the loop stopped: the request's one answer
            self.push(key, "error", str(err))
            stream = None
        with self._outbox_lock:
            self.received += 1
        if stream is not None:
            self.streams[key] = stream
            if stream.error is not None or stream.output is not None:  # it ended meanwhile (its on_event
                self.streams.pop(key, None)  # may have run before it was listed)
        if stream is None or not self.loop.alive:  # nothing turns the loop: send it from here
            self.flush()

    def push(self, key: int, kind: str, value) -> None:
        """An event for the server's process, sent with the loop's next :meth:`flush`."""
        with self._outbox_lock:
            self.outbox.append((key, kind, value))

    def flush(self) -> None:
        """Send the events of the loop's turn in one message, with the submissions taken and the requests
        waiting (read in that order: the server's process may count one request twice, never none); nothing
        when none changed. The loop's thread calls it (:class:`_Flush`), and the pipe's for a refusal: one at
        a time, so that a flush which took later events cannot send them before one which took earlier ones."""
        with self._flush_lock:
            with self._outbox_lock:
                events, self.outbox = self.outbox, []
                received = self.received
            counts = (received, self.loop.waiting)
            if not events and counts == self._reported:
                return
            self._reported = counts
            try:
                self.send((OUTPUTS, events, *counts))
            except (OSError, ValueError):  # the pipe closed: the server's process is gone
                pass
            except (pickle.PicklingError, TypeError, AttributeError):  # nothing was written: one event does not pickle
                self.send((OUTPUTS, [_sendable(e) for e in events], *counts))  # that request fails alone

    def _counters(self) -> dict:
        """The loop's time counters and the engine's step count (read by ``kda-ref bench serve --fill``)."""
        loop = self.loop
        return {"step_seconds": loop.step_seconds, "observer_seconds": loop.observer_seconds,
                "steps": loop.llm.clock.step}

    def _cancel(self, key: int, reason: str) -> None:
        stream = self.streams.get(key)
        if stream is not None:
            stream.cancel(reason)

    def _live(self, method: str):
        def call(*args):
            if self.live is None:
                raise LookupError("this server keeps no live trace (started with --trace-steps 0)")
            return getattr(self.live, method)(*args)
        return call


def _sendable(event: tuple) -> tuple:
    """``event`` if it pickles, else an ``error`` event for its request saying why (its stream ends there;
    every other request's events of the turn still go)."""
    key, kind, value = event
    try:
        pickle.dumps(value)
        return event
    except Exception as err:  # noqa: BLE001 -- whatever pickle raises, the request is told
        return key, "error", f"the engine process could not send this request's {kind} event: {err!r}"


class _Flush:
    """The :class:`~kda_ref.server.loop.StepObserver` that sends the engine process's outbox: after every
    step (its tokens), at the top of every turn (the finished requests' answers, put after the observers
    ran) and when the loop ends."""

    def __init__(self, core: EngineCore):
        self.core = core

    def after_step(self, loop, ended, stepped) -> None:
        self.core.flush()

    def between_steps(self, loop) -> None:
        self.core.flush()

    def loop_ended(self, loop) -> None:
        self.core.flush()
