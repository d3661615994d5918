"""``kda-ref serve [MODEL]``: the engine behind an OpenAI-compatible HTTP server (uvicorn), as ``vllm serve``
and ``python -m sglang.launch_server`` start theirs.

Every :class:`~kda_ref.engine.EngineConfig` keyword is a flag (:mod:`.flags`). The engine runs in a process
of its own (:func:`make_process_server`), or with ``--engine-in-process`` as a thread of this one;
:func:`make_server` builds the parts in-process over an ``LLM`` (tests, the Lab); :class:`ServerThread` runs
either on a free port in a background thread. SIGTERM, Ctrl-C or SIGHUP
(:func:`~kda_ref.utils.stop_signals`) drain, then cancel after ``--shutdown-timeout``; the process exits 0.
Design notes: ``docs/serving.md#1-the-shape-one-loop-owns-the-engine-in-a-process-of-its-own``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

import uvicorn

from ..utils import STOPPED_WHILE_STARTING, interrupt_on_stop_signals, stop_signals
from .app import Server
from .chat import ByteChatTemplate, ChatTemplate
from .core_client import EngineCoreClient, RemoteLive, RemoteMetrics
from .engine_core import CoreSpec
from .flags import MAX_BODY_BYTES, MODEL_NAMES, build_parser, engine_kwargs, parse  # noqa: F401 (MODEL_NAMES: re-exported)
from .http import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, bounded_h11
from ..kv_events.config import KVEventsConfig
from .kv_publish import kv_events_observer
from .live import LiveTrace
from .loop import EngineLoop
from .metrics import ServerMetrics
from .models import load_llm, model_source

logger = logging.getLogger("uvicorn.error")  # the server's log: uvicorn's, so one format and one level


class GracefulServer(uvicorn.Server):
    """uvicorn's ``Server`` for ``kda-ref serve``. The first SIGTERM / SIGINT / SIGHUP: uvicorn stops accepting
    and waits for the open connections, the engine loop stops taking requests and finishes what it holds; past
    ``grace`` seconds it cancels the rest, so each of those requests is answered (a 503 in OpenAI's shape,
    or an ``error`` event and ``[DONE]`` in its stream). Any later signal cancels what is open at once,
    answered the same way; unlike uvicorn's own second Ctrl-C, connections are never dropped unanswered.
    Signals are not re-raised after the shutdown (uvicorn does), so the process exits 0 however many came.
    ``/kda/trace/stream`` readers end when the loop has stopped, so they cannot hold the shutdown."""

    def __init__(self, config, engine_loop: EngineLoop, grace: float):
        super().__init__(config)
        self.engine_loop, self.grace = engine_loop, grace
        self.signals = 0

    def handle_exit(self, sig, frame) -> None:
        """The signal handler (the main thread, between two bytecodes): set flags and start a thread only."""
        self.signals += 1
        self.should_exit = True  # never force_exit: that drops open connections without an answer
        drain = self.signals == 1
        if not drain:
            logger.info("signal %d again: cancelling the requests still open", sig)
        threading.Thread(target=self._stop_loop, args=(drain,), name="kda-stop", daemon=True).start()

    def _stop_loop(self, drain: bool) -> None:
        try:
            self.engine_loop.stop(drain=drain, timeout=self.grace if drain else 60.0)
        except TimeoutError:
            if drain:  # past the grace period: cancel what is left (each is answered)
                self.engine_loop.stop(drain=False)


def make_server(llm, live: LiveTrace | None, *, model_name: str, chat_template: ChatTemplate | None = None,
                max_waiting: int = 64, api_key: str | None = None, max_body_bytes: int = MAX_BODY_BYTES,
                kv_events: KVEventsConfig | None = None, model_aliases: tuple[str, ...] = ()) -> Server:
    """The server's parts over ``llm`` (whose tracer is ``live``, or no tracer): its loop (not started),
    metrics, the KV-event publisher when ``kv_events`` publishes, and the routes."""
    metrics = ServerMetrics(model_name)
    publish = kv_events_observer(llm, kv_events)
    observers = [metrics] + ([live] if live is not None else []) + ([publish] if publish is not None else [])
    loop = EngineLoop(llm, max_waiting=max_waiting, observers=observers)
    sources = {} if publish is None else {"0": publish.publisher.source()}
    return Server(loop, model_name, chat_template or ByteChatTemplate(), metrics=metrics, live=live,
                  api_key=api_key, max_body_bytes=max_body_bytes, kv_event_sources=sources, model_aliases=model_aliases)


class ServerThread:
    """``with ServerThread(server) as url:`` -- the engine loop and uvicorn on a free port of ``host`` in
    background threads; both stopped (what still runs cancelled) when the block ends."""

    def __init__(self, server: Server, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 60.0,
                 header_timeout: float = HEADER_TIMEOUT_S, max_connections: int | None = None,
                 half_close: bool = False, body_timeout: float = BODY_TIMEOUT_S):
        self.server = server
        self.uv = uvicorn.Server(uvicorn.Config(server.asgi, host=host, port=port, log_level="warning",
                                                lifespan="off", timeout_graceful_shutdown=5, interface="asgi3",
                                                http=bounded_h11(header_timeout, max_connections, half_close,
                                                                 body_timeout)))
        self._thread = threading.Thread(target=self.uv.run, name="kda-uvicorn", daemon=True)
        self.start_timeout = start_timeout
        self.url = ""

    def __enter__(self) -> str:
        self.server.loop.start()
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.uv.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.server.loop.stop(drain=False)
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.01)
        host, port = self.uv.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def __exit__(self, *exc) -> None:
        # first: what still runs is answered (cancelled) while the HTTP side lives. Also when the loop has
        # ended: an engine process whose loop died still runs until it is stopped (both stops are idempotent)
        self.server.loop.stop(drain=False)
        self.uv.should_exit = True
        self._thread.join(30)
        self.server.close()


# ---- the command line (parsed in .flags) -------------------------------------------------------------
def make_process_server(spec: CoreSpec, *, chat_template: ChatTemplate | None = None, api_key: str | None = None,
                        max_body_bytes: int = MAX_BODY_BYTES, model_aliases: tuple[str, ...] = ()) -> Server:
    """The server's routes over an engine in a process of its own, built from ``spec`` (started here; its
    build error raised here): :class:`~kda_ref.server.core_client.EngineCoreClient` in the loop's place,
    the metrics and the live trace read from that process. ``kda-ref serve`` runs this way by default."""
    client = EngineCoreClient(spec)
    return Server(client, spec.model_name, chat_template or ByteChatTemplate(), metrics=RemoteMetrics(client),
                  live=RemoteLive(client) if spec.trace_steps else None, api_key=api_key,
                  max_body_bytes=max_body_bytes, kv_event_sources=client.front.kv_event_sources,
                  model_aliases=model_aliases)


def main(argv: list[str] | None = None) -> int:
    """``kda-ref serve``: build, serve until SIGTERM / Ctrl-C, exit 0 (module docstring). A signal while the
    model loads stops there (one log line, exit 0); from the moment the server exists it is the server's
    (:class:`GracefulServer`), so none is lost in between."""
    import torch

    interrupt_on_stop_signals()  # until the server exists, a signal is a KeyboardInterrupt here
    server = None
    try:
        a = parse(argv)
        torch.set_num_threads(a.threads)
        server = _build(a)
        server.loop.start()
        config = uvicorn.Config(server.asgi, host=a.host, port=a.port, lifespan="off", interface="asgi3",
                                timeout_graceful_shutdown=a.shutdown_timeout + 5, log_level="info",
                                http=bounded_h11(a.header_timeout, a.max_connections, a.half_close,
                                                 a.body_timeout))
        uv = GracefulServer(config, server.loop, grace=a.shutdown_timeout)
        for sig in stop_signals():  # from here each is the server's (uvicorn installs INT and TERM the same)
            signal.signal(sig, uv.handle_exit)
    except KeyboardInterrupt:
        if server is not None:
            server.loop.stop(drain=False, timeout=60)
        print(STOPPED_WHILE_STARTING, file=sys.stderr)
        return 0
    try:
        uv.run()  # returns after SIGTERM / SIGINT once the open connections closed
    finally:
        server.loop.stop(drain=False, timeout=60)
        server.close()
    return 0 if uv.started or uv.signals else 1


def _build(a: argparse.Namespace) -> Server:
    """The model and the server's parts from the checked command line (a model that cannot load is a usage
    error naming it): the engine in a process of its own, or in this one with ``--engine-in-process``."""
    from .chat import load_chat_template

    names = a.served_model_name or [a.model]  # the first answers; the others are accepted too (vLLM's aliases)
    name = names[0]
    common = dict(api_key=a.api_key or os.environ.get("KDA_REF_API_KEY") or None, max_body_bytes=a.max_body_bytes,
                  model_aliases=tuple(names[1:]))
    try:
        if not a.engine_in_process:
            spec = CoreSpec(a.model, engine_kwargs(a), a.threads, a.max_waiting, name, a.trace_steps,
                            int(a.trace_mb * (1 << 20)), a.engine_heartbeat_timeout, a.kv_events_config)
            return make_process_server(spec, chat_template=load_chat_template(model_source(a.model)[1]), **common)
        live = LiveTrace(a.trace_steps, max_bytes=int(a.trace_mb * (1 << 20))) if a.trace_steps else None
        llm, folder = load_llm(a.model, engine_kwargs(a), live)
    except (ValueError, OSError) as e:
        build_parser().error(f"{e}")
    return make_server(llm, live, model_name=name, chat_template=load_chat_template(folder),
                       max_waiting=a.max_waiting, kv_events=a.kv_events_config, **common)
