"""The engine in a process of its own (``kda_ref.server.engine_core`` / ``core_client``), as ``kda-ref serve``
runs it by default: the same answers as the engine in the server's process, token for token, whole and
streamed; refusals named as in-process (a 400 from the engine's own check, a 503 past ``max_waiting``);
a client that leaves frees its request there; ``/metrics``, ``/kda/trace`` and ``/tokenize`` read through
the pipe; an engine process that dies ends every open stream with an error and turns ``/health`` to 503;
a model that cannot be built is refused before anything listens; nothing is left running after a stop.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from kda_ref import LLM, ModelConfig, SamplingParams  # noqa: E402
from kda_ref.server.engine_core import CoreSpec  # noqa: E402
from kda_ref.server.serve import ServerThread, make_process_server  # noqa: E402
from test_server_liveness import stream_lines  # noqa: E402

TIMEOUT = 60
ENGINE = {"max_num_seqs": 4}
PROMPTS = ["hello world", "the KDA state is a matrix", "中文 prompt"]


def _spec(**kw) -> CoreSpec:
    base = dict(model="random-micro", engine=dict(ENGINE), threads=1, max_waiting=8, model_name="micro",
                trace_steps=32)
    return CoreSpec(**{**base, **kw})


@pytest.fixture(scope="module")
def served():
    srv = make_process_server(_spec())
    with ServerThread(srv) as url:
        yield srv, url
    assert not srv.loop.process.is_alive() and srv.loop.process.exitcode == 0  # stopped, and exited cleanly


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def _answer(req):
    """(status, parsed JSON body) of a request; an error status is an answer too."""
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _post(url: str, path: str, body: dict):
    return _answer(urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                          headers={"Content-Type": "application/json"}))


def test_the_engine_process_answers_as_the_engine_in_this_process(client):
    """Greedy answers against offline ``generate`` of the same engine (the micro model the CLI builds):
    whole and streamed, token ids and text, and the usage."""
    want = LLM(ModelConfig.micro(), **ENGINE).generate(PROMPTS, SamplingParams(max_tokens=8, ignore_eos=True))
    for prompt, out in zip(PROMPTS, want):
        got = client.completions.create(model="micro", prompt=prompt, max_tokens=8, temperature=0,
                                        extra_body={"ignore_eos": True, "return_token_ids": True})
        assert got.choices[0].token_ids == out.token_ids and got.choices[0].text == out.text
        assert got.usage.prompt_tokens == len(out.prompt_token_ids) and got.usage.completion_tokens == 8
        chunks = client.completions.create(model="micro", prompt=prompt, max_tokens=8, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        assert "".join(c.choices[0].text for c in chunks) == out.text


def test_refusals_cross_the_pipe_named_as_in_process(served):
    """A request over the engine's memory budget is refused by the engine process's own check (400 naming
    the prompt); past ``max_waiting`` prompts in one request, a 400 before anything is queued."""
    srv, url = served
    status, body = _post(url, "/v1/completions", {"prompt": list(range(1, 40)), "max_tokens": 5, "n": 9})
    assert status == 400 and "max-waiting" in body["error"]["message"]
    status, body = _post(url, "/v1/completions", {"prompt": [999_999], "max_tokens": 5})
    assert status == 400 and body["error"]["param"] == "prompt", body
    assert srv.loop.alive  # a refusal leaves the engine serving


def test_a_stream_left_mid_way_is_cancelled_in_the_engine_process(served):
    srv, url = served
    req = urllib.request.Request(url + "/v1/completions", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"prompt": "leave", "max_tokens": 4000, "stream": True,
                                                  "ignore_eos": True}).encode())
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        r.readline()  # the first chunk arrived: the request runs there
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        metrics = urllib.request.urlopen(url + "/metrics", timeout=TIMEOUT).read().decode()
        if "kda_num_requests_running 0.0" in metrics and 'finished_reason="abort"' in metrics:
            return
        time.sleep(0.05)
    pytest.fail("the engine process still runs a request whose client left")


def test_a_request_cancelled_as_it_was_sent_is_answered_and_counted(served):
    """A client that cancels at once (an HTTP client that left, the other prompts of a refused batch) sends its
    cancel right behind its request, and the engine process reads both in one batch. It took that for the
    frozen-engine case (the server already gave up on the request) and answered nothing: the stream never
    ended here and was never counted there. Now it is queued cancelled: answered unrun, counted an abort."""
    srv, url = served
    client = srv.loop
    aborts = lambda: _abort_count(urllib.request.urlopen(url + "/metrics", timeout=TIMEOUT).read().decode())  # noqa: E731
    before = aborts()
    streams = []
    for _ in range(6):
        s = client.submit("leave at once", SamplingParams(max_tokens=50, ignore_eos=True))
        s.cancel()
        streams.append(s)
    for s in streams:
        kind, value = s.get(timeout=TIMEOUT)
        while kind == "tokens":
            kind, value = s.get(timeout=TIMEOUT)
        assert kind == "error" and value.startswith("cancelled"), (kind, value)
    assert client.live_count() == 0
    deadline = time.monotonic() + TIMEOUT
    while aborts() < before + len(streams) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert aborts() == before + len(streams)


def test_leaving_the_server_block_ends_an_engine_process_whose_loop_had_ended():
    """``ServerThread`` stopped the engine only while its loop ran; with the engine in a process of its own,
    a loop that had ended (died, or stopped there) left that process running after the block."""
    srv = make_process_server(_spec())
    with ServerThread(srv):
        srv.loop.call("stop", False, TIMEOUT)  # the loop there ends; the process waits on its pipe
        deadline = time.monotonic() + TIMEOUT
        while srv.loop.alive and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not srv.loop.alive and srv.loop.process.is_alive()
    assert not srv.loop.process.is_alive()


def _abort_count(metrics: str) -> float:
    line = [x for x in metrics.splitlines() if x.startswith('kda_request_success_total{finished_reason="abort"}')]
    return float(line[0].split()[-1]) if line else 0.0


def test_metrics_trace_and_tokenize_are_read_through_the_pipe(served):
    srv, url = served
    status, tok = _post(url, "/tokenize", {"prompt": "hi"})
    assert status == 200 and tok["tokens"][1:] == [104, 105]
    first = json.loads(urllib.request.urlopen(url + "/kda/trace?since=-1", timeout=TIMEOUT).read())
    _post(url, "/v1/completions", {"prompt": "traced", "max_tokens": 3})
    doc = json.loads(urllib.request.urlopen(url + "/kda/trace?since=-1", timeout=TIMEOUT).read())
    assert doc["max_steps"] == 32 and doc["records"], (first, doc)
    kinds = {e["kind"] for r in doc["records"] for e in r["events"]}
    assert "request_arrived" in kinds
    metrics = urllib.request.urlopen(url + "/metrics", timeout=TIMEOUT).read().decode()
    assert 'kda_request_success_total{finished_reason="length"}' in metrics


def test_a_dead_engine_process_ends_every_open_stream_and_health():
    srv = make_process_server(_spec(trace_steps=0))
    with ServerThread(srv) as url:
        got, started = [], threading.Event()
        whole = {}
        th = threading.Thread(target=stream_lines, args=(url, got, started))
        th2 = threading.Thread(target=lambda: whole.update(answer=_post(url, "/v1/completions", {
            "prompt": "y", "max_tokens": 4000, "ignore_eos": True})))
        th.start()
        assert started.wait(TIMEOUT)
        th2.start()
        deadline = time.monotonic() + TIMEOUT
        while srv.loop.live_count() < 2:  # both requests are in the engine process
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(srv.loop.process.pid, signal.SIGKILL)
        th.join(TIMEOUT)
        th2.join(TIMEOUT)
        assert not th.is_alive() and not th2.is_alive()
        status, body = whole["answer"]  # a request answered whole: 503 saying the engine process exited
        assert status == 503 and body["error"] == {"message": "the engine process exited (exit code -9)",
                                                   "type": "server_error", "param": None, "code": "engine_dead"}
        errors = [json.loads(line[6:]) for line in got if line.startswith("data: {") and '"error"' in line]
        assert errors and errors[-1]["error"]["message"] == "the engine process exited (exit code -9)", got[-3:]
        assert errors[-1]["error"]["code"] == "engine_dead"
        assert got[-1] == "data: [DONE]"
        status, body = _get(url + "/health")
        assert status == 503 and "exit code -9" in body["error"]["message"]
        with urllib.request.urlopen(url + "/metrics", timeout=TIMEOUT) as r:  # answered from the HTTP side
            text = r.read().decode()
        assert "kda_engine_up 0" in text and "the engine process does not answer" in text
        status, body = _post(url, "/v1/completions", {"prompt": "after", "max_tokens": 2})
        assert status == 503 and body["error"]["code"] == "engine_dead", body
        assert body["error"]["message"] == "the engine process exited (exit code -9)"
    assert not srv.loop.process.is_alive()


def _get(url: str):
    return _answer(url)


def test_a_model_that_cannot_be_built_is_refused_and_leaves_no_process(tmp_path):
    before = set(multiprocessing.active_children())
    with pytest.raises((ValueError, OSError)) as info:
        make_process_server(_spec(model=str(tmp_path / "missing")))
    assert "missing" in str(info.value)
    assert not [p for p in set(multiprocessing.active_children()) - before if p.name == "kda-engine-core"]


def test_an_engine_that_starts_processes_of_its_own_runs_behind_the_pipe():
    """A context-parallel engine starts its ranks from the engine process (which is therefore no daemon):
    a long prompt is prefilled by two gloo ranks there, with the tokens of a one-process engine."""
    prompt = list(range(1, 200))
    want = LLM(ModelConfig.micro(), **ENGINE).generate([prompt], SamplingParams(max_tokens=4, ignore_eos=True))[0]
    srv = make_process_server(_spec(engine={**ENGINE, "context_parallel_size": 2, "cp_min_tokens": 64,
                                            "cp_backend": "gloo"}, trace_steps=0))
    with ServerThread(srv) as url:
        status, body = _post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 4, "ignore_eos": True,
                                                      "temperature": 0, "return_token_ids": True})
    assert status == 200, body
    assert body["choices"][0]["token_ids"] == want.token_ids
    assert not srv.loop.process.is_alive()


def test_admission_past_max_waiting_is_the_loops_overloaded_raised_here():
    """The engine process's admission bound refuses as in-process: ``Overloaded`` (the class itself, raised
    in this process), and a request that could run is never lost meanwhile."""
    from kda_ref.server.core_client import EngineCoreClient
    from kda_ref.server.loop import Overloaded

    client = EngineCoreClient(_spec(engine={"max_num_seqs": 1}, max_waiting=1, trace_steps=0))
    try:
        params = SamplingParams(max_tokens=64, ignore_eos=True)
        streams, refused = [], 0
        for i in range(4):
            try:
                streams.append(client.submit([1 + i] * 8, params))
            except Overloaded as e:
                refused += 1
                assert "max_waiting" in str(e)
        assert refused >= 2 and streams  # one runs, at most one waits, the rest are refused
        outs = [[v for k, v in s if k == "done"] for s in streams]
        assert all(len(o) == 1 and len(o[0].token_ids) == 64 for o in outs)
    finally:
        client.stop()
    assert not client.process.is_alive() and client.process.exitcode == 0


def test_a_tokenizer_that_cannot_cross_the_pipe_is_named_not_lost():
    """What the engine process tells the server's process of its tokenizer: itself when it pickles, else
    ``None`` with a note naming why (the server then answers /tokenize with that note)."""
    import threading as th

    from kda_ref.tokenizer import ByteTokenizer
    from kda_ref.utils.procs import sendable_tokenizer

    tok = ByteTokenizer()
    assert sendable_tokenizer(tok, None, "the engine's") == (tok, None)

    class Locked(ByteTokenizer):
        def __init__(self):
            super().__init__()
            self.lock = th.Lock()  # a lock does not pickle

    none, note = sendable_tokenizer(Locked(), None, "the engine's", "; pass token ids")
    assert none is None and note.startswith("the engine's Locked cannot be sent") and note.endswith("; pass token ids")
