"""The connection layer (:mod:`kda_ref.server.http`) against raw sockets: a connection that never finishes
its headers is closed after ``header_timeout``; past ``max_connections`` a new connection is answered 503
at once and ``/health`` answers again as soon as the slow ones are gone; a client that half-closes after a
whole request reads its whole answer; one that leaves mid-body is one INFO line, no traceback."""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.request

import pytest

pytest.importorskip("uvicorn")

from kda_ref import LLM, ModelConfig  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.http import bounded_h11  # noqa: E402
from kda_ref.server.live import LiveTrace  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402

HEADER_TIMEOUT = 1.0
MAX_CONNECTIONS = 4


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


@pytest.fixture(scope="module")
def url(model):
    srv = make_server(LLM(model, max_num_seqs=2), None, model_name="micro")
    with ServerThread(srv, header_timeout=HEADER_TIMEOUT, max_connections=MAX_CONNECTIONS, half_close=True) as u:
        yield u


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _read_all(sock: socket.socket, timeout: float = 30.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _completion_request(n_body: int | None = None, stream: bool = False) -> bytes:
    body = json.dumps({"prompt": "hi", "max_tokens": 3, "temperature": 0, "stream": stream}).encode()
    length = len(body) if n_body is None else 1000
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()
    return head + (body if n_body is None else body[:n_body])


def test_a_connection_that_never_finishes_its_headers_is_closed(url):
    with socket.create_connection(_address(url)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # no blank line: the headers never end
        t0 = time.monotonic()
        assert _read_all(s) == b""  # closed by the server, with nothing written
        assert HEADER_TIMEOUT * 0.9 <= time.monotonic() - t0 < HEADER_TIMEOUT + 5


def test_a_pipelined_request_is_not_closed_by_the_header_timer(model):
    """After a response the header timer is armed for the next request's headers; when that request was
    pipelined behind the first, it had already begun, and the timer closed its connection mid-answer one
    ``header_timeout`` later. Here the second request is a trace stream that lasts as long as it is read."""
    live = LiveTrace(16)
    srv = make_server(LLM(model, tracer=live), live, model_name="micro")
    with ServerThread(srv, header_timeout=HEADER_TIMEOUT) as u, socket.create_connection(_address(u)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /kda/trace/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(HEADER_TIMEOUT * 3)
        got, t0 = b"", time.monotonic()
        while time.monotonic() - t0 < HEADER_TIMEOUT * 1.6:
            chunk = s.recv(65536)
            assert chunk, f"closed after {time.monotonic() - t0:.1f} s: {got[-300:]!r}"
            got += chunk
        assert got.count(b"HTTP/1.1 200") == 2


def test_past_the_cap_a_connection_is_refused_at_once_and_health_comes_back(url):
    slow = [socket.create_connection(_address(url)) for _ in range(MAX_CONNECTIONS)]
    try:
        for s in slow:
            s.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(0.2)
        with socket.create_connection(_address(url)) as extra:
            answer = _read_all(extra, timeout=5)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in answer
        err = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]  # OpenAI's error object, as every other
        assert err["type"] == "server_error" and err["code"] == "too_many_connections" and "param" in err
        time.sleep(HEADER_TIMEOUT + 0.5)  # the slow ones are closed: the server answers again
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            assert r.status == 200
    finally:
        for s in slow:
            s.close()


def test_a_client_that_half_closes_after_its_request_reads_the_answer(url):
    """With ``half_close`` (this module's server) a non-streaming answer; a stream with any server (the
    default one's non-streaming half-close is a client that left: ``tests/test_server.py`` aborts it)."""
    with socket.create_connection(_address(url)) as s:
        s.sendall(_completion_request())
        s.shutdown(socket.SHUT_WR)
        answer = _read_all(s)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert json.loads(body)["usage"]["completion_tokens"] == 3


def test_a_stream_half_closed_after_its_request_reads_to_done(model):
    srv = make_server(LLM(model, max_num_seqs=2), None, model_name="micro")
    with ServerThread(srv) as u, socket.create_connection(_address(u)) as s:  # half_close off
        s.sendall(_completion_request(stream=True))
        s.shutdown(socket.SHUT_WR)
        answer = _read_all(s)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"data: [DONE]" in answer


def test_a_client_that_leaves_mid_body_is_one_info_line(url, caplog):
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        with socket.create_connection(_address(url)) as s:
            s.sendall(_completion_request(n_body=10))
            time.sleep(0.2)
        deadline = time.monotonic() + 10
        while not any("left before sending its whole body" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
            time.sleep(0.05)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        assert r.status == 200


def test_the_bounds_are_checked():
    with pytest.raises(ValueError, match="^header_timeout: "):
        bounded_h11(0)
    with pytest.raises(ValueError, match="^max_connections: "):
        bounded_h11(1.0, 0)
    cls = bounded_h11(2.5, 7)
    assert (cls.header_timeout, cls.max_connections) == (2.5, 7)
