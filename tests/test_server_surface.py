"""vLLM's OpenAI surface as the ecosystem's tools use it, and the probe's one-line bugs: usage on every chunk
(``continuous_usage_stats``), ``usage.total_tokens``, ``/tokenize`` / ``/detokenize`` / ``/version``,
``system_fingerprint`` and a real ``created``, a request that can never be admitted, a body that is not JSON,
ids past any vocabulary, and the refusals counter against the 503s answered."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from kda_ref import LLM, ModelConfig  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402
from test_server import post  # noqa: E402

TIMEOUT = 60


@pytest.fixture(scope="module")
def served():
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    srv = make_server(LLM(model, max_num_seqs=4), None, model_name="micro", max_waiting=3)
    with ServerThread(srv) as url:
        yield srv, url


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def test_usage_on_every_chunk_when_asked_and_totals_that_add_up(client):
    stream = client.completions.create(model="micro", prompt="hello world", max_tokens=6, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True},
                                       stream_options={"include_usage": True, "continuous_usage_stats": True})
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    counts = [c.usage.completion_tokens for c in chunks]
    assert all(c.usage is not None and c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
               for c in chunks)
    assert counts == sorted(counts) and counts[0] >= 1  # the usage so far, growing
    plain = client.completions.create(model="micro", prompt="hello world", max_tokens=6, temperature=0, stream=True,
                                      stream_options={"include_usage": False, "continuous_usage_stats": True})
    assert all(c.usage is None for c in plain)  # continuous counts only with include_usage, as in vLLM
    whole = client.completions.create(model="micro", prompt=["a b", "c"], max_tokens=5, temperature=0,
                                      extra_body={"ignore_eos": True})
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    assert whole.usage.completion_tokens == 10
    chat = client.chat.completions.create(model="micro", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                          temperature=0, extra_body={"ignore_eos": True})
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens == \
        chat.usage.prompt_tokens + 4


def test_continuous_usage_counts_the_tokens_streamed_so_far(client, served):
    """``continuous_usage_stats``: each chunk's ``completion_tokens`` is the number of tokens the answer has
    when the chunk is sent, not the tokens of its step. The micro model settles text only every few tokens,
    so the counts are replayed offline step by step (one token per step; a chunk where the text grew, then
    the finish reason's and the usage's)."""
    from kda_ref import SamplingParams

    llm = LLM(served[0].loop.llm.model)
    rid = llm.add_request("hello world", SamplingParams(max_tokens=8, ignore_eos=True))
    want, shown = [], ""
    while llm.has_unfinished():
        done = {o.req_id: o for o in llm.step()}
        req = done.get(rid) or llm.request(rid)
        text, n = req.text, len(done[rid].token_ids if rid in done else req.output_token_ids)
        if len(text) > len(shown):
            want.append(n)
            shown = text
    want += [8, 8]  # the chunk with the finish reason, then the usage's own
    chunks = list(client.completions.create(model="micro", prompt="hello world", max_tokens=8, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True},
                                            stream_options={"include_usage": True, "continuous_usage_stats": True}))
    counts = [c.usage.completion_tokens for c in chunks]
    assert counts == want and sum(n > 1 for n in want[:-2]) >= 2, (counts, want)  # chunks of several tokens
    assert all(c.usage.prompt_tokens == chunks[0].usage.prompt_tokens for c in chunks)


def test_fingerprint_and_a_real_created(client, served):
    t0 = time.time()
    out = client.completions.create(model="micro", prompt="x", max_tokens=2, temperature=0)
    assert re.fullmatch(r"kda-viz-\S+", out.system_fingerprint) and abs(out.created - t0) < 60
    models = client.models.list().data
    assert models[0].created == served[0].started and served[0].started > 1.7e9


def test_tokenize_detokenize_and_version_in_vllms_shapes(served):
    srv, url = served
    llm = srv.loop.llm
    status, _, tok = post(url + "/tokenize", {"model": "micro", "prompt": "héllo", "return_token_strs": True})
    want = [llm.config.bos_token_id, *llm.tokenizer.encode("héllo")]
    assert status == 200 and tok["tokens"] == want and tok["count"] == len(want)
    assert tok["max_model_len"] == llm.max_model_len and len(tok["token_strs"]) == len(want)
    _, _, bare = post(url + "/tokenize", {"prompt": "héllo", "add_special_tokens": False})
    assert bare["tokens"] == want[1:] and bare["token_strs"] is None
    _, _, chat = post(url + "/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
    assert chat["count"] > 3
    _, _, text = post(url + "/detokenize", {"tokens": bare["tokens"]})
    assert text == {"prompt": "héllo"}
    status, _, err = post(url + "/detokenize", {"tokens": [10**30]})
    assert status == 400 and err["error"]["param"] == "tokens"
    status, _, err = post(url + "/tokenize", {"prompt": "x", "add_special_tokens": "yes"})
    assert status == 400 and err["error"]["param"] == "add_special_tokens"
    with urllib.request.urlopen(url + "/version", timeout=TIMEOUT) as r:
        assert re.fullmatch(r"\d+\.\d+\.\d+\S*", json.loads(r.read())["version"])


def test_what_can_never_run_is_a_400_and_ids_past_any_vocabulary_are_refused(served):
    _, url = served
    status, headers, err = post(url + "/v1/completions", {"prompt": ["a", "b", "c", "d"], "max_tokens": 2})
    assert status == 400 and "retry-after" not in headers and "never be admitted" in err["error"]["message"]
    assert err["error"]["param"] == "prompt"
    status, _, err = post(url + "/v1/completions", {"prompt": "a", "n": 4, "max_tokens": 2})  # one prompt, n copies
    assert status == 400 and err["error"]["param"] == "n" and "1 prompt(s) x n=4 = 4 choices" in err["error"]["message"]
    for field, value in (("stop_token_ids", [10**3999]), ("top_k", 10**3999)):
        status, _, err = post(url + "/v1/completions", {"prompt": "a", field: value})
        assert status == 400 and err["error"]["param"] == field, err


def test_a_body_that_says_it_is_not_json_is_a_415(served):
    _, url = served
    req = urllib.request.Request(url + "/v1/completions", data=b"prompt=hi", headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=TIMEOUT)
    assert e.value.code == 415 and json.loads(e.value.read())["error"]["code"] == "unsupported_media_type"
    status, _, _ = post(url + "/v1/completions", {"prompt": "a", "max_tokens": 1},
                        headers={"Content-Type": "application/json; charset=utf-8"})
    assert status == 200


def test_completions_logprobs_and_echo_are_the_models_own(client, served):
    """``logprobs: 2`` and ``echo`` as lm-evaluation-harness asks (token ids in, the prompt's logprobs out):
    each equals the model's own fp32 log-softmax over one whole forward."""
    import torch

    model = served[0].loop.llm.model
    prompt = [3, 9, 27, 81, 17, 51, 153]
    out = client.completions.create(model="micro", prompt=prompt, max_tokens=3, temperature=0, logprobs=2, echo=True,
                                    extra_body={"ignore_eos": True})
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == len(prompt) + 3
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    with torch.no_grad():
        want = torch.log_softmax(model(torch.tensor(prompt), None, None, logits="all").float(), -1)
    for pos in range(1, len(prompt)):
        assert lp.token_logprobs[pos] == pytest.approx(float(want[pos - 1, prompt[pos]]), abs=1e-4)
        assert 2 <= len(lp.top_logprobs[pos]) <= 3  # the top 2 and the prompt's own token
    assert lp.text_offset == sorted(lp.text_offset)
    plain = client.completions.create(model="micro", prompt=prompt, max_tokens=3, temperature=0)
    assert out.choices[0].text.endswith(plain.choices[0].text)


def test_chat_logprobs_n_choices_and_the_sampler_fields(client):
    out = client.chat.completions.create(model="micro", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                         temperature=0, logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    content = out.choices[0].logprobs.content
    assert len(content) == 4 and all(len(c.top_logprobs) == 3 and c.logprob <= 0 for c in content)
    assert all(isinstance(c.bytes, list) for c in content)
    many = client.completions.create(model="micro", prompt="once", max_tokens=5, temperature=1.0, n=3, seed=11,
                                     top_p=0.9, presence_penalty=0.5, extra_body={"ignore_eos": True, "min_p": 0.05,
                                                                                   "repetition_penalty": 1.1})
    again = client.completions.create(model="micro", prompt="once", max_tokens=5, temperature=1.0, n=3, seed=11,
                                      top_p=0.9, presence_penalty=0.5, extra_body={"ignore_eos": True, "min_p": 0.05,
                                                                                    "repetition_penalty": 1.1})
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert [c.text for c in many.choices] == [c.text for c in again.choices]  # seeded: reproducible
    assert len({c.text for c in many.choices}) > 1  # each choice its own draw
    one = client.completions.create(model="micro", prompt="once", max_tokens=5, temperature=0)
    assert many.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once, not per choice
    assert many.usage.completion_tokens == 15


def test_logprobs_requests_that_cannot_be_answered_are_400s(served):
    _, url = served
    for body, field in (({"prompt": "a", "logprobs": 21}, "logprobs"), ({"prompt": "a", "stream": True, "echo": True},
                                                                        "echo"),
                        ({"prompt": "a", "top_p": 0}, "top_p"), ({"prompt": "a", "n": 17}, "n")):
        status, _, err = post(url + "/v1/completions", body)
        assert status == 400 and err["error"]["param"] == field, (body, err)
    status, _, err = post(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                         "top_logprobs": 2})
    assert status == 400 and err["error"]["param"] == "top_logprobs"


def test_prompts_are_checked_and_tokenised_off_the_event_loop(served, client, monkeypatch):
    """``check_request`` tokenises: on the event loop a long prompt held every other client up. It runs on
    a worker thread (it reads the configuration only, so any thread may)."""
    import threading

    srv, _ = served
    llm, threads = srv.loop.llm, []
    real = llm.check_request
    monkeypatch.setattr(llm, "check_request", lambda *a, **k: threads.append(threading.current_thread().name)
                        or real(*a, **k))
    client.completions.create(model="micro", prompt="hi", max_tokens=2, temperature=0)
    client.chat.completions.create(model="micro", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert len(threads) == 2 and "kda-uvicorn" not in threads and "kda-engine-loop" not in threads, threads
