"""The scenario of the "Compressed checkpoints" page (``docs/article.md#s5-3``).

The same checkpoint stored fp32, bf16 and int8 (:class:`kda_ref.memory.checkpoint_store.CompressedCheckpoints`,
after SGLang's ``MambaCheckpointPool``): request B restores request A's checkpoint, and the page shows the
bytes, each layer's restore error and B's logits and tokens against a run without prefix cache.
:func:`split_drift` measures the fp32 drift of a split prefill alone; :func:`answers_changed` counts the
answers a lossy dtype changes (:func:`kda_ref.bench.checkpoints.promise`).

Design notes: ``docs/visualizer.md#compressed-checkpoints``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kda_ref import LLM
from kda_ref.memory import PageKind
from kda_ref.memory.codecs import CHECKPOINT_CODECS, checkpoint_bytes
from kda_ref.model import ModelConfig
from ..scenarios import common as cs

DTYPES = ("fp32", "bf16", "int8")
MODELS = ("trained", "random")
SYSTEM = "You are a careful assistant. Answer from the notes only. Notes: kv pairs qJ pP hP wT. "
SYSTEM_LEN = 96  # a multiple of the chunk (16): the checkpoint B restores sits at its end
QUESTION_A, QUESTION_B = "Which value goes with q?", "Which value goes with w?"
QUESTION_LEN = 12
MAX_STEPS = 64
DEFAULT_STEPS = 32
EXACT_TOL = 1e-4  # fp32 restores: cached vs uncached logits


@dataclass
class DtypeRun:
    dtype: str
    bytes_tiny: int  # one checkpoint (all KDA layers) of the page's model, as the engine's pool sizes it
    bytes_48b: int  # the same for Kimi-Linear-48B
    restored_at: int  # the boundary B restored (the engine's state_len)
    layer_error: list[float]  # per KDA layer: |restored - saved| / |saved| of the recurrent state
    restore_exact: bool  # the restored state (recurrent and conv) is the saved one bit for bit
    logit_diff: list[float]  # per generated token: max |logit - reference logit|, up to the first divergence
    tokens: list[int]
    ref_tokens: list[int]
    stats: dict = field(default_factory=dict)

    @property
    def first_divergence(self) -> int | None:
        return next((i for i, (a, b) in enumerate(zip(self.tokens, self.ref_tokens)) if a != b), None)

    @property
    def agreement(self) -> float:
        return sum(a == b for a, b in zip(self.tokens, self.ref_tokens)) / len(self.ref_tokens)


def check_args(model: str, steps: int) -> None:
    if model not in MODELS:
        raise ValueError(f"model: must be one of {MODELS}, got {model!r}")
    if not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise ValueError(f"steps: must be an int in 1..{MAX_STEPS}, got {steps!r}")


def page_model(model: str):
    """The trained tiny model (``kda_ref/assets/trained_tiny``) or the random-weight one, chunk size 16."""
    return cs.trained_model(cs.CHUNK) if model == "trained" else cs.tiny_model(cs.CHUNK)


def prompts() -> tuple[list[int], list[int]]:
    system = cs.text_tokens(SYSTEM, SYSTEM_LEN)
    return system + cs.text_tokens(QUESTION_A, QUESTION_LEN), system + cs.text_tokens(QUESTION_B, QUESTION_LEN)


def _restored(pool, ckpt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What the engine's restore of checkpoint ``ckpt`` writes into a fresh active slot (dequantized if
    compressed): ``(recurrent [L, H, K, V], conv [L, 3D, W-1])``, read back; the slot is freed again."""
    (slot,) = pool.alloc(PageKind.KDA_STATE, 1, "restore probe")
    try:
        pool.restore_checkpoint(ckpt, slot)
        return pool.tensors.recurrent[:, slot].clone(), pool.tensors.conv[:, slot].clone()
    finally:
        pool.free(PageKind.KDA_STATE, [slot])


def _saved(pool, ckpt: int, exact: tuple[torch.Tensor, torch.Tensor] | None):
    """The state the engine saved in checkpoint ``ckpt``, before any compression. An fp32 checkpoint is
    that state (a state slot); a compressed one was made from the same state as the fp32 run's
    checkpoint (``exact``, the same model, prompts and steps), checked: quantising it gives the
    stored bits."""
    if pool.compressed is None:
        return pool.tensors.recurrent[:, ckpt].clone(), pool.tensors.conv[:, ckpt].clone()
    store = pool.compressed
    stored, scale = store.codec.quantise(exact[0])
    cs.require(torch.equal(store.recurrent[:, ckpt], stored) and torch.equal(store.conv[:, ckpt], exact[1])
               and (scale is None or torch.equal(store.scale[:, ckpt], scale)),
               f"{store.codec.name}: the checkpoint was not made from the state the fp32 run saved")
    return exact


