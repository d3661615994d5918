"""The HTTP connection layer: uvicorn's h11 protocol with what an exposed server needs bounded.

uvicorn 0.55.0's ``H11Protocol`` (``uvicorn/protocols/http/h11_impl.py``), with: a ``header_timeout`` per
request's headers and a ``max_connections`` bound (answered ``503``); a half-closed client handled per
request (:meth:`BoundedH11._after_eof`, ``half_close``); a ``body_timeout`` between two reads of a body
(answered ``408``). uvicorn's ``limit_concurrency`` is not used. In production put a proxy in front.

Design notes (what each bound fixed, and why): ``docs/serving.md#the-connection-layer``;
the flags: ``docs/serving.md#1-the-shape-one-loop-owns-the-engine-in-a-process-of-its-own``.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("uvicorn.error")

HEADER_TIMEOUT_S = 10.0  # seconds a connection has to finish a request's headers (nginx's client_header_timeout: 60)
BODY_TIMEOUT_S = 10.0  # seconds a request's body may go without a byte arriving (nginx's client_body_timeout: 60)
EOF_RECHECK_S = 0.05  # after a client's FIN, how often to look whether the app has read its request
STREAMS_KEY = "kda.streams"  # set in a request's ASGI scope by the app: whether its answer is a stream
FD_RESERVE = 64  # descriptors kept for everything else: the log, model files, the trace stream's threads
# OpenAI's error object, as every other error of the server (kda_ref.server.protocol.APIError.body)
_REFUSAL_BODY = (b'{"error":{"message":"too many open connections","type":"server_error","param":null,'
                 b'"code":"too_many_connections"}}')
REFUSED_503 = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
               b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s" % (len(_REFUSAL_BODY), _REFUSAL_BODY))
_STALLED_BODY = (b'{"error":{"message":"the request body stopped arriving","type":"invalid_request_error",'
                 b'"param":null,"code":"request_timeout"}}')
TIMEOUT_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
               b"content-length: %d\r\n\r\n%s" % (len(_STALLED_BODY), _STALLED_BODY))


def default_max_connections() -> int:
    """Open connections the server holds at most: this process's file limit (raised to its hard limit
    first, as a server should) less :data:`FD_RESERVE`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # a sandbox may refuse; the soft limit stands
            pass
    limit = soft if soft != resource.RLIM_INFINITY else 65536
    return max(8, min(65536, limit - FD_RESERVE))


class _RefusalLog:
    """One log line a second at most, with how many were refused since the last one."""

    def __init__(self):
        self.count, self.last = 0, 0.0

    def note(self, what: str) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.last >= 1.0:
            logger.warning("%s (%d since the last such line)", what, self.count)
            self.count, self.last = 0, now


def bounded_h11(header_timeout: float = HEADER_TIMEOUT_S, max_connections: int | None = None,
                half_close: bool = False, body_timeout: float = BODY_TIMEOUT_S) -> type:
    """A protocol class for ``uvicorn.Config(http=...)``: :class:`BoundedH11` with these bounds."""
    for name, value in (("header_timeout", header_timeout), ("body_timeout", body_timeout)):
        if not value > 0:
            raise ValueError(f"{name}: must be a positive number of seconds, got {value!r}")
    limit = default_max_connections() if max_connections is None else max_connections
    if limit < 1:
        raise ValueError(f"max_connections: must be >= 1, got {limit}")
    return type("BoundedH11", (BoundedH11,), {"header_timeout": header_timeout, "max_connections": limit,
                                              "half_close": bool(half_close), "body_timeout": body_timeout,
                                              "refusals": _RefusalLog()})


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol with a header timeout, a connection cap and half-close kept (module docstring).
    Its class attributes are set by :func:`bounded_h11`."""

    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S
    max_connections: int = 1024
    half_close: bool = False
    refusals: _RefusalLog = _RefusalLog()
    _body_timer: asyncio.TimerHandle | None = None
    _body_seen = 0.0  # the event loop's time when the open request's body last grew (or its headers ended)

    def connection_made(self, transport: asyncio.Transport) -> None:
        if len(self.connections) >= self.max_connections:
            self.transport = transport  # uvicorn's connection_lost closes it
            transport.write(REFUSED_503)
            transport.close()
            self.refusals.note(f"refused a connection: {self.max_connections} are open (--max-connections)")
            return
        super().connection_made(transport)
        self._arm_header_timer()

    def on_response_complete(self) -> None:
        finished = self.cycle
        super().on_response_complete()  # may begin a pipelined request at once: a new cycle, its headers whole
        if not self.transport.is_closing() and self.cycle is finished:
            self._arm_header_timer()  # the next request's headers get the same time

    def _arm_header_timer(self) -> None:
        waiting_for = self.cycle
        self.loop.call_later(self.header_timeout, self._header_timeout, waiting_for)

    def _header_timeout(self, waiting_for) -> None:
        """No request began since the timer was armed (``self.cycle`` is unchanged): close the connection.
        A keep-alive connection idle since its last response was already closed by uvicorn's shorter
        keep-alive timer; this closes one that sent part of a request and stopped."""
        if self.cycle is waiting_for and not self.transport.is_closing():
            self.refusals.note(f"closed a connection that sent no complete request headers in "
                               f"{self.header_timeout:g} s (--header-timeout)")
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._body_seen = self.loop.time()  # the body grew (or its request's headers just ended)
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.body_timeout, self._body_check)

    def _body_check(self) -> None:
        """A request's body that went ``body_timeout`` seconds without a byte: 408 and close (the app, waiting
        for the rest, then reads a disconnect). Time when this server paused reading (its own flow control:
        the app has not taken what came) is not the client's and does not count."""
        self._body_timer = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        if self.flow.read_paused:  # this server stopped reading, not the client
            self._body_seen = self.loop.time()
        idle = self.loop.time() - self._body_seen
        if idle < self.body_timeout:
            self._body_timer = self.loop.call_later(self.body_timeout - idle, self._body_check)
            return
        self.refusals.note(f"closed a connection whose request body stopped arriving for {self.body_timeout:g} s "
                           f"(--body-timeout)")
        if self.cycle is not None and not self.cycle.response_started:
            self.transport.write(TIMEOUT_408)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:
        """The client closed its sending side: it half-closed, or it closed and left -- TCP cannot tell the
        two apart until the server writes (a write to a client that left is answered with a reset). In the
        middle of a body, or idle: close, as uvicorn does. After a whole request (h11 saw its end): keep the
        connection open for now and let :meth:`_after_eof` decide once the app has read the request; the
        connection closes after the answer (``keep_alive`` off)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self.conn.their_state is not h11.DONE:
            return None
        cycle.keep_alive = False
        self._after_eof(cycle)
        return True

    def _after_eof(self, cycle) -> None:
        """A stream (or any answer already begun) keeps the connection: a half-closed client reads the rest,
        one that left is found by the next write. A non-streaming request whose answer has not begun is a
        client that left (vLLM's and nginx's reading of a FIN): the connection closes, so the request is
        aborted, unless ``half_close`` says to answer it (then a client that left is found only when the
        whole answer is written). Until the app has said which it is (:data:`STREAMS_KEY`), look again."""
        if cycle is not self.cycle or cycle.response_complete or self.transport.is_closing():
            return
        streams = cycle.scope.get(STREAMS_KEY)
        if cycle.response_started or streams or self.half_close:
            return
        if streams is False:
            self.transport.close()
            return
        self.loop.call_later(EOF_RECHECK_S, self._after_eof, cycle)
