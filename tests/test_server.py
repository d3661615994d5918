"""The OpenAI-compatible server (``kda_ref.server``), driven by the real ``openai`` client and raw HTTP.

One server per module on the micro model (a background thread: uvicorn and the engine loop), greedy
answers compared with offline ``LLM.generate`` token for token (``return_token_ids``); 32 streaming
clients with a quarter leaving mid-stream; admission past ``max_waiting`` (503 + Retry-After, nothing
accepted lost); every bad request's 400 naming its field; the API key; ``/metrics`` against what the
clients got; the live trace's ring. SIGTERM against ``kda-ref serve`` in a child process is in
``tests/test_serve_cli.py``.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from kda_ref import LLM, ModelConfig, SamplingParams  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.chat import ByteChatTemplate  # noqa: E402
from kda_ref.server.live import LiveTrace  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402

PROMPTS = ["hello world", "the KDA state is a matrix", "ab" * 20, "中文 prompt", "x"]
MAX_TOKENS = 10
TIMEOUT = 60


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


def offline(model, prompts, max_tokens=MAX_TOKENS, stop=(), **kw):
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, stop=stop)
    return LLM(model, **kw).generate(prompts, params)


@pytest.fixture(scope="module")
def served(model):
    """(server, url): no prefix cache (so a drained pool is empty), a live trace of 32 steps."""
    live = LiveTrace(32)
    srv = make_server(LLM(model, tracer=live, max_num_seqs=8), live, model_name="micro", max_waiting=48)
    with ServerThread(srv) as url:
        yield srv, url


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def post(url: str, body, headers: dict | None = None, raw: bytes | None = None):
    """(status, headers, parsed JSON body) of a POST; errors are answers too."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read())


