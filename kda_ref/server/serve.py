"""``kda-ref serve [MODEL]``: the engine behind an OpenAI-compatible HTTP server (uvicorn), as ``vllm serve``
and ``python -m sglang.launch_server`` start theirs.

Every :class:`~kda_ref.engine.EngineConfig` keyword is a flag, made from the configuration's own field
specs (``--max-num-seqs``, ``--prefix-cache radix --checkpoint-policy sglang``, ``--speculative ngram``,
``--static-decode``, ...), so a keyword added there is a flag here with no edit. SIGTERM or Ctrl-C: uvicorn
stops accepting connections, lets the open ones finish (at most ``--shutdown-timeout`` seconds, then
cancels them), and the engine loop finishes or cancels what it still holds; the process exits 0.

:func:`make_server` builds the parts in-process (tests, ``kda-ref bench serve``); :class:`ServerThread`
runs them on a free port in a background thread.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
import time

import uvicorn

from ..cache.options import CACHE_OPTION_TYPES
from ..engine.config import EngineConfig, config_parts
from ..speculative import SpecConfig
from ..utils import STOPPED_WHILE_STARTING, interrupt_on_stop_signals, server_threads
from ..utils.limits import MAX_THREADS
from ..utils.config_fields import field_specs
from .app import MAX_BODY_BYTES, Server
from .chat import ByteChatTemplate, ChatTemplate
from .http import HEADER_TIMEOUT_S, bounded_h11
from .live import MAX_TRACE_BYTES, LiveTrace
from .loop import EngineLoop
from .metrics import ServerMetrics

logger = logging.getLogger("uvicorn.error")  # the server's log: uvicorn's, so one format and one level
CONFIG_CLASSES = (EngineConfig, *config_parts().values(), *CACHE_OPTION_TYPES.values(), SpecConfig)
NOT_FLAGS = ("prefix_cache",)  # CacheConfig's field is an options object; its flat keyword is made below


def engine_specs() -> list[dict]:
    """The field spec of every flat ``EngineConfig`` keyword that a command line can give (no objects)."""
    out, seen = [], set()
    for cls in CONFIG_CLASSES:
        for s in field_specs(cls):
            key = s.get("flat", s["name"])
            if s.get("kind") == "object" or key in seen or s["name"] in NOT_FLAGS and "flat" not in s:
                continue
            seen.add(key)
            out.append(dict(s, key=key))
    return out


def _flag_type(spec: dict):
    kind = spec.get("kind", "int")
    if kind in ("number", "float"):
        return float
    return str if kind == "str" else int


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """One flag per engine keyword (default: not given, so the configuration's default holds)."""
    g = p.add_argument_group("engine (every EngineConfig keyword; see docs/architecture.md)")
    g.add_argument("--prefix-cache", choices=("none", *CACHE_OPTION_TYPES), default=None,
                   help="the prefix cache: none, radix (SGLang's) or block (vLLM's)")
    for s in engine_specs():
        flag, help_ = "--" + s["key"].replace("_", "-"), f"{s['doc']} (default {s['default']!r})"
        if s.get("kind") == "bool":
            g.add_argument(flag, dest=s["key"], action=argparse.BooleanOptionalAction, default=None, help=help_)
        else:
            choices = list(s["choices"]) if "choices" in s else None
            g.add_argument(flag, dest=s["key"], type=_flag_type(s), choices=choices, default=None, help=help_)


def engine_kwargs(a: argparse.Namespace) -> dict:
    """``LLM``'s keywords from the flags given (the others keep their defaults)."""
    keys = ["prefix_cache", *(s["key"] for s in engine_specs())]
    return {k: getattr(a, k) for k in keys if getattr(a, k, None) is not None}


class GracefulServer(uvicorn.Server):
    """uvicorn's ``Server`` for ``kda-ref serve``. The first SIGTERM / SIGINT: uvicorn stops accepting and
    waits for the open connections, the engine loop stops taking requests and finishes what it holds; past
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
                max_waiting: int = 64, api_key: str | None = None, max_body_bytes: int = MAX_BODY_BYTES) -> Server:
    """The server's parts over ``llm`` (whose tracer is ``live``, or no tracer): its loop (not started),
    metrics and routes."""
    metrics = ServerMetrics(model_name)
    loop = EngineLoop(llm, max_waiting=max_waiting, observers=[metrics] + ([live] if live is not None else []))
    return Server(loop, model_name, chat_template or ByteChatTemplate(), metrics=metrics, live=live,
                  api_key=api_key, max_body_bytes=max_body_bytes)


class ServerThread:
    """``with ServerThread(server) as url:`` -- the engine loop and uvicorn on a free port of ``host`` in
    background threads; both stopped (what still runs cancelled) when the block ends."""

    def __init__(self, server: Server, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 60.0,
                 header_timeout: float = HEADER_TIMEOUT_S, max_connections: int | None = None,
                 half_close: bool = False):
        self.server = server
        self.uv = uvicorn.Server(uvicorn.Config(server.asgi, host=host, port=port, log_level="warning",
                                                lifespan="off", timeout_graceful_shutdown=5, interface="asgi3",
                                                http=bounded_h11(header_timeout, max_connections, half_close)))
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
        if self.server.loop.alive:  # first: what still runs is answered (cancelled) while the HTTP side lives
            self.server.loop.stop(drain=False)
        self.uv.should_exit = True
        self._thread.join(30)


# ---- the command line ------------------------------------------------------------------------------------
MODEL_NAMES = {"trained": "the small Kimi-Linear-layout model trained in this repo (default)",
               "trained-k3": "the trained Kimi K3 demo (with its MTP layer)",
               "random-tiny": "ModelConfig.tiny() with random weights from --seed",
               "random-micro": "ModelConfig.micro() with random weights (the tests' model)"}


class _Parser(argparse.ArgumentParser):
    """One line for a bad command line, naming the flag (``error: --max-waiting: must be >= 1, got 0``),
    exit code 2: the ``kda-ref`` command's convention (``kda_ref/cli.py``)."""

    def error(self, message: str):
        head, sep, rest = message.partition(": ")
        if sep and head.startswith("argument "):
            message = f"{head.removeprefix('argument ')}: {rest}"
        elif sep and head in ENGINE_FLAG_NAMES:  # the library names its keyword; here it is a flag
            message = f"{_flag(head)}: {rest}"
        elif sep and head in ("path", "model"):  # the loader names the folder it could not use
            message = f"MODEL: {rest}"
        # keywords the library quotes inside its message ('block_size', prefix_cache='none') as flags too
        message = re.sub(r"'(\w+)'|\b(\w+)=", lambda m: _flag_in(m), message)
        self.exit(2, f"error: {message}\n")


def _flag(keyword: str) -> str:
    return "--" + keyword.replace("_", "-")


def _flag_in(m: re.Match) -> str:
    quoted, assigned = m.group(1), m.group(2)
    if quoted in ENGINE_FLAG_NAMES:
        return f"'{_flag(quoted)}'"
    if assigned in ENGINE_FLAG_NAMES:
        return f"{_flag(assigned)}="
    return m.group(0)


ENGINE_FLAG_NAMES = {"prefix_cache", *(s.get("flat", s["name"]) for cls in CONFIG_CLASSES for s in field_specs(cls))}


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kda-ref serve", description="Serve the engine over OpenAI's HTTP API "
                                "(docs/serving.md).")
    p.add_argument("model", nargs="?", default="trained",
                   help="; ".join(f"{k}: {v}" for k, v in MODEL_NAMES.items()) + "; or a checkpoint folder")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free one, printed)")
    p.add_argument("--served-model-name", default=None, help="the model's name in the API (default: MODEL)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (default: the "
                   "KDA_REF_API_KEY environment variable; none: open)")
    p.add_argument("--max-waiting", type=int, default=64, help="requests accepted and not yet running before "
                   "new ones get 503 + Retry-After (default 64)")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, help="largest request body (413 past it)")
    p.add_argument("--trace-steps", type=int, default=256, help="engine steps the live trace keeps for the Live "
                   "page (default 256; 0: no live trace)")
    p.add_argument("--trace-mb", type=float, default=MAX_TRACE_BYTES / (1 << 20), help="the live trace's "
                   "records, as JSON, at most about this many MiB (default 32; the oldest steps leave first)")
    p.add_argument("--shutdown-timeout", type=float, default=30.0, help="on SIGTERM, seconds open requests get to "
                   "finish before they are cancelled (default 30)")
    p.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT_S, help="seconds a connection has to "
                   f"finish a request's headers before it is closed (default {HEADER_TIMEOUT_S:g})")
    p.add_argument("--max-connections", type=int, default=None, help="open connections held at most; past it a "
                   "new one is answered 503 and closed (default: the file limit, raised to its hard limit, less 64)")
    p.add_argument("--half-close", action="store_true", help="answer a non-streaming request whose client "
                   "half-closed after sending it (a client that closed and left then runs to its end: TCP cannot "
                   "tell the two apart; streams are answered either way)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: every core but "
                   "one, which the HTTP event loop keeps; at most 16)")
    add_engine_flags(p)
    return p


