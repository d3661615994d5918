"""The OpenAI request bodies this server takes, checked field by field before anything is tokenised.

``/v1/completions`` and ``/v1/chat/completions`` share their sampling fields; each endpoint adds its own
input (``prompt`` or ``messages``). Every problem is an :class:`APIError` naming the field, answered as
OpenAI's error object (HTTP 400); an option this engine does not have is refused, never silently ignored.
Extensions as vLLM 0.32.0's server takes them (``CompletionRequest`` in
``vllm/entrypoints/openai/completion/protocol.py``, ``ChatCompletionRequest`` in
``vllm/entrypoints/openai/chat_completion/protocol.py``). The checks against the model stay the engine's
(:class:`~kda_ref.engine.request_check.RequestChecker`); its :class:`~kda_ref.engine.RequestError` becomes a
400 naming the same argument (:func:`engine_error`).
Design notes: ``docs/serving.md#2-the-endpoints``; errors: ``docs/serving.md#3-errors``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..engine import RequestError, SamplingParams
from ..engine.request import MAX_STOP_CHARS, MAX_STOP_STRINGS
from ..utils.limits import MAX_CONTEXT_TOKENS, MAX_TEMPERATURE, MIN_TEMPERATURE, SEED_RANGE

MAX_PROMPTS = 64  # prompts in one /v1/completions body (OpenAI's batch form: a list of prompts)
MAX_MESSAGES = 256


class APIError(Exception):
    """An OpenAI-shaped error: HTTP ``status``, ``message``, ``param`` (the field), ``type`` and ``code``."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 type: str = "invalid_request_error", code: str | None = None):  # noqa: A002 -- OpenAI's name
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = message, param, status, type, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def render_chat(template, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """``template.render`` for a route: a conversation the chat template refuses (its ``ValueError``) is the
    request's 400 naming ``messages`` -- on ``/v1/chat/completions`` and ``/tokenize`` alike, as vLLM 0.32.0
    answers a template's ``TemplateError`` on every route with a 400
    (``vllm/entrypoints/serve/exception_handling/error_response.py::create_error_response``; its ``param`` is
    null, naming the field is ours)."""
    try:
        return template.render(messages, add_generation_prompt)
    except ValueError as e:
        raise APIError(str(e), param="messages") from None


def check_model(model, served: str | tuple[str, ...]) -> None:
    """``model`` as a request sent it (None: not sent) against the name(s) ``served`` (``--served-model-name``
    takes several, as vLLM's does): a 404 naming the field when it is another (vLLM 0.32.0's
    ``BaseServing._check_model``, ``vllm/entrypoints/serve/engine/serving.py``, answers every endpoint so,
    ``/tokenize`` included)."""
    names = (served,) if isinstance(served, str) else tuple(served)
    if model is not None and model not in names:
        shown = _str("model", model)[:80]
        raise APIError(f"The model {shown!r} does not exist (this server serves {' / '.join(map(repr, names))})",
                       param="model", status=404, code="model_not_found")


def _kind(v) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
            type(None): "null"}.get(type(v), type(v).__name__)


def _bad(name: str, expect: str, v) -> APIError:
    return APIError(f"{name}: must be {expect}, got {_kind(v)} {str(v)[:60]!r}" if not isinstance(v, (dict, list))
                    else f"{name}: must be {expect}, got {_kind(v)}", param=name)


MAX_ID = 2**31 - 1  # token ids and top_k: what an int32 holds (past it a client sent a mistake, not a vocabulary)


MAX_N = 16  # choices per prompt
MAX_LOGPROBS = 20  # OpenAI's bound on top_logprobs (the engine's SamplingParams has the same)


