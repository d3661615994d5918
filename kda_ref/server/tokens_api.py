"""vLLM's token endpoints and ``/version``, in vLLM's shapes (0.32.0: ``vllm/entrypoints/serve/tokenize/protocol.py``:
``TokenizeCompletionRequest`` / ``TokenizeChatRequest`` -> ``TokenizeResponse {count, max_model_len, tokens,
token_strs}``, ``DetokenizeRequest`` -> ``DetokenizeResponse {prompt}``; ``GET /version`` -> ``{version}``).

``POST /tokenize`` takes ``prompt`` or ``messages`` (``add_generation_prompt``, ``add_special_tokens``,
``return_token_strs``); ``POST /detokenize`` takes ``tokens``. A ``model`` other than the one served is a
404; bad input a 400 naming the field.
Design notes (the defaults, and where they differ from vLLM's): ``docs/serving.md#2-the-endpoints``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata

from .logprobs import shown_text, token_text
from .protocol import APIError, check_model, parse_chat, render_chat

MAX_TOKENIZE_CHARS = 1 << 20  # a prompt's characters (the body bound covers it; named for the error)


def version() -> str:
    """This package's version (the checkout's, when it is not installed)."""
    try:
        return importlib.metadata.version("kda-viz")
    except importlib.metadata.PackageNotFoundError:
        return "0.1.0"


def _known(body, fields: set[str]) -> dict:
    if not isinstance(body, dict):
        raise APIError("the request body must be a JSON object")
    extra = sorted(set(body) - fields)
    if extra:
        raise APIError(f"Unrecognized request argument supplied: {str(extra[0])[:60]}", param=str(extra[0])[:60])
    return body


def _flag(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, default)
    if not isinstance(v, bool):
        raise APIError(f"{name}: must be true or false", param=name)
    return v


def tokenize(checker, template, body, model_name: str) -> dict:
    """``/tokenize``'s answer (module docstring)."""
    body = _known(body, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
                         "return_token_strs"})
    check_model(body.get("model"), model_name)
    tok = checker.tokenizer
    if tok is None:
        raise APIError(f"this model has no tokenizer ({checker.tokenizer_note})", status=400)
    special = _flag(body, "add_special_tokens", True)
    if "messages" in body:
        messages = parse_chat({"messages": body["messages"]}).messages
        text = render_chat(template, messages, _flag(body, "add_generation_prompt", True))
    elif isinstance(body.get("prompt"), str):
        if "add_generation_prompt" in body:
            raise APIError("add_generation_prompt: only with messages", param="add_generation_prompt")
        text = body["prompt"]
    else:
        raise APIError("prompt: a string is required (or messages)", param="prompt")
    if len(text) > MAX_TOKENIZE_CHARS:
        raise APIError(f"prompt: {len(text):,} characters; at most {MAX_TOKENIZE_CHARS:,}", param="prompt")
    try:
        ids = list(tok.encode(text))
    except UnicodeError as e:
        raise APIError(f"prompt: the text cannot be encoded ({e})", param="prompt") from None
    bos = checker.config.bos_token_id
    if special and bos is not None and bos < checker.config.vocab_size:
        ids = [bos, *ids]
    out = {"count": len(ids), "max_model_len": checker.max_model_len, "tokens": ids, "token_strs": None}
    if _flag(body, "return_token_strs", False):  # each token's text; a special token by its name (<bos>)
        out["token_strs"] = [token_text(tok, i) for i in ids]
    return out


def detokenize(checker, body, model_name: str) -> dict:
    """``/detokenize``'s answer: ``{"prompt": text}``, special tokens kept by name (``<bos>``), as vLLM's
    renderer decodes (``tokenizer.decode`` with Hugging Face's default ``skip_special_tokens=False``)."""
    body = _known(body, {"model", "tokens"})
    check_model(body.get("model"), model_name)
    ids, V = body.get("tokens"), checker.config.vocab_size
    if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < V for i in ids):
        raise APIError(f"tokens: must be a list of token ids in [0, {V})", param="tokens")
    if checker.tokenizer is None:
        raise APIError(f"this model has no tokenizer ({checker.tokenizer_note})", status=400)
    return {"prompt": shown_text(checker.tokenizer, ids)}


async def off_loop(fn, *args):
    """``fn(*args)`` in a worker thread: tokenising a long text never stalls the other connections."""
    return await asyncio.to_thread(fn, *args)