def _check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if a.threads is None:
        a.threads = server_threads()
    for name, lo in (("port", 0), ("max_waiting", 1), ("max_body_bytes", 1024), ("trace_steps", 0), ("threads", 1)):
        if getattr(a, name) < lo or (name == "port" and a.port > 65535):
            p.error(f"--{name.replace('_', '-')}: must be >= {lo}" + (" and <= 65535" if name == "port" else "")
                    + f", got {getattr(a, name)}")
    key = a.api_key if a.api_key is not None else os.environ.get("KDA_REF_API_KEY")
    if key is not None and (key != key.strip() or not key or not key.isprintable()):  # headers are stripped:
        p.error("--api-key: must be non-empty printable text without leading or trailing spaces (a client's "
                "header loses them, so no client could match it)")
    if a.threads > MAX_THREADS:
        p.error(f"--threads: must be <= {MAX_THREADS}, got {a.threads}")
    if not 0 <= a.shutdown_timeout <= 86400:
        p.error(f"--shutdown-timeout: must be in [0, 86400] seconds, got {a.shutdown_timeout}")
    if not 1 / 1024 <= a.trace_mb <= 65536:
        p.error(f"--trace-mb: must be in [1/1024, 65536] MiB, got {a.trace_mb}")
    if not 0 < a.header_timeout <= 3600:
        p.error(f"--header-timeout: must be in (0, 3600] seconds, got {a.header_timeout}")
    if a.max_connections is not None and a.max_connections < 1:
        p.error(f"--max-connections: must be >= 1, got {a.max_connections}")


