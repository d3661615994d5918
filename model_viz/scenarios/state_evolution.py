"""The data side of the "KDA state evolution" page: prompt checks, the model, the trace.

The page (``app_pages/state_evolution.py``) only wires widgets to these functions and caches their
results; everything it computes is here, so tests reach it without Streamlit.
"""

from __future__ import annotations
import torch
from kda_ref.state_trace import KDAStateTrace, RecoveryCurve, recovery_curve, trace_kda_states
from kda_ref.model import HybridModel, ModelConfig
from kda_ref.tokenizer import ByteTokenizer
from ..i18n import LocalizedError


MAX_PROMPT_BYTES = 256

# an associative-recall prompt in the format the shipped model was trained on: key-value pairs
# ("qJ": key q, value J), then "|" and queries whose answers the state must retrieve
DEFAULT_PROMPT = "qJ pP hP wT |hP qJ wT pP"
_TOKENIZER = ByteTokenizer()


class PromptError(LocalizedError):
    """A prompt the page cannot run (empty, too long). Carries an i18n key for the message."""


def encode_prompt(text: str | None, max_bytes: int = MAX_PROMPT_BYTES) -> list[int]:
    """Byte-token ids of ``text``; :class:`PromptError` if it is empty (or only whitespace) or too long."""
    if text is None or not text.strip():
        raise PromptError("state_evolution.err.empty")
    ids = _TOKENIZER.encode(text)
    if len(ids) > max_bytes:
        raise PromptError("state_evolution.err.too_long", n=len(ids), max_bytes=max_bytes)
    return ids


def build_model(seed: int | None = None, family: str = "kimi_linear") -> HybridModel:
    """The model the page shows: a small hybrid model trained in this repo (3 KDA + 1 MLA layers) in
    ``family``'s layout (``kda_ref/assets/trained_tiny``, or the K3 demo); with ``seed``, the family's
    random-weight small model instead."""
    from ..families import family as family_of

    fam = family_of(family)
    if seed is None:
        from .common import trained_model

        return trained_model(chunk_size=64, kind=fam.trained_kind)  # shared per process; already in eval mode
    return HybridModel(fam.small(), seed=seed).eval()


def trace_prompt(model: HybridModel, text: str) -> KDAStateTrace:
    """Check and encode ``text``, then record every KDA layer's state after every token."""
    ids = encode_prompt(text)
    bos = model.config.bos_token_id
    if bos is not None and bos < model.config.vocab_size:
        ids = [bos, *ids]  # the trained model always saw BOS first
    with torch.no_grad():
        return trace_kda_states(model, ids)


def is_recall_prompt(trace: KDAStateTrace) -> bool:
    """Whether the traced prompt is in the recall format the trained model knows."""
    from kda_ref.train.data import parse_recall

    return parse_recall(trace.tokens) is not None


def recall_probe(model: HybridModel, trace: KDAStateTrace, layer: int, head: int) -> list[dict] | None:
    """For a recall prompt (``<bos> kV kV ... | k k ...``): per query, how well the state's readout
    for the query's vector matches the value its pair wrote, ``|cos(S_t^T q, v)|`` over all tokens
    (``kda_ref.train.probe.retrieval_curve``). ``None`` when the prompt is not a recall prompt."""
    from kda_ref.train.data import parse_recall
    from kda_ref.train.probe import retrieval_curve

    sample = parse_recall(trace.tokens)
    if sample is None:
        return None
    with torch.no_grad():
        return [retrieval_curve(model, sample, layer, head, query=j, trace=trace)
                for j in range(len(sample.query_pos))]


def clamp_step(step: int | None, num_tokens: int) -> int:
    """A token index valid for a prompt of ``num_tokens`` tokens (the last one if out of range)."""
    if step is None:
        return 0
    return max(0, min(int(step), num_tokens - 1))


def state_size_facts(config: ModelConfig, num_tokens: int) -> dict:
    """Numbers for the size caption: one head's state, one layer's, the conv window (KiB)."""
    b = config.state_bytes()
    H, D = config.linear_num_heads, config.linear_head_dim
    return {
        "K": D,
        "V": D,
        "head_kib": b["kda_recurrent_per_layer"] / H / 1024,
        "layer_kib": b["kda_recurrent_per_layer"] / 1024,
        "conv_kib": b["kda_conv_per_layer"] / 1024,
        "T": num_tokens,
    }


MAX_RECOVERY_STEPS = 16


def recovery(trace: KDAStateTrace, layer: int, t: int, steps: int) -> RecoveryCurve | None:
    """Try to run the state after token ``t`` back ``steps`` tokens (at most ``t`` and
    :data:`MAX_RECOVERY_STEPS`), in fp32 and fp64 (:func:`kda_ref.state_trace.recovery_curve`).
    ``None`` at ``t = 0``: before the first token there is only the zero state."""
    steps = min(int(steps), int(t), MAX_RECOVERY_STEPS)
    if steps < 1:
        return None
    return recovery_curve(trace, layer, int(t), steps)