def _positive(name, v, hi: float) -> float:
    """A number in (0, hi]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= hi:
        raise _bad(name, f"a number in (0, {hi:g}]", v)
    return float(v)


def _int(name, v, lo=None, hi=None):
    if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo) or (hi is not None and v > hi):
        bounds = " >= %d" % lo if hi is None and lo is not None else f" in [{lo}, {hi}]" if lo is not None else ""
        raise _bad(name, f"an integer{bounds}", v)
    return v


def _num(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise _bad(name, f"a number in [{lo:g}, {hi:g}]", v)
    return float(v)


def _str(name, v) -> str:
    if not isinstance(v, str):
        raise _bad(name, "a string", v)
    return v


def _bool(name, v):
    if not isinstance(v, bool):
        raise _bad(name, "true or false", v)
    return v


def _only(name, v, allowed, why: str):
    """An OpenAI option this engine does not have: accepted only at its neutral value(s)."""
    if v not in allowed or isinstance(v, bool) != isinstance(allowed[0], bool):
        raise APIError(f"{name}: {why} (only {allowed[0]!r} is accepted), got {str(v)[:60]!r}", param=name)
    return v


def _stop(v) -> tuple[str, ...]:
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or len(items) > MAX_STOP_STRINGS:
        raise _bad("stop", f"a string or a list of at most {MAX_STOP_STRINGS} strings", v)
    for s in items:
        if not isinstance(s, str) or not 0 < len(s) <= MAX_STOP_CHARS:
            raise _bad("stop", f"non-empty strings of at most {MAX_STOP_CHARS} characters", s)
    return tuple(items)


def _token_ids(name, v, limit=None) -> list[int]:
    if not isinstance(v, list) or (limit is not None and len(v) > limit):
        raise _bad(name, "a list of token ids" + (f" (at most {limit})" if limit is not None else ""), v)
    for x in v:
        _int(name, x, 0, MAX_ID)
    return v


@dataclass
class Sampling:
    """The sampling fields of either endpoint, checked (OpenAI defaults: ``temperature`` 1, ``max_tokens``
    16 for completions; None for chat: the rest of the context, :meth:`RequestChecker.longest_output`)."""

    max_tokens: int | None = 16
    temperature: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False  # vLLM's stream_options.continuous_usage_stats: usage on every chunk
    return_token_ids: bool = False
    model: str | None = None
    extra: dict = field(default_factory=dict)
    top_p: float = 1.0
    min_p: float = 0.0  # vLLM's extension
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0  # vLLM's extension
    n: int = 1  # choices per prompt
    logprobs: int | None = None  # top logprobs per token (completions' logprobs; chat's top_logprobs)
    chat_logprobs: bool = False  # chat's logprobs: true
    echo: bool = False  # completions: the prompt before the answer (its logprobs too, with logprobs)
    max_tokens_field: str = "max_tokens"  # the field that set max_tokens (chat's max_completion_tokens too)

    def set_max_tokens(self, name: str, v) -> None:
        """``max_tokens`` from field ``name``: an integer in [1, 2**24] (past any model's context). Chat's
        ``max_completion_tokens`` wins over ``max_tokens`` wherever each stands in the body (OpenAI deprecates
        ``max_tokens`` for it; vLLM's ``ChatCompletionRequest.build_tok_params`` reads it first); both are checked."""
        n = _int(name, v, 1, MAX_CONTEXT_TOKENS)
        if not (name == "max_tokens" and self.max_tokens_field == "max_completion_tokens"):
            self.max_tokens, self.max_tokens_field = n, name

    def params(self, copy: int = 0) -> SamplingParams:
        """The engine's parameters for choice ``copy`` of a prompt (with ``n > 1`` and a seed, copy ``j``
        samples with ``seed + j``: the choices differ, the request stays reproducible). A chat that set no
        ``max_tokens`` gets 1 here, then the rest of its context once its prompt is counted
        (:meth:`~kda_ref.server.openai_api.Generation._check`)."""
        seed = None if self.seed is None else (self.seed + copy) % 2**63
        max_tokens = 1 if self.max_tokens is None else self.max_tokens
        return SamplingParams(max_tokens=max_tokens, temperature=self.temperature, top_k=self.top_k,
                              seed=seed, stop_token_ids=self.stop_token_ids, stop=self.stop,
                              ignore_eos=self.ignore_eos,
                              top_p=self.top_p, min_p=self.min_p, presence_penalty=self.presence_penalty,
                              frequency_penalty=self.frequency_penalty, repetition_penalty=self.repetition_penalty,
                              logprobs=self.logprobs,
                              prompt_logprobs=self.logprobs if self.echo and self.logprobs is not None else None)


def _temperature(name, v) -> float:
    t = _num(name, v, 0.0, min(2.0, MAX_TEMPERATURE))
    if 0 < t < MIN_TEMPERATURE:
        raise APIError(f"temperature: {t!r} is below {MIN_TEMPERATURE} (use 0 for greedy decoding)", param=name)
    return t


def _stream_options(v, stream: bool) -> tuple[bool, bool]:
    """``(include_usage, continuous_usage_stats)``: OpenAI's option and vLLM's extension (usage on every chunk,
    which counts only with ``include_usage``, as vLLM's ``OpenAIServingCompletion`` reads them)."""
    if v is None:
        return False, False
    if not stream:
        raise APIError("stream_options: only allowed with stream: true", param="stream_options")
    if not isinstance(v, dict) or set(v) - {"include_usage", "continuous_usage_stats"}:
        raise _bad("stream_options", "an object with include_usage and continuous_usage_stats (booleans) only", v)
    include = _bool("stream_options.include_usage", v.get("include_usage", False))
    continuous = _bool("stream_options.continuous_usage_stats", v.get("continuous_usage_stats", False))
    return include, include and continuous


# field -> how it is read into Sampling (None: accepted and ignored, e.g. ``user``)
_SAMPLING_FIELDS = {
    "model": lambda s, v: v is not None and setattr(s, "model", _str("model", v)),
    "max_tokens": lambda s, v: v is not None and s.set_max_tokens("max_tokens", v),
    "temperature": lambda s, v: v is not None and setattr(s, "temperature", _temperature("temperature", v)),
    "top_p": lambda s, v: v is not None and setattr(s, "top_p", _positive("top_p", v, 1.0)),
    "min_p": lambda s, v: v is not None and setattr(s, "min_p", _num("min_p", v, 0.0, 1.0)),
    "repetition_penalty": lambda s, v: v is not None and setattr(s, "repetition_penalty",
                                                                 _positive("repetition_penalty", v, 10.0)),
    "top_k": lambda s, v: v is not None and setattr(s, "top_k", max(0, _int("top_k", v, -1, MAX_ID))),
    "seed": lambda s, v: v is not None and setattr(s, "seed", _int("seed", v, *SEED_RANGE)),
    "stop": lambda s, v: setattr(s, "stop", _stop(v)),
    "stop_token_ids": lambda s, v: v is not None and setattr(s, "stop_token_ids",
                                                             tuple(_token_ids("stop_token_ids", v, 64))),
    "ignore_eos": lambda s, v: setattr(s, "ignore_eos", _bool("ignore_eos", v)),
    "stream": lambda s, v: v is not None and setattr(s, "stream", _bool("stream", v)),
    "return_token_ids": lambda s, v: setattr(s, "return_token_ids", _bool("return_token_ids", v)),
    "n": lambda s, v: v is not None and setattr(s, "n", _int("n", v, 1, MAX_N)),
    "presence_penalty": lambda s, v: v is not None and setattr(s, "presence_penalty", _num("presence_penalty", v,
                                                                                           -2.0, 2.0)),
    "frequency_penalty": lambda s, v: v is not None and setattr(s, "frequency_penalty", _num("frequency_penalty",
                                                                                             v, -2.0, 2.0)),
    "logit_bias": lambda s, v: v is not None and _only("logit_bias", v, [{}], "no logit bias"),
    "user": None,
}
_COMPLETION_ONLY = {
    "logprobs": lambda s, v: v is not None and setattr(s, "logprobs", _int("logprobs", v, 0, MAX_LOGPROBS)),
    "echo": lambda s, v: v is not None and setattr(s, "echo", _bool("echo", v)),
    "best_of": lambda s, v: v is not None and _only("best_of", _int("best_of", v, 1), [1], "one candidate"),
    "suffix": lambda s, v: v is not None and _only("suffix", v, [None], "no suffix"),
}
_CHAT_ONLY = {
    "max_completion_tokens": lambda s, v: v is not None and s.set_max_tokens("max_completion_tokens", v),
    "logprobs": lambda s, v: v is not None and setattr(s, "chat_logprobs", _bool("logprobs", v)),
    "top_logprobs": lambda s, v: v is not None and setattr(s, "logprobs", _int("top_logprobs", v, 0, MAX_LOGPROBS)),
}


def _read(body, own: dict, required: str, default_max_tokens: int | None = 16) -> Sampling:
    """The shared fields of ``body`` into a :class:`Sampling`; ``own`` the endpoint's extra readers;
    ``default_max_tokens`` where the body sets none (chat: None, the rest of the context, as vLLM's)."""
    if not isinstance(body, dict):
        raise APIError(f"the request body must be a JSON object, got {_kind(body)}")
    readers = {**_SAMPLING_FIELDS, **own, required: None}
    unknown = next((k for k in body if k not in readers and k != "stream_options"), None)
    if unknown is not None:  # the name as sent, escaped (a lone surrogate cannot go back out as JSON)
        shown = str(unknown)[:60].encode("utf-8", "backslashreplace").decode("utf-8")
        raise APIError(f"Unrecognized request argument supplied: {shown}", param=shown)
    if required not in body:
        raise APIError(f"{required}: a required field is missing", param=required)
    s = Sampling(max_tokens=default_max_tokens)
    for k, v in body.items():
        if readers.get(k) is not None:
            readers[k](s, v)
    s.include_usage, s.continuous_usage = _stream_options(body.get("stream_options"), s.stream)
    return _resolve_logprobs(s, body)


def _resolve_logprobs(s: Sampling, body: dict) -> Sampling:
    """Chat asks ``logprobs: true`` with ``top_logprobs: N`` (N needs the flag, as OpenAI's API says);
    logprobs and echo are answered whole, not streamed."""
    if "top_logprobs" in body and body["top_logprobs"] is not None and not s.chat_logprobs:
        raise APIError("top_logprobs: needs logprobs: true", param="top_logprobs")
    if s.chat_logprobs and s.logprobs is None:
        s.logprobs = 0
    if s.stream and (s.logprobs is not None or s.echo):
        field_ = "echo" if s.echo else "logprobs"
        raise APIError(f"{field_}: not supported with stream: true on this server (ask without streaming)",
                       param=field_)
    return s


@dataclass
class CompletionRequest:
    """``/v1/completions``: one prompt or a list (one choice each) -- text, or token ids."""

    prompts: list  # str or list[int] each
    sampling: Sampling


def _prompts(p) -> list:
    """Completions' ``prompt``: a string, a list of token ids, or a list of strings or of token-id lists (one
    kind throughout: vLLM's ``str | list[str] | list[int] | list[list[int]]``); the first element that
    breaks the pattern is named (``prompt[3]``)."""
    if isinstance(p, str):
        return [p]
    if not isinstance(p, list) or not p:
        raise _bad("prompt", f"a string, a list of token ids, or a list of at most {MAX_PROMPTS} of those", p)
    if not isinstance(p[0], (str, list)):  # one prompt of token ids
        for i, x in enumerate(p):
            _int(f"prompt[{i}]", x, 0, MAX_ID)
        return [p]
    if len(p) > MAX_PROMPTS:
        raise APIError(f"prompt: {len(p)} prompts in one request; at most {MAX_PROMPTS}", param="prompt")
    kind = str if isinstance(p[0], str) else list
    what = "a string, as prompt[0] is" if kind is str else "a list of token ids, as prompt[0] is"
    for i, x in enumerate(p):
        if not isinstance(x, kind):
            raise _bad(f"prompt[{i}]", what, x)
    return p if kind is str else [_token_ids(f"prompt[{i}]", x) for i, x in enumerate(p)]


def parse_completion(body) -> CompletionRequest:
    s = _read(body, _COMPLETION_ONLY, "prompt")
    prompts = _prompts(body["prompt"])
    if any(not x for x in prompts):
        raise APIError("prompt: empty", param="prompt")
    return CompletionRequest(prompts, s)


ROLES = ("system", "developer", "user", "assistant")


def _content(i: int, c) -> str:
    """A message's content: a string, or a list of ``{"type": "text", "text": ...}`` parts (joined)."""
    if isinstance(c, str):
        return c
    if isinstance(c, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                                   and set(p) <= {"type", "text"} for p in c):
        return "".join(p["text"] for p in c)
    raise _bad(f"messages[{i}].content", "a string or a list of text parts ({\"type\": \"text\", \"text\": ...})", c)


@dataclass
class ChatRequest:
    """``/v1/chat/completions``: the conversation, each message ``{"role", "content"}``."""

    messages: list[dict]
    sampling: Sampling


def _unread_keys_empty(i: int, m: dict) -> None:
    """A message's keys past role, content and name must be null or empty: the openai client's
    ``ChatCompletionMessage.model_dump()`` of a reply sent back as history carries ``tool_calls``,
    ``refusal``, ``annotations``, ``audio`` and ``function_call`` as nulls, which vLLM accepts too; one that
    holds something (a tool call, say) would be dropped unread, so it is refused by name."""
    for key in sorted(set(m) - {"role", "content", "name"}):
        if m[key] not in (None, [], {}):
            raise _bad(f"messages[{i}].{key}", "absent or null (this server reads role, content and name)", m[key])


def parse_chat(body) -> ChatRequest:
    s = _read(body, _CHAT_ONLY, "messages", default_max_tokens=None)
    msgs = body["messages"]
    if not isinstance(msgs, list) or not 0 < len(msgs) <= MAX_MESSAGES:
        raise _bad("messages", f"a list of 1 to {MAX_MESSAGES} messages", msgs)
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _bad(f"messages[{i}]", f"an object with role (one of {', '.join(ROLES)}) and content", m)
        _unread_keys_empty(i, m)
        msg = {"role": m["role"], "content": _content(i, m.get("content"))}
        if "name" in m:  # a participant's name: a checkpoint's template may use it
            msg["name"] = _str(f"messages[{i}].name", m["name"])
        out.append(msg)
    return ChatRequest(out, s)


# the engine's argument names (RequestError messages start with one) -> the API field that carries it
_ENGINE_PARAM = {"prompt": "prompt", "prompts": "prompt", "max_tokens": "max_tokens", "temperature": "temperature",
                 "top_k": "top_k", "seed": "seed", "stop_token_ids": "stop_token_ids", "tokenizer": "prompt",
                 "top_p": "top_p", "min_p": "min_p", "presence_penalty": "presence_penalty",
                 "frequency_penalty": "frequency_penalty", "repetition_penalty": "repetition_penalty",
                 "logprobs": "logprobs", "prompt_logprobs": "echo"}


def engine_error(err: RequestError, input_field: str = "prompt", max_tokens_field: str = "max_tokens") -> APIError:
    """The engine's refusal of a request as a 400 naming the field (its message starts ``name: ``); a refusal
    of ``max_tokens`` names the field the client set it with (chat's ``max_completion_tokens`` too)."""
    msg = str(err)
    name = msg.split(":", 1)[0].strip()
    param = _ENGINE_PARAM.get(name, input_field)
    if param == "max_tokens" and max_tokens_field != "max_tokens":
        param, msg = max_tokens_field, max_tokens_field + msg[len(name):]
    if name in ("prompt", "prompts") and input_field != "prompt":  # a chat's prompt is its messages
        msg = input_field + msg[len(name):]
    return APIError(msg, param=input_field if param == "prompt" else param)
