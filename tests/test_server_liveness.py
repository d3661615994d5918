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
        if e.code == 503:  # refused for want of a connection slot, or the engine: either in OpenAI's error object
            assert set(json.loads(e.read())["error"]) == {"message", "type", "param", "code"}
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
        err = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]  # OpenAI's error object, as every other error
        assert set(err) == {"message", "type", "param", "code"} and err["code"] == "request_timeout"
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


def _metric(text: str, name: str) -> float:
    """The sum of a metric's samples in Prometheus text (0 when absent)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and line[len(name)] in " {")


def _scrape(url: str) -> tuple[str, float]:
    t0 = time.monotonic()
    with urllib.request.urlopen(url + "/metrics", timeout=TIMEOUT) as r:
        return r.read().decode(), time.monotonic() - t0


def _wait_for(what: str, ok, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _answer(url: str, body: dict, out: dict, key: str) -> None:
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            out[key] = (r.status, dict(r.headers), r.read().decode())
    except urllib.error.HTTPError as e:
        out[key] = (e.code, dict(e.headers), e.read().decode())


def stream_lines(url: str, got: list, started: threading.Event) -> None:
    """A long streamed completion's non-empty lines into ``got`` until the stream ends (``started`` set at
    the first); ``tests/test_engine_process.py`` reads one through an engine that dies."""
    req = urllib.request.Request(url + "/v1/completions", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"prompt": "frozen", "max_tokens": 4000, "stream": True,
                                                  "ignore_eos": True}).encode())
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        for raw in r:
            started.set()
            if raw.strip():
                got.append(raw.decode().strip())


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="stops a process with SIGSTOP")
def test_a_frozen_engine_process_is_noticed_and_what_was_given_up_never_runs():
    from kda_ref.server.engine_core import CoreSpec
    from kda_ref.server.serve import make_process_server

    ghost = list(range(1, 124))  # a request sent while the engine is frozen: 123 prompt tokens (+ none: ids)
    srv = make_process_server(CoreSpec("random-micro", {"max_num_seqs": 4}, 1, 8, "micro", heartbeat_timeout=2.0))
    with ServerThread(srv) as url:
        got, started, out = [], threading.Event(), {}
        reader = threading.Thread(target=stream_lines, args=(url, got, started))
        reader.start()
        assert started.wait(TIMEOUT)
        before, _ = _scrape(url)
        os.kill(srv.loop.process.pid, signal.SIGSTOP)
        try:
            sent = threading.Thread(target=_answer, args=(url, {"prompt": ghost, "max_tokens": 4}, out, "ghost"))
            sent.start()  # its submission waits in the pipe: the engine reads nothing now
            reader.join(15)
            assert not reader.is_alive(), "the open stream froze with its engine"
            err = json.loads(next(line for line in reversed(got) if line.startswith('data: {"error"'))[6:])["error"]
            assert err["code"] == "engine_unresponsive" and "has not answered for" in err["message"]
            assert got[-1] == "data: [DONE]"
            sent.join(15)
            status, headers, body = out["ghost"]
            assert status == 503 and json.loads(body)["error"]["code"] == "engine_unresponsive"
            t0 = time.monotonic()
            status, _, body = _post_status(url, {"prompt": "new", "max_tokens": 2})
            assert status == 503 and time.monotonic() - t0 < 5.0, body  # at once, not after a call's 60 s
            assert json.loads(body)["error"]["code"] == "engine_unresponsive"
            assert _health(url) == 503
            text, took = _scrape(url)  # answered from the HTTP side, promptly
            assert took < 5.0 and "kda_engine_up 0" in text and "the engine process does not answer" in text
            assert _metric(text, "kda_prompt_tokens_total") == _metric(before, "kda_prompt_tokens_total")
        finally:
            os.kill(srv.loop.process.pid, signal.SIGCONT)
        _wait_for("the engine answers again", lambda: _health(url) == 200)
        _wait_for("the frozen stream is cancelled there",
                  lambda: _metric(_scrape(url)[0], "kda_num_requests_running") == 0)
        text, _ = _scrape(url)
        assert "kda_engine_up 1" in text
        assert _metric(text, "kda_prompt_tokens_total") == _metric(before, "kda_prompt_tokens_total"), text  # unqueued
        # both aborts: the frozen stream, cancelled there, and the submission given up on, answered unrun
        assert 'kda_request_success_total{finished_reason="abort"} 2.0' in text, text
        assert _metric(text, "kda_request_success_total") == _metric(before, "kda_request_success_total") + 2
        status, _, body = _post_status(url, {"prompt": "after", "max_tokens": 3})
        assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 3, body  # serving resumed
    assert not srv.loop.process.is_alive()


def _post_status(url: str, body: dict):
    out: dict = {}
    _answer(url, body, out, "x")
    return out["x"]


def test_one_freeze_is_one_stall_whichever_thread_wakes_first(monkeypatch):
    """After a freeze the loop may look before the heartbeat thread beats again: that beat's gap, from the
    last beat before the freeze, must not be counted a second time (a second stall would cancel requests
    admitted after the first, which the server never gave up on)."""
    from kda_ref.server import heartbeat as hb_mod

    now = [100.0]
    monkeypatch.setattr(hb_mod.time, "monotonic", lambda: now[0])
    hb = hb_mod.Heartbeat(lambda: None, 2.0)
    hb.beat()
    now[0] = 110.0  # frozen for 10 s
    assert hb.stalled() == pytest.approx(10.0)  # the loop looks first
    now[0] = 110.1
    hb.beat()  # then the heartbeat thread's first beat after the freeze
    now[0] = 110.15
    assert hb.stalled() is None
    now[0] = 120.0  # a second freeze is a second stall
    assert hb.stalled() == pytest.approx(9.9)  # from the beat after the first


def test_the_stall_guard_cancels_what_the_engine_holds_before_another_step(model):
    """The engine process's side of the heartbeat, in one process: while beats come, nothing is touched;
    once they stop for the stall threshold (the process was frozen), the loop cancels every request it holds
    at the top of its next turn, before another step -- the server has told their clients they failed."""
    from kda_ref import SamplingParams
    from kda_ref.server.heartbeat import Heartbeat, StallGuard, stall_threshold
    from kda_ref.server.loop import EngineLoop

    beats, streams = [], []
    llm = LLM(model, max_num_seqs=2)
    # 2 s: a threshold of 1.5 s that a busy 2-core machine's scheduling never reaches between hand beats
    hb = Heartbeat(lambda: beats.append(time.monotonic()), timeout=2.0)
    guard = StallGuard(hb, lambda: list(streams))
    loop = EngineLoop(llm, observers=[guard]).start()
    try:
        stream = loop.submit("held", SamplingParams(max_tokens=8000, ignore_eos=True))
        streams.append(stream)
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:  # beating: the request runs on
            hb.beat()
            time.sleep(0.05)
        assert not guard.stalls and not stream.cancelled.is_set()
        t0 = time.monotonic()  # no more beats: the guard finds the gap
        events = []
        while not events or events[-1][0] == "tokens":
            events.append(stream.get(timeout=TIMEOUT))
        assert time.monotonic() - t0 >= stall_threshold(2.0) - 0.1
        assert events[-1] == ("error", "cancelled") and stream.cancel_reason == "abort"
        assert guard.stalls and guard.stalls[0] >= stall_threshold(2.0)
        assert beats  # each beat was sent
    finally:
        loop.stop(drain=False)
    assert guard in loop.observers  # it answered every hook of the loop (a failing observer is detached)


def test_a_submission_the_server_gave_up_on_while_frozen_is_answered_unqueued():
    """The engine process reads every message already queued before acting: a submission whose cancel
    waits behind it in the pipe (sent while the process was frozen) never reaches the engine, is answered
    (the server's side has no stream left for it and drops the answer) and counted as taken (the server's
    admission count stays right); one without is queued as usual. Driven over a real pipe, the engine
    process's side run in this one."""
    import multiprocessing as mp

    from kda_ref import SamplingParams
    from kda_ref.server.engine_core import CLOSE, NOTE, OUTPUTS, CoreSpec, EngineCore

    ours, theirs = mp.Pipe(duplex=True)
    core = EngineCore(theirs, CoreSpec("random-micro", {"max_num_seqs": 2}, 1, 8, "micro"))
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    ours.send((NOTE, "submit", (7, [5, 6, 7], None, params, False)))  # given up while "frozen": its cancel follows
    ours.send((NOTE, "cancel", (7, "abort")))
    ours.send((NOTE, "submit", (8, [5, 6, 7], None, params, False)))
    server = threading.Thread(target=core.serve)
    server.start()
    try:
        events, taken = [], 0
        deadline = time.monotonic() + TIMEOUT
        while not (taken == 2 and any(e[1] == "done" for e in events)) and time.monotonic() < deadline:
            if not ours.poll(0.1):
                continue
            kind, *rest = ours.recv()
            if kind == OUTPUTS:
                events += rest[0]
                taken = rest[1]
        assert taken == 2 and sorted((k, kind) for k, kind, _ in events) == [(7, "error"), (8, "done")], events
        done = next(value for k, kind, value in events if k == 8)
        assert done.token_ids and done.prompt_token_ids == [5, 6, 7]
        assert next(value for k, kind, value in events if k == 7) == "cancelled before it started"
        assert core.loop.llm.stats()["prompt_tokens"] == 3  # the given-up request was never queued
    finally:
        ours.send((CLOSE,))
        server.join(TIMEOUT)
    assert not server.is_alive()