def load_llm(model: str, kwargs: dict, live: LiveTrace | None):
    """The engine for ``model`` (a name of :data:`MODEL_NAMES` or a folder) and the engine flags, and the
    folder it came from (None for a model built here)."""
    import os

    from ..engine import LLM
    from ..model import ModelConfig
    from ..train import trained_path

    source = {"trained": lambda: trained_path(), "trained-k3": lambda: trained_path("k3"),
              "random-tiny": ModelConfig.tiny, "random-micro": ModelConfig.micro}.get(model, lambda: model)()
    folder = source if isinstance(source, (str, os.PathLike)) else None  # where a chat template may be
    return LLM(source, tracer=live, **kwargs), folder


def main(argv: list[str] | None = None) -> int:
    """``kda-ref serve``: build, serve until SIGTERM / Ctrl-C, exit 0 (module docstring). A signal while the
    model loads stops there (one log line, exit 0); from the moment the server exists it is the server's
    (:class:`GracefulServer`), so none is lost in between."""
    import torch

    interrupt_on_stop_signals()  # until the server exists, a signal is a KeyboardInterrupt here
    server = None
    try:
        p = build_parser()
        a = p.parse_args(argv)
        _check(p, a)
        torch.set_num_threads(a.threads)
        server = _build(p, a)
        server.loop.start()
        config = uvicorn.Config(server.asgi, host=a.host, port=a.port, lifespan="off", interface="asgi3",
                                timeout_graceful_shutdown=a.shutdown_timeout + 5, log_level="info",
                                http=bounded_h11(a.header_timeout, a.max_connections, a.half_close))
        uv = GracefulServer(config, server.loop, grace=a.shutdown_timeout)
        for sig in (signal.SIGTERM, signal.SIGINT):  # from here each is the server's (uvicorn installs the same)
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
    return 0 if uv.started or uv.signals else 1


def _build(p: argparse.ArgumentParser, a: argparse.Namespace) -> Server:
    """The model and the server's parts from the checked command line (a model that cannot load is a usage
    error naming it)."""
    from .chat import load_chat_template

    live = LiveTrace(a.trace_steps, max_bytes=int(a.trace_mb * (1 << 20))) if a.trace_steps else None
    try:
        llm, folder = load_llm(a.model, engine_kwargs(a), live)
    except (ValueError, OSError) as e:
        p.error(f"{e}")
    return make_server(llm, live, model_name=a.served_model_name or a.model,
                       chat_template=load_chat_template(folder), max_waiting=a.max_waiting,
                       api_key=a.api_key or os.environ.get("KDA_REF_API_KEY") or None,
                       max_body_bytes=a.max_body_bytes)
