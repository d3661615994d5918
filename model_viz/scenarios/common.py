"""Shared pieces of the prefix-cache pages (prefix vs KV, checkpoint tree, restore paths).

Pure functions, no Streamlit. Every scenario runs the random-weight tiny model
(``ModelConfig.tiny()``: 3 KDA layers, 1 MLA layer) through ``kda_ref.LLM(prefix_cache="radix")``.
The chunk size is :data:`CHUNK` = 16 instead of the engine's default 64, so that prompts of a few
dozen tokens already cross several chunk boundaries (checkpoints land on multiples of the chunk
size) and every scenario computes in well under a second on a CPU.
"""

from __future__ import annotations
import functools
import threading

import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.model import HybridModel, RequestCache
from kda_ref.trace import CacheEvent
from ..i18n import t


MODEL_SEED = 0
CHUNK = 16

# the ops the pages show, in the order an admission goes through them
CACHE_OPS_SHOWN = ("match", "backoff", "copy_on_write", "checkpoint_create", "track", "snapshot", "donate", "evict",
                   "tombstone")


class ScenarioCheckFailed(AssertionError):
    """A fact a page displays (e.g. "caching did not change the output") did not hold for this run."""


def require(cond: bool, msg: str) -> None:
    """An assertion that survives ``python -O``: the pages show only facts that were checked."""
    if not cond:
        raise ScenarioCheckFailed(msg)


# one build per process even when the app's warm-up thread (model_viz.ui.warmup) and a page ask at once
_MODEL_LOCK = threading.Lock()


@functools.lru_cache(maxsize=2)
def _tiny(chunk_size: int) -> HybridModel:
    return HybridModel(ModelConfig.tiny(), seed=MODEL_SEED, chunk_size=chunk_size).eval()


@functools.lru_cache(maxsize=4)
def _trained(chunk_size: int, kind: str) -> HybridModel:
    from kda_ref.train import load_trained

    return load_trained(chunk_size=chunk_size, kind=kind)


def tiny_model(chunk_size: int = CHUNK) -> HybridModel:
    """The random-weight tiny model (seed 0) with the given chunk size, built once per process.

    The engine never writes the model's weights, so one instance serves every scenario."""
    with _MODEL_LOCK:
        return _tiny(chunk_size)


@functools.lru_cache(maxsize=4)
def _small(model: str, chunk_size: int) -> HybridModel:
    from ..families import family

    return HybridModel(family(model).small(), seed=MODEL_SEED, chunk_size=chunk_size).eval()


def small_model(model: str = "kimi_linear", chunk_size: int = CHUNK) -> HybridModel:
    """The random-weight small model of ``model`` (:mod:`model_viz.families`: the tiny model, or K3's tiny
    layout), seed 0, built once per process and chunk size like :func:`tiny_model`."""
    with _MODEL_LOCK:
        return _small(model, chunk_size)


def trained_model(chunk_size: int = CHUNK, kind: str = "kimi_linear") -> HybridModel:
    """A small model trained on the repository's docs (``kind``: ``"kimi_linear"``,
    ``kda_ref/assets/trained_tiny``, or ``"k3"``, the K3 demo), loaded once per process, chunk size and
    kind (shared like :func:`tiny_model`)."""
    with _MODEL_LOCK:
        return _trained(chunk_size, kind)


def docs_prompt(model, chars: int) -> list[int]:
    """BOS and the first ``chars`` characters of ``docs/kda.md`` as byte tokens: text the trained model
    has seen (it always saw BOS first)."""
    import pathlib

    from kda_ref.tokenizer import ByteTokenizer

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "kda.md").read_text(encoding="utf-8")
    return [model.config.bos_token_id, *ByteTokenizer().encode(text[:chars])]


def radix_llm(tracer=None, **kw) -> LLM:
    """An engine with the KDA-aware radix cache on the shared tiny model (page size 1)."""
    kw.setdefault("max_num_batched_tokens", 512)
    return LLM(tiny_model(CHUNK), prefix_cache="radix", chunk_size=CHUNK, tracer=tracer, **kw)


