"""vLLM's token endpoints and ``/version``, in vLLM's shapes (``vllm/entrypoints/openai/protocol.py``:
``TokenizeCompletionRequest`` / ``TokenizeChatRequest`` -> ``TokenizeResponse {count, max_model_len, tokens,
token_strs}``, ``DetokenizeRequest`` -> ``DetokenizeResponse {prompt}``; ``GET /version`` -> ``{version}``).
Load tools count tokens with them when they cannot load the tokenizer themselves.

``POST /tokenize`` takes ``prompt`` (text; ``add_special_tokens``, default true, puts the model's BOS first
as the engine does for a text prompt) or ``messages`` (rendered by the chat template first, as
``/v1/chat/completions`` renders them); ``return_token_strs`` adds each token's text. ``POST /detokenize``
takes ``tokens``. Each is a 400 naming the field for bad input; the work runs off the event loop.
"""

from __future__ import annotations

import asyncio
import importlib.metadata

from .protocol import APIError, parse_chat

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


def tokenize(checker, template, body) -> dict:
    """``/tokenize``'s answer (module docstring)."""
    body = _known(body, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
                         "return_token_strs"})
    tok = checker.tokenizer
    if tok is None:
        raise APIError(f"this model has no tokenizer ({checker.tokenizer_note})", status=400)
    if "messages" in body:
        text, special = template.render(parse_chat({"messages": body["messages"]}).messages), True
    elif isinstance(body.get("prompt"), str):
        text, special = body["prompt"], _flag(body, "add_special_tokens", True)
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
    if _flag(body, "return_token_strs", False):
        out["token_strs"] = [tok.decode([i]) for i in ids]
    return out


def detokenize(checker, body) -> dict:
    """``/detokenize``'s answer: ``{"prompt": text}``."""
    body = _known(body, {"model", "tokens"})
    ids, V = body.get("tokens"), checker.config.vocab_size
    if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < V for i in ids):
        raise APIError(f"tokens: must be a list of token ids in [0, {V})", param="tokens")
    if checker.tokenizer is None:
        raise APIError(f"this model has no tokenizer ({checker.tokenizer_note})", status=400)
    return {"prompt": checker.tokenizer.decode(ids)}


async def off_loop(fn, *args):
    """``fn(*args)`` in a worker thread: tokenising a long text never stalls the other connections."""
    return await asyncio.to_thread(fn, *args)