def _one(model, dtype: str, steps: int, ref_logits, ref_tokens, exact=None) -> tuple[DtypeRun, tuple]:
    """B restored from a ``dtype`` checkpoint of A at the end of the system prompt, and the state saved
    there (``exact``: the fp32 run's, which a compressed checkpoint must have been made from)."""
    a, b = prompts()
    llm = LLM(model, prefix_cache="radix", chunk_size=cs.CHUNK, checkpoint_dtype=dtype, checkpoint_policy="chunk",
              max_num_batched_tokens=512)
    llm.generate([a], cs.params(1))
    pool = llm.pool
    node = next(n for p, n in cs.path_states(llm.prefix_cache.tree, a) if p == SYSTEM_LEN)
    saved = _saved(pool, node.state, exact)
    restored = _restored(pool, node.state)
    errors = [cs.rel_error(restored[0][i], saved[0][i]) for i in range(saved[0].shape[0])]
    out = llm.generate([b], cs.params(steps))[0]
    stats = llm.stats()
    cs.require(stats["cached_prompt_tokens"] >= SYSTEM_LEN, f"{dtype}: B did not restore the system prompt's checkpoint")
    n = len(out.token_ids)
    upto = next((i for i in range(n) if out.token_ids[i] != ref_tokens[i]), n - 1) + 1
    diffs = [cs.max_abs_diff(out.logits[i], ref_logits[i]) for i in range(upto)]
    run = DtypeRun(dtype=dtype, bytes_tiny=pool.sizes.of(PageKind.CHECKPOINT), bytes_48b=bytes_48b(dtype),
                   restored_at=SYSTEM_LEN, layer_error=errors,
                   restore_exact=torch.equal(restored[0], saved[0]) and torch.equal(restored[1], saved[1]),
                   logit_diff=diffs, tokens=list(out.token_ids), ref_tokens=list(ref_tokens),
                   stats={k: stats[k] for k in ("hits", "cached_prompt_tokens")})
    return run, saved


def bytes_48b(dtype: str) -> int:
    """One checkpoint of Kimi-Linear-48B (20 KDA layers, conv windows in bf16) in ``dtype``."""
    return checkpoint_bytes(ModelConfig.kimi_linear_48b(), dtype, torch.bfloat16)


def run(model: str = "trained", steps: int = DEFAULT_STEPS) -> list[DtypeRun]:
    """One :class:`DtypeRun` per checkpoint dtype, all against the same cache-less reference."""
    check_args(model, steps)
    m = page_model(model)
    a, b = prompts()
    ref = LLM(m, prefix_cache="none", chunk_size=cs.CHUNK).generate([b], cs.params(steps))[0]
    exact, saved = _one(m, DTYPES[0], steps, ref.logits, ref.token_ids)
    runs = [exact] + [_one(m, d, steps, ref.logits, ref.token_ids, saved)[0] for d in DTYPES[1:]]
    cs.require(exact.restore_exact and max(exact.layer_error) == 0.0, "an fp32 restore changed the state")
    cs.require(exact.tokens == exact.ref_tokens and max(exact.logit_diff) <= EXACT_TOL,
               f"an fp32 restore changed the output (max |dlogit| {max(exact.logit_diff):.2e})")
    _, fresh_state = cs.fresh_run(m, a[:SYSTEM_LEN])
    cs.require(cs.rel_error(saved[0], fresh_state) <= 1e-5, "the fp32 checkpoint is not the state after the system prompt")
    cs.require(runs[1].bytes_tiny < exact.bytes_tiny and runs[2].bytes_tiny < runs[1].bytes_tiny,
               "compressed checkpoints are not smaller")
    return runs


def split_drift(model: str = "trained", steps: int = DEFAULT_STEPS) -> float:
    """max |Δlogit| over B's ``steps`` greedy tokens between two runs without any cache: B's prompt
    prefilled in one forward (the page's reference) and prefilled in two, stopping at the checkpoint's
    boundary (``SYSTEM_LEN``) as a restored run does. The part of the fp32 drift that is no
    checkpoint's: the same numbers computed in pieces of other shapes. Checked: the tokens are equal."""
    check_args(model, steps)
    m = page_model(model)
    _, b = prompts()
    whole = LLM(m, prefix_cache="none", chunk_size=cs.CHUNK).generate([b], cs.params(steps))[0]
    split = LLM(m, prefix_cache="none", chunk_size=cs.CHUNK,
                max_num_batched_tokens=SYSTEM_LEN).generate([b], cs.params(steps))[0]
    cs.require(whole.token_ids == split.token_ids, "a split prefill changed B's tokens")
    return max(cs.max_abs_diff(x, y) for x, y in zip(whole.logits, split.logits))


STREAM_SIZES = (12, 24, 48, 96)


def answers_changed(model: str = "trained", requests: int = 24, progress=None) -> list[dict]:
    """Per cache and dtype: the stream's requests, prefix hits, and answers that differ from the request
    run alone (``progress(done, total)`` after each configuration). An fp32 row that changed an answer is
    an engine bug, not a trade-off: it raises."""
    check_args(model, DEFAULT_STEPS)
    if requests not in STREAM_SIZES:
        raise ValueError(f"requests: must be one of {STREAM_SIZES}, got {requests!r}")
    from kda_ref.bench.checkpoints import promise

    rows = promise(page_model(model), num_requests=requests, progress=progress)
    bad = [r for r in rows if not CHECKPOINT_CODECS[r["dtype"]].lossy and r["answers_changed"]]
    cs.require(not bad, f"fp32 checkpoints changed answers: {bad}")
    return rows
