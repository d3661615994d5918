"""The ASGI application (Starlette): OpenAI's endpoints, health, metrics and the live trace, over one
engine loop: an :class:`~kda_ref.server.loop.EngineLoop` in this process, or the engine process's
:class:`~kda_ref.server.core_client.EngineCoreClient` (what ``kda-ref serve`` runs), which answers the same
calls -- ``submit``, ``stop``, ``alive``, ``responsive``, ``silent_for``, ``accepting``, ``error``,
``max_waiting``, ``checker`` (and ``unresponsive_reason`` once it is not responsive).

``api_key``: every path but ``/health`` and ``/metrics`` needs ``Authorization: Bearer <key>`` (as SGLang's
``--api-key``; vLLM's guards only the ``/v1``, ``/v2``, ``/inference`` and ``/cohere`` paths). Bodies past
``max_body_bytes`` are a 413 before they are parsed. Every error is OpenAI's error object.
Design notes (the endpoint table): ``docs/serving.md#2-the-endpoints``; errors: ``docs/serving.md#3-errors``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .chat import ChatTemplate
from .flags import MAX_BODY_BYTES
from .http import STREAMS_KEY
from .live import LiveTrace
from .loop import EngineLoop, EngineUnresponsive, LoopStopped
from .metrics import CONTENT_TYPE, ServerMetrics, engine_liveness
from .openai_api import ChatFlavor, CompletionFlavor, Generation, prompts_of
from .protocol import APIError, check_model, parse_chat, parse_completion
from . import tokens_api

RETRY_AFTER_S = 1  # what a 503 tells the client to wait (seconds)
RETRY_CODES = ("overloaded", "engine_unresponsive")  # the 503s worth a retry: they pass
OPEN_PATHS = ("/health", "/metrics")
TRACE_PAGE = 64  # records per /kda/trace answer unless ?limit= says (the Live page reads a page a second)
SUMMARY_PAGE = 4096  # step summaries per /kda/trace/summary answer at most
TRACE_STREAM_THREADS = 16  # /kda/trace/stream readers waiting at once; more wait for a thread (Server.stream_waits)


def _error(e: APIError) -> JSONResponse:
    headers = {"Retry-After": str(RETRY_AFTER_S)} if e.code in RETRY_CODES else None
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


def _died(err: BaseException) -> str:
    """How an engine that ended by itself ended: the process exited (its exit code), or the loop raised."""
    text = str(err)
    return text if text.startswith("the engine") else f"the engine loop died: {type(err).__name__}: {text}"


def _client_left(request: Request, err: ClientDisconnect) -> Response:
    """A client that closed its connection before its body ended: one INFO line (not uvicorn's 40-line ERROR
    traceback), and a 499 (nginx's "client closed request") that uvicorn drops, since nobody reads it."""
    client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
    logging.getLogger("uvicorn.error").info("%s left before sending its whole body (%s %s)", client,
                                            request.method, request.url.path)
    return Response(status_code=499)


async def _engine_call(fn):
    """``fn()`` on a worker thread; an engine process that is gone (:class:`LoopStopped`) is a 503."""
    try:
        return await asyncio.to_thread(fn)
    except LoopStopped as e:
        code = "engine_unresponsive" if isinstance(e, EngineUnresponsive) else "shutting_down"
        raise APIError(str(e), status=503, type="server_error", code=code) from None


def _unexpected(request: Request, err: Exception) -> JSONResponse:
    """Any other exception: OpenAI's error object with a 500 (not a plain-text page). The last resort, in
    Starlette's ``ServerErrorMiddleware``, which raises the exception again after answering (uvicorn then
    drops the connection): the routes answer their own unexpected errors first (:func:`answered`)."""
    return _error(APIError(f"internal error: {type(err).__name__}", status=500, type="server_error"))


def answered(endpoint):
    """``endpoint`` with its unexpected exceptions answered as a 500 in OpenAI's shape and logged once with
    their traceback, so the connection stays open for the client's next request (an exception that left the
    app would make uvicorn close it without ``Connection: close``). Refusals (:class:`APIError`) and a client
    that left go on to their own handlers."""
    async def route(request: Request):
        try:
            return await endpoint(request)
        except (APIError, ClientDisconnect, HTTPException):
            raise
        except Exception as err:  # noqa: BLE001 -- a bug: the operator gets the traceback, the client a 500
            logging.getLogger("uvicorn.error").exception("internal error answering %s %s", request.method,
                                                         request.url.path)
            return _unexpected(request, err)
    route.__name__ = getattr(endpoint, "__name__", "route")
    return route


async def read_json(request: Request, limit: int):
    """The body as JSON, read at most ``limit`` bytes far: 415 for a Content-Type other than JSON (none
    given is read as JSON), 413 past ``limit`` (by its Content-Length or as it arrives), 400 for bytes that
    are not JSON."""
    kind = request.headers.get("content-type")
    media = (kind or "").split(";", 1)[0].strip().lower()
    if kind is not None and media != "application/json" and not media.endswith("+json"):
        raise APIError(f"Content-Type must be application/json, got {kind[:60]!r}", status=415,
                       code="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(f"the request body is {int(declared):,} bytes; at most {limit:,} are accepted", status=413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise APIError(f"the request body is over {limit:,} bytes, the most accepted", status=413)
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:
        raise APIError(f"the request body is not valid JSON ({type(e).__name__}: {str(e)[:80]})") from None


class UnreadBody:
    """One request's ASGI ``receive`` / ``send``, watching whether its body was read to the end. A response
    that starts before then (a 401, a 413 by ``Content-Length``, a 415) carries ``Connection: close``, so
    the server closes the connection after it: a body nobody reads would otherwise hold the connection (and
    its slot under ``--max-connections``) while the client trickles it, and the next request on it could
    not be told from the rest of this one's body."""

    def __init__(self, scope, receive, send):
        headers = dict(scope["headers"])
        self.done = b"transfer-encoding" not in headers and headers.get(b"content-length", b"0").strip() == b"0"
        self._receive, self._send = receive, send

    async def receive(self):
        message = await self._receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.done = True  # the last chunk, or the client left
        return message

    async def send(self, message) -> None:
        if message["type"] == "http.response.start" and not self.done:
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await self._send(message)


class Server:
    """The routes over one loop (module docstring); :attr:`app` is the ASGI application."""

    def __init__(self, loop: EngineLoop, model_name: str, chat_template: ChatTemplate, *,
                 metrics: ServerMetrics, live: LiveTrace | None = None, api_key: str | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES, kv_event_sources: dict | None = None,
                 model_aliases: tuple[str, ...] = ()):
        self.loop, self.model_name, self.template = loop, model_name, chat_template
        # every name a request may use; answers carry the first (vLLM's served_model_name[0])
        self.model_names = (model_name, *model_aliases)
        self.metrics, self.live, self.api_key, self.max_body_bytes = metrics, live, api_key, max_body_bytes
        self.kv_event_sources = dict(kv_event_sources or {})
        # the trace streams wait up to a second a turn on threads of their own: in asyncio's default pool
        # (cpu_count + 4 threads) eight readers held every worker, and each completion, /metrics and /kda/trace
        # queued behind their waits (0.03 -> 0.8 s on two cores); more readers here queue among themselves
        self.stream_waits = ThreadPoolExecutor(TRACE_STREAM_THREADS, thread_name_prefix="kda-trace-stream")
        routes = [Route(path, answered(fn), methods=methods) for path, fn, methods in (
            ("/v1/completions", self.completions, ["POST"]), ("/v1/chat/completions", self.chat, ["POST"]),
            ("/v1/models", self.models, None), ("/health", self.health, None), ("/metrics", self.prometheus, None),
            ("/kda/trace", self.trace, None), ("/kda/trace/stream", self.trace_stream, None),
            ("/kda/trace/summary", self.trace_summary, None),
            ("/tokenize", self.tokenize, ["POST"]), ("/detokenize", self.detokenize, ["POST"]),
            ("/version", self.version, None), ("/kv_event_sources", self.kv_sources, None))]
        self.started = int(time.time())  # /v1/models' "created"
        self.app = Starlette(routes=routes)
        self.app.add_exception_handler(APIError, lambda req, e: _error(e))
        self.app.add_exception_handler(ClientDisconnect, _client_left)
        self.app.add_exception_handler(Exception, _unexpected)
        self.app.add_exception_handler(404, lambda req, e: _error(APIError(f"no route {req.url.path}",
                                                                           status=404, code="not_found")))
        self.app.add_exception_handler(405, lambda req, e: _error(APIError(
            f"{req.method} is not allowed on {req.url.path}", status=405, code="method_not_allowed")))
        self.asgi = self._guard

    def close(self) -> None:
        """End the trace streams' threads (a stream still waiting gets its answer first, within a second). Called
        once the HTTP server stopped: :class:`~kda_ref.server.serve.ServerThread` and ``kda-ref serve``."""
        self.stream_waits.shutdown(wait=False, cancel_futures=True)

    async def _guard(self, scope, receive, send):
        """The API key check in front of the app (a pure ASGI wrapper: nothing is read before it passes), and
        ``Connection: close`` on any answer given before the request's body was read (:class:`UnreadBody`)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = UnreadBody(scope, receive, send)
        if self.api_key is not None and scope["path"] not in OPEN_PATHS:
            auth = dict(scope["headers"]).get(b"authorization", b"")  # compared as the bytes sent (UTF-8)
            if not hmac.compare_digest(auth, f"Bearer {self.api_key}".encode()):
                err = APIError("Incorrect API key provided (expected Authorization: Bearer <key>)", status=401,
                               code="invalid_api_key")
                await _error(err)(scope, body.receive, body.send)
                return
        await self.app(scope, body.receive, body.send)

    # ---- generation --------------------------------------------------------------------------------
    async def completions(self, request: Request):
        return await self._generate(request, parse_completion(await read_json(request, self.max_body_bytes)),
                                    CompletionFlavor())

    async def chat(self, request: Request):
        return await self._generate(request, parse_chat(await read_json(request, self.max_body_bytes)),
                                    ChatFlavor())

    async def _generate(self, request: Request, req, flavor):
        s = req.sampling
        request.scope[STREAMS_KEY] = bool(s.stream)  # what a client's half-close means (.http.BoundedH11)
        check_model(s.model, self.model_names)
        try:
            gen = await Generation.start(self.loop, flavor, self.model_name, lambda: prompts_of(req, self.template), s)
        except APIError as e:
            if e.status == 503:
                self.metrics.refused.inc()
            raise
        if s.stream:
            return StreamingResponse(gen.sse(), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        body = await gen.response(request.is_disconnected)
        return JSONResponse(body) if body is not None else Response(status_code=499)

    # ---- the rest ----------------------------------------------------------------------------------
    async def models(self, request: Request):
        llm = self.loop.checker
        return JSONResponse({"object": "list", "data": [{
            "id": name, "object": "model", "created": self.started, "owned_by": "kda-viz",
            "max_model_len": llm.max_model_len, "chat_template": self.template.name} for name in self.model_names]})

    async def tokenize(self, request: Request):
        body = await read_json(request, self.max_body_bytes)
        return JSONResponse(await tokens_api.off_loop(tokens_api.tokenize, self.loop.checker, self.template, body,
                                                      self.model_names))

    async def detokenize(self, request: Request):
        body = await read_json(request, self.max_body_bytes)
        return JSONResponse(await tokens_api.off_loop(tokens_api.detokenize, self.loop.checker, body,
                                                      self.model_names))

    async def version(self, request: Request):
        return JSONResponse({"version": tokens_api.version()})

    async def kv_sources(self, request: Request):
        """vLLM's ``/kv_event_sources``: ``{rank: the KV-event publisher's configuration}``, its bound
        addresses resolved (``{}`` when the server publishes none)."""
        return JSONResponse(self.kv_event_sources)

    async def health(self, request: Request):
        """200 while the engine runs and answers; 503 saying why not: unresponsive (frozen past its heartbeat
        deadline), exited or died (its error), or stopped."""
        loop = self.loop
        if loop.alive and loop.responsive:
            return JSONResponse({"status": "ok"})
        if loop.alive:
            err = APIError(loop.unresponsive_reason(), status=503, type="server_error", code="engine_unresponsive")
        elif loop.error is not None:
            err = APIError(_died(loop.error), status=503, type="server_error", code="engine_dead")
        else:
            err = APIError("the engine loop stopped", status=503, type="server_error", code="shutting_down")
        return _error(err)

    async def prometheus(self, request: Request):
        """The engine's metrics (off the event loop: with the engine in a process of its own, rendering is a
        call into it, answered from this side when the engine does not answer), then this process's own."""
        loop = self.loop
        text = await _engine_call(self.metrics.render)
        return Response(text + engine_liveness(loop.alive and loop.responsive, loop.silent_for()),
                        media_type=CONTENT_TYPE)

    def _since(self, request: Request) -> int:
        raw = request.query_params.get("since", "-1")
        try:
            return int(raw)
        except ValueError:
            raise APIError(f"since: must be an integer step number, got {raw[:40]!r}", param="since") from None

    def _live(self) -> LiveTrace:
        if self.live is None:
            raise APIError("this server keeps no live trace (started with --trace-steps 0)", status=404,
                           code="not_found")
        return self.live

    async def trace(self, request: Request):
        """The records after ``since``, at most ``limit`` (default :data:`TRACE_PAGE`): a reader pages through
        the ring; the answer is gathered and encoded off the event loop, which keeps serving meanwhile."""
        live, since = self._live(), self._since(request)
        raw = request.query_params.get("limit", str(min(TRACE_PAGE, live.max_steps)))
        if not raw.isdigit() or not 1 <= int(raw) <= live.max_steps:
            raise APIError(f"limit: must be an integer in [1, {live.max_steps}], got {raw[:40]!r}", param="limit")

        def answer() -> bytes:
            return json.dumps(live.since(since, int(raw)), separators=(",", ":")).encode()

        return Response(await _engine_call(answer), media_type="application/json")

    async def trace_summary(self, request: Request):
        """Every step's compact summary after ``since`` (at most ``limit``, 4096 by default): what a reader
        that draws only the newest steps in detail reads of all of them (:meth:`LiveTrace.summaries_since`)."""
        live, since = self._live(), self._since(request)
        raw = request.query_params.get("limit", str(SUMMARY_PAGE))
        if not raw.isdigit() or not 1 <= int(raw) <= SUMMARY_PAGE:
            raise APIError(f"limit: must be an integer in [1, {SUMMARY_PAGE}], got {raw[:40]!r}", param="limit")

        def answer() -> bytes:
            return json.dumps(live.summaries_since(since, int(raw)), separators=(",", ":")).encode()

        return Response(await _engine_call(answer), media_type="application/json")

    async def trace_stream(self, request: Request):
        live, since = self._live(), self._since(request)

        async def events():
            last = since
            while not await request.is_disconnected():
                live.attach()  # the ring records while this stream reads it
                try:
                    waits = asyncio.get_running_loop().run_in_executor
                    got = await waits(self.stream_waits, live.wait_after, last, 1.0)
                    doc = await waits(self.stream_waits, live.since, last) if got else None
                except LoopStopped:  # the engine process is gone (shutdown): the stream ends with it
                    return
                if doc is None:
                    if not self.loop.alive:  # the engine stopped (shutdown): no step will come, so end
                        return
                    yield ": keep-alive\n\n"
                    continue
                if last >= 0 and doc["first_step"] is not None and doc["first_step"] > last + 1:  # fell behind
                    yield f"event: gap\ndata: {json.dumps({'missed': doc['first_step'] - last - 1})}\n\n"
                for rec in doc["records"]:
                    last = rec["step"]
                    yield f"data: {json.dumps(rec, separators=(',', ':'))}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
