"""Log-probabilities in OpenAI's two shapes, from the engine's per-token entries
(:func:`kda_ref.engine.sampling.token_logprobs`: ``{"token", "logprob", "rank", "top": [(id, logprob)]}``,
the model's own fp32 log-softmax, as vLLM returns them by default).

* completions (legacy): ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``, one entry per
  token (with ``echo`` the prompt's first, its first ``None``); ``text_offset`` by vLLM's rule
  (``OpenAIServingCompletion._create_completion_logprobs``), the prompt shown by :func:`shown_text`;
* chat: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}``.

Design notes: ``docs/serving.md#2-the-endpoints``.
"""

from __future__ import annotations

from ..tokenizer import ByteTokenizer


def token_text(tokenizer, token: int) -> str:
    """One token's text: decoded alone, or its name when that is empty (a special token)."""
    text = tokenizer.decode([token])
    return text if text else tokenizer.token_str(token)


def shown_text(tokenizer, ids: list[int]) -> str:
    """``ids`` decoded with their special tokens kept, by name (Hugging Face's ``decode`` with
    ``skip_special_tokens=False``): an echoed prompt as its tokens show it, ``<bos>`` first. Runs of
    ordinary tokens decode together, so a multi-byte character split over byte tokens comes out whole."""
    out, run = [], []
    for t in ids:
        if tokenizer.decode([t]):
            run.append(t)
            continue
        out += [tokenizer.decode(run), token_text(tokenizer, t)]
        run = []
    return "".join(out) + tokenizer.decode(run)


def token_bytes(tokenizer, token: int) -> list[int]:
    """The UTF-8 bytes a token stands for (the byte itself for a byte token)."""
    if isinstance(tokenizer, ByteTokenizer) and 0 <= token < 256:
        return [token]
    return list(token_text(tokenizer, token).encode("utf-8"))


def completion_logprobs(tokenizer, ids: list[int], entries: list[dict | None]) -> dict:
    """The completions shape for tokens ``ids`` with their ``entries`` (None where there is no logprob)."""
    tokens = [token_text(tokenizer, t) for t in ids]
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    top = []
    for e in entries:
        if e is None:
            top.append(None)
            continue
        d = {token_text(tokenizer, i): lp for i, lp in e["top"]}
        d.setdefault(token_text(tokenizer, e["token"]), e["logprob"])
        top.append(d)
    return {"tokens": tokens, "token_logprobs": [None if e is None else e["logprob"] for e in entries],
            "top_logprobs": top, "text_offset": offsets}


def chat_logprobs(tokenizer, entries: list[dict]) -> dict:
    """The chat shape for the generated tokens' ``entries``."""
    def one(token: int, lp: float) -> dict:
        return {"token": token_text(tokenizer, token), "logprob": lp, "bytes": token_bytes(tokenizer, token)}

    return {"content": [{**one(e["token"], e["logprob"]), "top_logprobs": [one(i, lp) for i, lp in e["top"]]}
                        for e in entries]}