def _declared_body_status(url: str, declared: int) -> int:
    """The status line's code for a POST that declares a ``declared``-byte body and sends only its start
    (the server answers without reading the rest; a client sending it all would race the closed socket)."""
    import socket
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT) as sock:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {declared}\r\n\r\n{{\"prompt\": \"".encode())
        return int(sock.recv(64).split()[1])


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_idle(srv, timeout=TIMEOUT) -> dict:
    """The metrics snapshot once nothing runs or waits (every request ended, cancelled ones included)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = srv.metrics.snapshot or {"running": 0, "waiting": 0, "pool_used_bytes": {}}  # no step yet
        if snap["running"] == 0 and snap["waiting"] == 0 and not srv.loop.live_count() and not srv.loop.waiting:
            return snap
        time.sleep(0.05)
    raise AssertionError(f"the server did not go idle: {srv.metrics.snapshot}")


GREEDY = {"max_tokens": MAX_TOKENS, "temperature": 0,
          "extra_body": {"ignore_eos": True, "return_token_ids": True}}


def test_completions_equal_offline_generate(model, client):
    want = offline(model, PROMPTS)
    for p, w in zip(PROMPTS, want):
        r = client.completions.create(model="micro", prompt=p, **GREEDY)
        c = r.choices[0]
        assert c.token_ids == w.token_ids and c.text == w.text
        assert c.prompt_token_ids == w.prompt_token_ids and c.finish_reason == "length"
        assert r.usage.prompt_tokens == len(w.prompt_token_ids) and r.usage.completion_tokens == MAX_TOKENS
    batch = client.completions.create(model="micro", prompt=PROMPTS[:3], **GREEDY)  # OpenAI's list of prompts
    assert [c.token_ids for c in sorted(batch.choices, key=lambda c: c.index)] == [w.token_ids for w in want[:3]]


def test_streamed_completion_equals_offline_and_ends_with_usage(model, client):
    want = offline(model, [PROMPTS[3]])[0]  # multi-byte characters: deltas hold back unfinished UTF-8
    chunks = list(client.completions.create(model="micro", prompt=PROMPTS[3], stream=True,
                                            stream_options={"include_usage": True}, **GREEDY))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want.text
    last_choice = [c for c in chunks if c.choices][-1].choices[0]
    assert last_choice.finish_reason == "length" and last_choice.token_ids == want.token_ids
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == MAX_TOKENS


def test_chat_uses_the_documented_template(model, client):
    msgs = [{"role": "system", "content": "terse"}, {"role": "user", "content": "hi"}]
    text = ByteChatTemplate().render(msgs)
    assert text == "<|im_start|>system\nterse<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    want = offline(model, [text])[0]
    r = client.chat.completions.create(model="micro", messages=msgs, **GREEDY)
    assert r.choices[0].message.content == want.text and r.choices[0].message.role == "assistant"
    parts = list(client.chat.completions.create(model="micro", messages=msgs, stream=True, **GREEDY))
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts) == want.text


def test_a_reply_sent_back_as_history_continues_the_conversation(model, client):
    """The openai client's ``message.model_dump()`` of a reply (``tool_calls``, ``refusal``, ``audio``, ...
    as nulls) is history the server reads as the bare assistant message; a key that holds something it
    would drop (a tool call) is refused by name."""
    msgs = [{"role": "user", "content": "hi"}]
    reply = client.chat.completions.create(model="micro", messages=msgs, **GREEDY).choices[0].message
    dumped = reply.model_dump()
    assert {"tool_calls", "refusal"} <= set(dumped)  # what the client puts there
    history = msgs + [dumped, {"role": "user", "content": "more"}]
    bare = msgs + [{"role": "assistant", "content": reply.content}, {"role": "user", "content": "more"}]
    want = offline(model, [ByteChatTemplate().render(bare)])[0]
    assert client.chat.completions.create(model="micro", messages=history, **GREEDY).choices[0].message.content \
        == want.text
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="micro", messages=msgs + [
            {"role": "assistant", "content": "x", "tool_calls": [{"id": "1", "type": "function"}]}], **GREEDY)
    assert e.value.body["param"] == "messages[1].tool_calls"


def test_a_chat_without_max_tokens_may_fill_the_context_as_vllms(model):
    """Chat's ``max_tokens`` defaults to the rest of the context (vLLM's ``get_max_tokens``), completions' to
    16; with a memory budget too small for the whole context, to the most its peak fits in."""
    from kda_ref.engine.request_check import RequestChecker
    from kda_ref.server.protocol import parse_chat, parse_completion

    assert parse_chat({"messages": [{"role": "user", "content": "hi"}]}).sampling.max_tokens is None
    assert parse_completion({"prompt": "hi"}).sampling.max_tokens == 16
    llm = LLM(model, max_model_len=80)
    with ServerThread(make_server(llm, None, model_name="micro")) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
        r = c.chat.completions.create(model="micro", messages=[{"role": "user", "content": "hi"}], temperature=0,
                                      extra_body={"ignore_eos": True})
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens + r.usage.completion_tokens == 80
        with pytest.raises(openai.BadRequestError) as e:  # a prompt that leaves no room: named as messages
            c.chat.completions.create(model="micro", messages=[{"role": "user", "content": "x" * 60}])
        assert e.value.body["param"] == "messages" and e.value.body["message"].startswith("messages:")
    demand = LLM(model, max_model_len=4096).checker.demand  # a request's peak bytes by its length
    checker = RequestChecker(model.config, 4096, demand=demand, budget_bytes=demand(1000).bytes + 1)
    m = checker.longest_output(100)
    assert demand(100 + m).bytes <= checker.budget_bytes < demand(101 + m).bytes and 800 <= m < 3996


def test_a_stop_token_ends_the_ids_and_is_left_out_of_the_text(model, client):
    """vLLM's ``stop_token_ids``: the token that stops the request is its last id and is not in its text."""
    full = offline(model, ["stop here"], max_tokens=8)[0]
    stop = full.token_ids[3]
    r = client.completions.create(model="micro", prompt="stop here", max_tokens=8, temperature=0, extra_body={
        "stop_token_ids": [stop], "ignore_eos": True, "return_token_ids": True})
    c = r.choices[0]
    upto = full.token_ids.index(stop) + 1
    assert c.finish_reason == "stop" and c.token_ids == full.token_ids[:upto]
    shorter = offline(model, ["stop here"], max_tokens=upto - 1)[0]  # the same tokens less the stop token
    assert c.text == shorter.text and shorter.token_ids == full.token_ids[:upto - 1]