def plain_llm(**kw) -> LLM:
    """The same model without a prefix cache: the reference every cached run is compared with."""
    kw.setdefault("max_num_batched_tokens", 2048)
    kw.setdefault("max_num_seqs", 64)
    return LLM(tiny_model(CHUNK), prefix_cache="none", chunk_size=CHUNK, **kw)


def params(max_tokens: int) -> SamplingParams:
    """Greedy, fixed length, logits kept (to compare a cached run with the reference)."""
    return SamplingParams(max_tokens=max_tokens, ignore_eos=True, return_logits=True)


def text_tokens(text: str, n: int) -> list[int]:
    """Exactly ``n`` byte tokens from ``text`` (repeated if short): readable hover labels."""
    raw = text.encode()
    return list((raw * (n // len(raw) + 1))[:n])


def build_prompt(parts, system: list[int], prompts: list[list[int]], outputs: list[list[int]] | None = None) -> list[int]:
    """A scenario prompt from its parts: ``"sys"`` (the whole system prompt), ``"cut:N"`` (its first
    N tokens), ``"prompt:i"`` (request i's prompt), ``"out:i"`` (request i's prompt and output — a
    later conversation turn) and ``"q:text:N"`` (N tokens of new text)."""
    toks: list[int] = []
    for part in parts:
        kind, _, arg = part.partition(":")
        if kind == "sys":
            toks += system
        elif kind == "cut":
            toks += system[: int(arg)]
        elif kind == "out" and outputs is not None:
            toks += prompts[int(arg)] + outputs[int(arg)]
        elif kind == "prompt":
            toks += prompts[int(arg)]
        elif kind == "q":
            text, _, n = arg.rpartition(":")
            toks += text_tokens(text, int(n))
        else:
            raise ValueError(f"scenario: unknown prompt part {part!r}")
    return toks


def span_text(tokens: list[int], limit: int = 24) -> str:
    """The tokens as text, shortened in the middle when longer than ``limit``."""
    s = "".join(" " if t == 32 else (chr(t) if 33 <= t < 127 else "▪") for t in tokens)
    return s if len(s) <= limit else s[: limit // 2 - 1] + "…" + s[-(limit // 2 - 1):]


def hover(key: str) -> str:
    """A plotly hover template from the strings: they write plotly's ``%{x}`` as ``%{{x}}`` so that
    every string goes through ``str.format`` the same way."""
    return t(key).format() + "<extra></extra>"


def fresh_run(model: HybridModel, tokens: list[int]):
    """A cache-less forward of ``tokens`` from the empty state: ``(kv_rows [L_mla, t, latent],
    recurrent [L_kda, H, K, V])``, the KV rows and the KDA states after the last token, to compare
    with what a prefix cache restores."""
    cache = RequestCache(model.config, 1, max_tokens=len(tokens), page_size=1)
    with torch.no_grad():
        model.forward(torch.tensor(tokens), cache.batch([len(tokens)]), cache.tensors)
    rows = cache.tensors.kv[:, 1:1 + len(tokens), 0]  # sequence 0 owns pages 1..t (page size 1)
    return rows, cache.tensors.recurrent[:, 1].clone()


def rel_error(a, b) -> float:
    """``|a - b| / |b|`` (Frobenius), 0 for an all-zero ``b`` equal to ``a``."""
    den = float(b.float().norm()) or 1.0
    return float((a.float() - b.float()).norm()) / den


def path_states(tree, tokens: list[int]):
    """(boundary, node) for every node with a state on the path of ``tokens`` (no splitting)."""
    out, node, i = [], tree.root, 0
    while i < len(tokens) and tokens[i] in node.children:
        child = node.children[tokens[i]]
        if tokens[i:i + len(child.key)] != child.key:
            break
        node, i = child, i + len(child.key)
        if node.state is not None:
            out.append((i, node))
    return out


def cache_events(events, req_id: int | None = None) -> list[CacheEvent]:
    """The prefix-cache events of a trace, optionally those of one request."""
    return [e for e in events if isinstance(e, CacheEvent) and (req_id is None or e.req_id == req_id)]


def max_abs_diff(a, b) -> float:
    """max |a - b| of two logits tensors (``inf`` when the shapes differ)."""
    if a is None or b is None or tuple(a.shape) != tuple(b.shape):
        return float("inf")
    return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
