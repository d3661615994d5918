"""A server that stays reachable: a request body that stops arriving is answered 408 and closed, so stalled
clients cannot hold every connection slot; an answer given before the body was read closes its connection;
an engine process that stops answering (SIGSTOP: a long GC, a swap storm) is noticed within the heartbeat
deadline -- ``/health`` 503 saying so, ``/metrics`` answered from the HTTP side, new requests 503 at once,
open streams ended with an error -- and what a client was told failed is never run and counted."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

pytest.importorskip("uvicorn")

from kda_ref import LLM, ModelConfig  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402

TIMEOUT = 60


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


def _open(url: str) -> socket.socket:
    parts = urllib.parse.urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT)


def _stall(sock: socket.socket, extra_headers: str = "") -> None:
    """Complete headers declaring a 100-byte body, then one byte of it."""
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra_headers}"
                 f"Content-Length: 100\r\n\r\n{{".encode())


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=TIMEOUT) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_a_stalled_body_is_answered_408_and_closed(model):
    srv = make_server(LLM(model, max_num_seqs=2), None, model_name="micro")
    with ServerThread(srv, body_timeout=0.5) as url:
        sock = _open(url)
        t0 = time.monotonic()
        _stall(sock)
        answer = _read_all(sock)
        took = time.monotonic() - t0
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer.lower(), answer
        assert 0.4 <= took < 5.0, took
        trickle = _open(url)  # a body that keeps arriving, however slowly, is read to its end
        body = json.dumps({"prompt": "a", "max_tokens": 2}).encode()
        trickle.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 8):
            time.sleep(0.1)
            trickle.sendall(body[i:i + 8])
        assert _read_all(trickle).startswith(b"HTTP/1.1 200 ")
        trickle.close()


def test_stalled_bodies_cannot_lock_other_clients_out(model):
    """With ``max_connections`` stalled bodies open, new clients are refused -- until the body timeout closes
    the stalled ones; then ``/health`` answers again."""
    srv = make_server(LLM(model, max_num_seqs=2), None, model_name="micro")
    with ServerThread(srv, max_connections=4, body_timeout=1.0) as url:
        stalled = [_open(url) for _ in range(4)]
        for s in stalled:
            _stall(s)
        time.sleep(0.2)
        assert _health(url) == 503  # every slot held
        deadline = time.monotonic() + 10
        while _health(url) != 200:
            assert time.monotonic() < deadline, "the stalled bodies still hold every connection"
            time.sleep(0.1)
        for s in stalled:
            assert _read_all(s).startswith(b"HTTP/1.1 408 ")
            s.close()


def test_an_answer_before_the_body_was_read_closes_the_connection(model):
    """A 401 sent without reading the body says ``Connection: close`` and closes: the unread body (the
    client still trickling it) keeps no slot; a request that was read whole keeps its connection."""
    srv = make_server(LLM(model, max_num_seqs=2), None, model_name="micro", api_key="secret")
    with ServerThread(srv, body_timeout=30.0) as url:
        sock = _open(url)
        t0 = time.monotonic()
        _stall(sock, "Authorization: Bearer wrong\r\n")
        answer = _read_all(sock)  # returns once the server closed: not after the 30 s body timeout
        sock.close()
        assert answer.startswith(b"HTTP/1.1 401 ") and b"connection: close" in answer.lower(), answer
        assert time.monotonic() - t0 < 10
        parts = urllib.parse.urlsplit(url)
        keep = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT)
        for _ in range(2):  # a request read whole: the same connection answers the next
            keep.request("POST", "/tokenize", json.dumps({"prompt": "a"}),
                         {"Content-Type": "application/json", "Authorization": "Bearer secret"})
            r = keep.getresponse()
            assert r.status == 200 and r.getheader("connection") is None
            r.read()
        keep.close()
