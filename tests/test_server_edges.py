"""The server's edges as a hostile but realistic client meets them: every request error a 400 (or vLLM's 404)
naming the field it was about, an unexpected error answered without losing the connection, ``/tokenize``
honouring each field it takes, and an echoed prompt whose tokens, text and offsets agree. The frozen engine
process, stalled bodies and SIGHUP are in ``tests/test_server_liveness.py``."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from kda_ref import LLM, ModelConfig  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.chat import ByteChatTemplate  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402
from kda_ref.utils.limits import MAX_CONTEXT_TOKENS  # noqa: E402
from test_server import _metric, get, post  # noqa: E402

TIMEOUT = 60
MESSAGES = [{"role": "user", "content": "hi"}]


class FailingTemplate(ByteChatTemplate):
    """A chat template with a bug: conversations that mention ``boom`` raise (an unexpected error); and one
    that refuses conversations that mention ``refuse`` (a ``ValueError``, as a checkpoint's Jinja template's
    ``raise_exception`` is)."""

    def render(self, messages, add_generation_prompt=True):
        if "boom" in messages[-1]["content"]:
            raise KeyError("a bug in the template")
        if "refuse" in messages[-1]["content"]:
            raise ValueError("messages: the checkpoint's chat template refused them ('a system message first')")
        return super().render(messages, add_generation_prompt)


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


@pytest.fixture(scope="module")
def url(model):
    srv = make_server(LLM(model, max_num_seqs=4), None, model_name="micro", chat_template=FailingTemplate())
    with ServerThread(srv) as u:
        yield u


@pytest.fixture(scope="module")
def spec_url(model):
    srv = make_server(LLM(model, max_num_seqs=4, speculative="ngram", num_speculative_tokens=2), None,
                      model_name="micro")
    with ServerThread(srv) as u:
        yield u


def _status_param(url: str, path: str, body: dict) -> tuple[int, str | None, dict]:
    status, _, err = post(url + path, body)
    return status, (err.get("error") or {}).get("param"), err


@pytest.mark.parametrize("path, body, field", [
    ("/v1/completions", {"prompt": "a", "max_tokens": MAX_CONTEXT_TOKENS + 1}, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 2**40}, "max_tokens"),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_completion_tokens": MAX_CONTEXT_TOKENS + 1},
     "max_completion_tokens"),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": MAX_CONTEXT_TOKENS + 1}, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": MAX_CONTEXT_TOKENS}, "max_tokens"),  # fits no model here
    ("/v1/chat/completions", {"messages": MESSAGES, "max_completion_tokens": MAX_CONTEXT_TOKENS},
     "max_completion_tokens"),
])
def test_max_tokens_past_any_context_is_a_400_naming_the_field(url, path, body, field):
    status, param, err = _status_param(url, path, body)
    assert status == 400 and param == field, err


@pytest.mark.parametrize("prompts", [[[256, 84, 104], [99999]], ["The KDA state", "a" * 9000]])
def test_a_request_with_one_bad_prompt_runs_none_of_them(url, prompts):
    """Every prompt of a request is checked before any is admitted: the 400 names the prompt, and the engine
    never saw the good one (no prompt tokens counted, no abort)."""
    names = ("kda_prompt_tokens_total", 'kda_request_success_total{finished_reason="abort"}')
    before = [_metric(get(url + "/metrics")[1], n, 0.0) for n in names]
    status, param, err = _status_param(url, "/v1/completions", {"prompt": prompts, "max_tokens": 4})
    assert status == 400 and param == "prompt", err
    assert [_metric(get(url + "/metrics")[1], n, 0.0) for n in names] == before


def test_a_duplicated_key_is_read_as_json_reads_it_and_refused_by_name(url):
    """``{"max_tokens": 5, "max_tokens": 2**25}``: the last value counts (Python's and most parsers' rule)."""
    raw = b'{"prompt": "a", "max_tokens": 5, "max_tokens": 33554432}'
    status, _, err = post(url + "/v1/completions", None, raw=raw)
    assert status == 400 and err["error"]["param"] == "max_tokens", err


def test_an_unexpected_error_is_a_500_that_keeps_the_connection(url):
    """A bug (the template raises ``KeyError``) is OpenAI's 500 error object, and the same keep-alive
    connection answers the client's next request (the exception does not escape to uvicorn, which would drop
    the connection without ``Connection: close``)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT)
    try:
        for content, want in (("boom", 500), ("fine", 200), ("boom", 500), ("fine", 200)):
            body = json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": 2})
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            doc = json.loads(r.read())
            assert r.status == want, doc
            assert r.getheader("connection", "").lower() != "close"
            if want == 500:
                assert doc["error"] == {"message": "internal error: KeyError", "type": "server_error",
                                        "param": None, "code": None}
        assert conn.sock is not None  # one connection served all four
    finally:
        conn.close()