def test_stop_string_cuts_the_text_and_frees_the_request(model, served, client):
    srv, _ = served
    full = offline(model, ["ab" * 20], max_tokens=24)[0].text
    stop = next(full[i:i + 2] for i in range(3, len(full) - 2) if "\ufffd" not in full[i:i + 2])
    before = get(served[1] + "/metrics")[1]
    r = client.completions.create(model="micro", prompt="ab" * 20, max_tokens=24, temperature=0, stop=[stop],
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text == full[:full.index(stop)] and r.choices[0].finish_reason == "stop"
    assert sum(wait_idle(srv)["pool_used_bytes"].values()) == 0
    after = get(served[1] + "/metrics")[1]
    stopped = 'kda_request_success_total{finished_reason="stop"}'
    assert _metric(after, stopped) - _metric(before, stopped, 0.0) == 1
    # the engine ends it at the token that completes the stop string (SamplingParams.stop), as offline:
    # not one step more, and not on to max_tokens
    want = offline(model, ["ab" * 20], max_tokens=24, stop=[stop])[0]
    assert want.finish_reason == "stop" and want.text == r.choices[0].text
    assert _metric(after, "kda_generation_tokens_total") - _metric(before, "kda_generation_tokens_total") == \
        len(want.token_ids) < 24


def test_32_streaming_clients_a_quarter_leave_midway(model, served):
    srv, url = served
    prompts = [f"client {i} says " + "la" * (i % 7) for i in range(32)]
    want = {i: o.token_ids for i, o in enumerate(offline(model, prompts, max_tokens=16))}
    got, errors = {}, []
    aborted = _metric(get(url + "/metrics")[1], 'kda_request_success_total{finished_reason="abort"}', 0.0)

    def run(i):
        try:
            c = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=TIMEOUT)
            leaves = i % 4 == 0  # asks for far more than it reads: only an abort ends it soon
            stream = c.completions.create(model="micro", prompt=prompts[i], stream=True,
                                          max_tokens=2000 if leaves else 16,
                                          temperature=0, extra_body={"ignore_eos": True, "return_token_ids": True})
            for n, chunk in enumerate(stream):
                if leaves and n == 1:
                    stream.close()  # the client goes away mid-stream
                    return
                if chunk.choices and chunk.choices[0].finish_reason:
                    got[i] = chunk.choices[0].token_ids
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not errors
    assert {i: got[i] for i in sorted(got)} == {i: want[i] for i in range(32) if i % 4}
    snap = wait_idle(srv, timeout=20)  # the leavers' 2,000 tokens would take far longer than this
    assert sum(snap["pool_used_bytes"].values()) == 0  # their slots and pages came back
    assert _metric(get(url + "/metrics")[1], 'kda_request_success_total{finished_reason="abort"}') - aborted == 8


