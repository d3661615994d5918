"""``DraftModelDrafter``: a small hybrid model drafts the next ``k`` tokens greedily.

Its cache per request (KDA states, conv windows, MLA KV) is a :class:`~kda_ref.model.RequestCache` outside the
target's pool, as SGLang's draft worker has pools of its own; the draft's state is kept aside before drafting
and put back after, its KV cut to the committed tokens.
Design notes: ``docs/spec_decode.md#the-draft-model``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..model import HybridModel, ModelConfig, RequestCache, load_pretrained
from ..model.config import checkpoint_folder
from ..model.size import cache_unit_bytes
from ..utils import cdiv
from .drafter import Drafter


def load_draft_model(draft_model, target_vocab: int) -> HybridModel:
    """A ``HybridModel``, a ``ModelConfig`` (random weights, seed 0) or a checkpoint folder; its
    vocabulary must be the target's (``ValueError`` naming ``draft_model`` otherwise), which is checked
    from the config before any weight is built or read."""
    if isinstance(draft_model, HybridModel):
        config = draft_model.config
    elif isinstance(draft_model, ModelConfig):
        config = draft_model
    elif isinstance(draft_model, (str, Path)):
        config = ModelConfig.from_json(checkpoint_folder(draft_model, "draft_model"))
    else:
        raise ValueError(f"draft_model: expected a HybridModel, ModelConfig or checkpoint folder, got "
                         f"{type(draft_model).__name__}")
    if config.vocab_size != target_vocab:
        raise ValueError(f"draft_model: its vocabulary has {config.vocab_size} tokens, the target's "
                         f"{target_vocab}; drafts must be the target's token ids")
    if isinstance(draft_model, HybridModel):
        model = draft_model
    elif isinstance(draft_model, ModelConfig):
        model = HybridModel(draft_model, seed=0)
    else:
        model = load_pretrained(draft_model)
    return model.eval()


class DraftModelDrafter(Drafter):
    """A :class:`~kda_ref.speculative.drafter.Drafter` that runs a small model greedily (chains only)."""

    needs_model = True  # speculative="draft" needs draft_model (checked by SpecConfig)

    @classmethod
    def build(cls, spec, draft_model=None, max_tokens: int = 0, target=None) -> "DraftModelDrafter":
        """The drafter ``speculative="draft"`` asks for: ``draft_model`` already loaded, its vocabulary
        checked (:func:`load_draft_model`)."""
        return cls(draft_model, max_tokens=max_tokens)

    def __init__(self, model: HybridModel, max_tokens: int):
        self.model = model
        self.max_tokens = max_tokens  # capacity of one request's draft cache (prompt + output + k)
        self._caches: dict[int, RequestCache] = {}

    def release(self, seq_id: int) -> None:
        """Drop a request's draft cache (it finished, was aborted or preempted)."""
        self._caches.pop(seq_id, None)

    def cache_bytes(self) -> int:
        """Bytes held by the draft caches of all live requests."""
        return sum(sum(t.numel() * t.element_size() for t in (c.tensors.recurrent, c.tensors.conv, c.tensors.kv))
                   for c in self._caches.values())

    def cache_bytes_for(self, num_tokens: int) -> int:
        """Bytes of the draft cache one request of ``num_tokens`` tokens grows to (its pad slot and its
        own: fp32 states, KV pages of 16 tokens; see :meth:`propose`), held outside the engine's pool."""
        state, page = cache_unit_bytes(self.model.config, page_size=16)
        cap = min(self.max_tokens, max(2 * num_tokens, 64))
        return 2 * state + (1 + cdiv(cap, 16)) * page

    @torch.no_grad()
    def propose(self, seq_id: int, tokens: list[int], k: int) -> list[int]:
        """``k`` greedy draft tokens after ``tokens`` (the request's committed tokens)."""
        if k < 1:
            return []
        cache = self._caches.get(seq_id)
        need = len(tokens) + k
        if cache is None or cache.lengths[0] >= len(tokens) or need > cache.max_tokens:
            # new, restarted after a preemption, or out of room: a fresh cache (twice what is needed now,
            # at most the model's limit) that re-reads the request's tokens
            cap = min(self.max_tokens, max(2 * need, 64))
            cache = self._caches[seq_id] = RequestCache(self.model.config, 1, max_tokens=cap, page_size=16)
        # catch up: the tokens committed since the last call, the last one's logits give draft 1
        new = tokens[cache.lengths[0]:]
        logits = self._run(cache, new)
        t = cache.tensors
        saved = t.recurrent[:, 1].clone(), t.conv[:, 1].clone()  # the state after the committed tokens
        committed = cache.lengths[0]
        drafts = []
        for i in range(k):
            drafts.append(int(torch.argmax(logits)))
            if i + 1 < k:
                logits = self._run(cache, drafts[-1:])
        t.recurrent[:, 1], t.conv[:, 1] = saved  # roll the draft back: drafts leave no state behind
        cache.lengths[0] = committed  # and no KV (the rows past it are overwritten later)
        return drafts

    def _run(self, cache: RequestCache, ids: list[int]) -> torch.Tensor:
        batch = cache.batch([len(ids)])
        logits = self.model(torch.tensor(ids, dtype=torch.long), batch, cache.tensors, logits="last")[0]
        cache.advance(batch)
        return logits