@pytest.mark.parametrize("field, value", [("frequency_penalty", 0.5), ("presence_penalty", -0.5),
                                          ("repetition_penalty", 1.2), ("min_p", 0.1), ("top_p", 0.9)])
def test_a_speculative_server_names_the_sampler_field_it_refuses(spec_url, field, value):
    status, param, err = _status_param(spec_url, "/v1/completions", {"prompt": "a", field: value})
    assert status == 400 and param == field, err
    assert err["error"]["message"].startswith(f"{field}: not supported with speculative decoding")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_a_conversation_the_chat_template_refuses_is_a_400_on_both_endpoints(url, path):
    """``/tokenize`` answered 500 (an internal error, a traceback in the log) where the chat endpoint
    answered the template's refusal as the request's 400."""
    status, param, err = _status_param(url, path, {"messages": [{"role": "user", "content": "refuse me"}]})
    assert (status, param) == (400, "messages") and "a system message first" in err["error"]["message"], err


def test_tokenize_honours_each_field_it_takes(url):
    base = {"messages": MESSAGES}
    _, _, full = post(url + "/tokenize", {**base, "return_token_strs": True})
    _, _, bare = post(url + "/tokenize", {**base, "add_generation_prompt": False})
    _, _, plain = post(url + "/tokenize", {**base, "add_special_tokens": False})
    opened = ByteChatTemplate().render(MESSAGES)
    assert full["tokens"][1:] == list(opened.encode()) and full["token_strs"][0] == "<bos>"
    assert bare["tokens"] == full["tokens"][:len(bare["tokens"])]
    assert bytes(bare["tokens"][1:]).decode() == ByteChatTemplate().render(MESSAGES, add_generation_prompt=False)
    assert plain["tokens"] == full["tokens"][1:]
    _, _, text = post(url + "/tokenize", {"prompt": "ab", "add_special_tokens": False, "return_token_strs": True})
    assert text["tokens"] == [97, 98] and text["token_strs"] == ["a", "b"]
    status, param, _ = _status_param(url, "/tokenize", {"prompt": "ab", "add_generation_prompt": False})
    assert (status, param) == (400, "add_generation_prompt")


def test_detokenize_keeps_special_tokens_by_name_as_vllms(url):
    """vLLM's /detokenize decodes with Hugging Face's default (special tokens kept): /tokenize's ids go back to
    the text with its ``<bos>`` first."""
    status, _, tok = _status_param(url, "/tokenize", {"prompt": "hé"})
    status, _, out = _status_param(url, "/detokenize", {"tokens": tok["tokens"]})
    assert status == 200 and out["prompt"] == "<bos>hé"


@pytest.mark.parametrize("path, body", [("/tokenize", {"prompt": "a"}), ("/detokenize", {"tokens": [97]}),
                                        ("/v1/completions", {"prompt": "a"})])
def test_an_unknown_model_is_a_404_on_every_endpoint(url, path, body):
    status, param, err = _status_param(url, path, {**body, "model": "gpt-4"})
    assert status == 404 and param == "model" and err["error"]["code"] == "model_not_found", err
    status, _, _ = _status_param(url, path, {**body, "model": "micro"})
    assert status == 200


def test_echoed_tokens_text_and_offsets_agree(url):
    """With ``echo`` and ``logprobs`` the prompt's BOS is ``<bos>`` in the tokens and in the text; the tokens
    join to the text and each ``text_offset`` points at its token (vLLM's rule: the lengths before it)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    out = client.completions.create(model="micro", prompt="The KDA state", max_tokens=4, temperature=0,
                                    logprobs=1, echo=True, extra_body={"ignore_eos": True})
    choice = out.choices[0]
    lp = choice.logprobs
    assert lp.tokens[0] == "<bos>" and choice.text.startswith("<bos>The KDA state")
    assert "".join(lp.tokens) == choice.text
    for i, token in enumerate(lp.tokens):
        assert lp.text_offset[i] == len("".join(lp.tokens[:i]))
        assert choice.text[lp.text_offset[i]:].startswith(token)
    plain = client.completions.create(model="micro", prompt="The KDA state", max_tokens=4, temperature=0, echo=True,
                                      extra_body={"ignore_eos": True})
    assert plain.choices[0].text == choice.text  # the same echo with or without logprobs