@pytest.mark.parametrize("body,param", [
    ({"model": "micro", "prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"model": "micro", "prompt": "hi", "max_tokens": "5"}, "max_tokens"),
    ({"model": "micro", "prompt": "hi", "temperature": 3}, "temperature"),
    ({"model": "micro", "prompt": "hi", "top_p": 1.5}, "top_p"),
    ({"model": "micro", "prompt": "hi", "n": 0}, "n"),
    ({"model": "micro", "prompt": "hi", "stop": [1]}, "stop"),
    ({"model": "micro", "prompt": "hi", "frobnicate": 1}, "frobnicate"),
    ({"model": "micro", "prompt": ""}, "prompt"),
    ({"model": "micro", "prompt": [5, -1]}, "prompt[1]"),  # the element at fault
    ({"model": "micro", "prompt": ["a", [5]]}, "prompt[1]"),  # one kind of prompt throughout, as vLLM
    ({"model": "micro", "prompt": [5, 600]}, "prompt"),  # past the micro model's vocabulary
    ({"model": "micro"}, "prompt"),
    ({"model": "micro", "prompt": "hi", "stream_options": {"include_usage": True}}, "stream_options"),
])
def test_bad_completion_requests_get_a_400_naming_the_field(served, body, param):
    status, _, err = post(served[1] + "/v1/completions", body)
    assert status == 400 and err["error"]["param"] == param and err["error"]["type"] == "invalid_request_error"


def test_bad_bodies_and_lengths(served):
    srv, url = served
    status, _, err = post(url + "/v1/completions", None, raw=b"{not json")
    assert status == 400 and "JSON" in err["error"]["message"]
    status, _, err = post(url + "/v1/completions", [1, 2])
    assert status == 400 and "object" in err["error"]["message"]
    status, _, err = post(url + "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]})
    assert status == 400 and err["error"]["param"] == "messages[0]"
    limit = srv.loop.llm.max_model_len
    status, _, err = post(url + "/v1/completions", {"prompt": "y" * (limit + 1), "max_tokens": 1})
    assert status == 400 and err["error"]["param"] == "prompt" and "at least" in err["error"]["message"]
    status, _, err = post(url + "/v1/completions", {"prompt": list(range(10)) * (limit // 10), "max_tokens": 20})
    assert status == 400 and err["error"]["param"] == "prompt"
    assert _declared_body_status(url, srv.max_body_bytes + 1) == 413  # refused by its Content-Length, unread
    status, _, err = post(url + "/v1/completions", {"model": "gpt-4", "prompt": "hi"})
    assert status == 404 and err["error"]["code"] == "model_not_found"
    assert sum(wait_idle(srv)["pool_used_bytes"].values()) == 0  # nothing of them reached the engine


def test_models_health_and_metrics_agree_with_the_clients(served, client):
    srv, url = served
    assert [m.id for m in client.models.list().data] == ["micro"]
    assert get(url + "/health")[0] == 200
    before = _metric(get(url + "/metrics")[1], "kda_generation_tokens_total")
    ok_before = _metric(get(url + "/metrics")[1], 'kda_request_success_total{finished_reason="length"}', 0.0)
    r = client.completions.create(model="micro", prompt="count me", max_tokens=7, temperature=0,
                                  extra_body={"ignore_eos": True})
    wait_idle(srv)
    text = get(url + "/metrics")[1]
    assert _metric(text, "kda_generation_tokens_total") - before == r.usage.completion_tokens == 7
    assert _metric(text, 'kda_request_success_total{finished_reason="length"}') - ok_before == 1
    assert _metric(text, "kda_time_to_first_token_seconds_count") >= 1


def test_every_served_name_is_accepted_and_answers_carry_the_first(model):
    """``--served-model-name a b``: /v1/models lists both, a request may name either (or none), an answer says
    the first, another name is a 404 that lists them, /tokenize included (vLLM's ``served_model_name``)."""
    with ServerThread(make_server(LLM(model, max_num_seqs=2), None, model_name="micro",
                                  model_aliases=("tiny-alias",))) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
        assert [m.id for m in c.models.list().data] == ["micro", "tiny-alias"]
        r = c.completions.create(model="tiny-alias", prompt="hi", max_tokens=2, temperature=0)
        assert r.model == "micro" and r.usage.completion_tokens == 2
        status, _, err = post(url + "/v1/completions", {"model": "gpt-4", "prompt": "hi"})
        assert status == 404 and "'micro' / 'tiny-alias'" in err["error"]["message"]
        assert post(url + "/tokenize", {"model": "tiny-alias", "prompt": "hi"})[0] == 200


def test_metrics_show_the_pool_before_the_first_request(model):
    """A fresh server's /metrics has the pool's budget and every page kind's bytes in use (0) before any
    request has run a step: the loop lets its observers look once when it starts."""
    llm = LLM(model, max_num_seqs=2)
    with ServerThread(make_server(llm, None, model_name="micro")) as url:
        deadline = time.monotonic() + TIMEOUT
        while (text := get(url + "/metrics")[1]) and _metric(text, "kda_pool_budget_bytes") == 0:
            assert time.monotonic() < deadline, "the pool's budget never reached /metrics"
            time.sleep(0.02)
        assert _metric(text, "kda_pool_budget_bytes") == llm.stats()["budget_bytes"] > 0
        kinds = [ln for ln in text.decode().splitlines() if ln.startswith("kda_pool_used_bytes{")]
        assert kinds and all(float(ln.split()[-1]) == 0 for ln in kinds)
        assert _metric(text, "kda_engine_steps_total") == 0


def _metric(text: bytes, name: str, default: float | None = None) -> float:
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    if default is not None:
        return default
    raise AssertionError(f"{name} not in /metrics")


def test_live_trace_serves_steps_incrementally(served, client):
    srv, url = served
    assert get(url + "/kda/trace?since=-1")[0] == 200  # a reader attaches: the ring records from now on
    client.completions.create(model="micro", prompt="trace me", max_tokens=5, temperature=0)
    wait_idle(srv)
    status, body = get(url + "/kda/trace?since=-1")
    doc = json.loads(body)
    steps = [r["step"] for r in doc["records"]]
    assert status == 200 and steps == sorted(steps) and len(steps) <= 32 == doc["max_steps"]
    assert doc["header"]["mla_layers"] and steps[-1] == doc["last_step"]
    assert any(e["kind"] == "batch_composition" for r in doc["records"] for e in r["events"])
    assert json.loads(get(url + f"/kda/trace?since={steps[-1]}")[1])["records"] == []
    assert get(url + "/kda/trace?since=abc")[0] == 400


def test_overload_gives_503_with_retry_after_and_loses_nothing(model):
    live = None
    srv = make_server(LLM(model, max_num_seqs=1), live, model_name="micro", max_waiting=2)
    want = offline(model, ["overload"], max_tokens=12)[0].token_ids
    results = []
    with ServerThread(srv) as url:
        def run():
            results.append(post(url + "/v1/completions", {"prompt": "overload", "max_tokens": 12, "temperature": 0,
                                                          "ignore_eos": True, "return_token_ids": True}))

        threads = [threading.Thread(target=run) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        wait_idle(srv)
        with urllib.request.urlopen(url + "/metrics", timeout=TIMEOUT) as r:
            counted = float(re.search(r"^kda_request_refused_total (\S+)$", r.read().decode(), re.M).group(1))
    ok = [b for s, _, b in results if s == 200]
    refused = [(h, b) for s, h, b in results if s == 503]
    assert len(ok) + len(refused) == 12 and refused and ok
    assert counted == len(refused)  # the counter is the 503s answered, no more, no fewer
    assert all(b["choices"][0]["token_ids"] == want for b in ok)  # every accepted request answered in full
    assert all(h.get("retry-after") == "1" and b["error"]["type"] == "server_error" for h, b in refused)


def test_api_key_guards_everything_but_health_and_metrics(model):
    srv = make_server(LLM(model), None, model_name="micro", api_key="s3cret")
    with ServerThread(srv) as url:
        assert get(url + "/health")[0] == 200 and get(url + "/metrics")[0] == 200
        assert get(url + "/v1/models")[0] == 401
        status, _, err = post(url + "/v1/completions", {"prompt": "hi", "max_tokens": 2},
                              headers={"Authorization": "Bearer wrong"})
        assert status == 401 and err["error"]["code"] == "invalid_api_key"
        good = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0, timeout=TIMEOUT)
        assert good.completions.create(model="micro", prompt="hi", max_tokens=2).usage.completion_tokens >= 1


def test_a_request_that_fails_in_a_step_errors_alone(model):
    llm = LLM(model)
    real = llm.model.forward_batch

    def forward_batch(input_ids, batch, *a, **k):  # a kernel that fails whenever the poisoned request runs
        slots = set(batch.state_indices.tolist())
        if any(499 in r.prompt_token_ids and r.slot in slots for r in llm.scheduler.running):
            raise RuntimeError("injected kernel failure")
        return real(input_ids, batch, *a, **k)

    want = offline(model, ["a healthy request"])[0].token_ids
    llm.model.forward_batch = forward_batch  # the module's shared model: put back whatever happens
    try:
        _fail_one(llm, want)
    finally:
        del llm.model.forward_batch


def _fail_one(llm, want) -> None:
    srv = make_server(llm, None, model_name="micro")
    results = {}
    with ServerThread(srv) as url:
        def run(name, prompt, stream=False):
            results[name] = post(url + "/v1/completions", {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
                                                           "ignore_eos": True, "return_token_ids": True})

        threads = [threading.Thread(target=run, args=a) for a in (("bad", [5, 499, 7]), ("good", "a healthy request"))]
        for th in threads:
            th.start()
        for th in threads:
            th.join(TIMEOUT)
        status, _, body = results["bad"]
        assert status == 500 and body["error"]["type"] == "server_error" and "injected" in body["error"]["message"]
        status, _, body = results["good"]
        assert status == 200 and body["choices"][0]["token_ids"] == want
        assert get(url + "/health")[0] == 200  # the loop lives on


def test_seeded_sampling_is_reproducible_and_equals_offline(model, client):
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.8, seed=1234, ignore_eos=True)
    want = LLM(model).generate(["sample me"], params)[0].token_ids
    got = [client.completions.create(model="micro", prompt="sample me", max_tokens=MAX_TOKENS, temperature=0.8,
                                     seed=1234, extra_body={"ignore_eos": True, "return_token_ids": True})
           .choices[0].token_ids for _ in range(2)]
    assert got == [want, want]


def test_live_trace_stream_sends_each_new_step(served, client):
    srv, url = served
    wait_idle(srv)
    step = srv.loop.llm.clock.step  # the engine's last step (the ring may hold none: it records while read)
    last = json.loads(get(url + "/kda/trace?since=-1")[1])["last_step"]  # a reader attaches
    assert last is None or last <= step
    last = step
    done = threading.Event()
    threading.Thread(target=lambda: (client.completions.create(model="micro", prompt="stream the trace",
                                                               max_tokens=3, temperature=0), done.set()),
                     daemon=True).start()
    with urllib.request.urlopen(url + f"/kda/trace/stream?since={last}", timeout=TIMEOUT) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: "):
                record = json.loads(line[6:])
                break
    assert record["step"] == last + 1 and record["events"]
    assert done.wait(TIMEOUT)


def test_trace_streams_wait_on_threads_of_their_own(served, monkeypatch):
    """A trace stream waits up to a second a turn for the next step: on asyncio's default pool, eight readers
    held every worker and each completion and /metrics queued behind them. Their waits run on the server's
    own ``stream_waits`` threads."""
    srv, url = served
    names = []
    real = srv.live.wait_after

    def wait_after(last, timeout):
        names.append(threading.current_thread().name)
        return real(last, timeout)

    monkeypatch.setattr(srv.live, "wait_after", wait_after)
    with urllib.request.urlopen(url + "/kda/trace/stream?since=-1", timeout=TIMEOUT) as r:
        deadline = time.monotonic() + TIMEOUT
        while not names and time.monotonic() < deadline:
            r.readline()  # keep-alives come once a second
    assert names and all(n.startswith("kda-trace-stream") for n in names)


def test_the_trace_streams_threads_end_with_the_server(model):
    """The streams' own pool ends when the server stops (its idle threads stayed until the process ended)."""
    live = LiveTrace(8)
    srv = make_server(LLM(model, tracer=live), live, model_name="micro")
    with ServerThread(srv) as url:
        with urllib.request.urlopen(url + "/kda/trace/stream?since=-1", timeout=TIMEOUT) as r:
            r.readline()
    with pytest.raises(RuntimeError, match="shutdown"):
        srv.stream_waits.submit(int)


def test_a_checkpoint_folders_own_chat_template_is_used(tmp_path):
    from kda_ref.server.chat import JinjaChatTemplate, load_chat_template

    assert isinstance(load_chat_template(None), ByteChatTemplate)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": {"content": "<s>"}, "chat_template": [
            {"name": "tool_use", "template": "unused"},
            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                                            "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}]}))
    tpl = load_chat_template(tmp_path)
    assert isinstance(tpl, JinjaChatTemplate)
    assert tpl.render([{"role": "user", "content": "hi"}]) == "<s>[user]hi[assistant]"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{% if messages[0].role != 'user' %}{{ raise_exception('must start with user') }}{% endif %}"}))
    with pytest.raises(ValueError, match="must start with user"):  # the template's own words (HF's global)
        load_chat_template(tmp_path).render([{"role": "system", "content": "x"}])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 1 // 0 }}"}))
    with pytest.raises(ValueError, match="^messages: .*ZeroDivisionError"):
        load_chat_template(tmp_path).render([{"role": "user", "content": "hi"}])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[5].content }}"}))
    with pytest.raises(ValueError, match="^messages: "):
        load_chat_template(tmp_path).render([{"role": "user", "content": "hi"}])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ ''.__class__.__mro__ }}"}))
    with pytest.raises(ValueError, match="^messages: "):  # the sandbox refuses what a template may not reach
        load_chat_template(tmp_path).render([{"role": "user", "content": "hi"}])


def test_a_non_streaming_client_that_leaves_is_aborted_while_tokens_flow(served):
    """Its request delivers a token every few milliseconds, so the disconnect is checked by the clock, not
    only when a wait times out."""
    import socket
    import urllib.parse

    srv, url = served
    wait_idle(srv)
    aborted = _metric(get(url + "/metrics")[1], 'kda_request_success_total{finished_reason="abort"}', 0.0)
    parts = urllib.parse.urlsplit(url)
    body = json.dumps({"prompt": "a", "max_tokens": 3000, "ignore_eos": True, "temperature": 0}).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + TIMEOUT
        while not srv.loop.live_count() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # tokens flowing
    wait_idle(srv, timeout=10)  # 3,000 tokens would take far longer
    assert _metric(get(url + "/metrics")[1], 'kda_request_success_total{finished_reason="abort"}') - aborted == 1


def test_waiting_counts_each_request_once(model):
    srv = make_server(LLM(model, max_num_seqs=1), None, model_name="micro")
    with ServerThread(srv):
        params = SamplingParams(max_tokens=3000, ignore_eos=True)
        streams = [srv.loop.submit(f"queued {i}", params) for i in range(5)]
        deadline = time.monotonic() + TIMEOUT
        while (srv.metrics.snapshot.get("running") != 1 or srv.loop.inbox_size()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.metrics.snapshot["waiting"] == 4  # one runs; four wait, each counted once
        for st in streams:
            st.cancel()


def test_odd_field_names_keys_and_a_stopped_loop_get_openai_errors(model):
    srv = make_server(LLM(model), None, model_name="micro", api_key="clé")
    with ServerThread(srv) as url:
        key = {"Authorization": "Bearer clé".encode().decode("latin-1")}  # the UTF-8 bytes on the wire
        status, _, err = post(url + "/v1/completions", None, headers=key,
                              raw=b'{"\\ud800": 1, "prompt": "hi"}')  # a lone surrogate as a field name
        assert status == 400 and err["error"]["param"] == "\\ud800"
        status, _, err = post(url + "/v1/completions", None, headers=key, raw=b'{"model": "\\ud800", "prompt": "x"}')
        assert status == 404 and err["error"]["code"] == "model_not_found"
        srv.loop.stop()
        status, headers, err = post(url + "/v1/completions", {"prompt": "hi"}, headers=key)
        assert status == 503 and err["error"]["code"] == "shutting_down" and "retry-after" not in headers
        assert get(url + "/health")[0] == 503


def test_a_caching_speculating_server_answers_the_same_and_counts_it():
    """Prefix cache + n-gram speculation behind HTTP, on the trained demo (whose text repeats, so drafts
    are made): the same tokens as plain offline decoding, and /metrics shows the reuse and the drafts."""
    from kda_ref.train import load_trained

    model = load_trained()
    prompt = "The KDA state is a matrix. The KDA state is a matrix. The KDA state"
    want = offline(model, [prompt], max_tokens=12)[0].token_ids
    srv = make_server(LLM(model, prefix_cache="radix", speculative="ngram", num_speculative_tokens=3), None,
                      model_name="micro")
    with ServerThread(srv) as url:
        for _ in range(2):  # the second sends the same prompt: its prefix is a hit
            status, _, body = post(url + "/v1/completions", {"prompt": prompt, "max_tokens": 12, "temperature": 0,
                                                             "ignore_eos": True, "return_token_ids": True})
            assert status == 200 and body["choices"][0]["token_ids"] == want
        wait_idle(srv)
        m = get(url + "/metrics")[1]
    drafts, accepted = (_metric(m, f"kda_spec_decode_num_{k}_tokens_total") for k in ("draft", "accepted"))
    assert drafts > 0 and 0 <= accepted <= drafts
    assert 0 < _metric(m, "kda_prefix_cache_hits_total") <= _metric(m, "kda_prefix_cache_queries_total")
    assert _metric(m, 'kda_pool_used_bytes{kind="checkpoint"}') > 0  # the cache keeps its states


def test_max_completion_tokens_wins_over_max_tokens_in_either_order():
    """Chat's ``max_completion_tokens`` is the limit when both fields come, whichever comes first in the body (the
    ``openai`` client writes it first); a bad ``max_tokens`` beside it is still refused by name."""
    from kda_ref.server.protocol import APIError, parse_chat
    m = [{"role": "user", "content": "hi"}]
    for body in ({"messages": m, "max_tokens": 10, "max_completion_tokens": 3},
                 {"messages": m, "max_completion_tokens": 3, "max_tokens": 10}):
        s = parse_chat(body).sampling
        assert (s.max_tokens, s.max_tokens_field) == (3, "max_completion_tokens")
    assert parse_chat({"messages": m, "max_tokens": 10}).sampling.max_tokens == 10
    with pytest.raises(APIError) as e:
        parse_chat({"messages": m, "max_completion_tokens": 3, "max_tokens": 0})
    assert e.value.param == "max_tokens"



def test_a_messages_name_reaches_the_template_and_is_checked():
    from kda_ref.server.protocol import APIError, parse_chat

    req = parse_chat({"messages": [{"role": "user", "content": "hi", "name": "bob"}]})
    assert req.messages == [{"role": "user", "content": "hi", "name": "bob"}]
    with pytest.raises(APIError) as e:
        parse_chat({"messages": [{"role": "user", "content": "hi", "name": 3}]})
    assert e.value.param == "messages[0].name"


def test_k3_with_its_mtp_drafts_behind_http_answers_as_plain_decoding():
    """The trained K3 demo served with MTP drafts and RecoverSSM: the same tokens as plain offline decoding;
    /metrics counts the drafts its MTP layer made and those accepted."""
    from kda_ref.train import load_trained

    model = load_trained(kind="k3")
    want = offline(model, ["The KDA state"], max_tokens=12)[0].token_ids
    srv = make_server(LLM(model, speculative="mtp", num_speculative_tokens=1, spec_state="recoverssm"), None,
                      model_name="trained-k3")
    with ServerThread(srv) as url:
        status, _, body = post(url + "/v1/completions", {"prompt": "The KDA state", "max_tokens": 12,
                                                         "temperature": 0, "ignore_eos": True,
                                                         "return_token_ids": True})
        assert status == 200 and body["choices"][0]["token_ids"] == want
        wait_idle(srv)
        m = get(url + "/metrics")[1]
    assert 0 < _metric(m, "kda_spec_decode_num_accepted_tokens_total") <= _metric(
        m, "kda_spec_decode_num_draft_tokens_total")
    # k = 1: the one position's count is every accepted draft (vLLM's ..._per_pos{position="0"})
    assert _metric(m, 'kda_spec_decode_num_accepted_tokens_per_pos_total{position="0"}') == _metric(
        m, "kda_spec_decode_num_accepted_tokens_total")
