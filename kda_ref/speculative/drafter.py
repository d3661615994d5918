"""``Drafter``: what proposes draft tokens -- the one interface the scheduler drafts through.

SGLang's speculative workers (``speculative/ngram_worker.py``, ``eagle_worker.py``) and vLLM's
proposers (``v1/spec_decode/ngram_proposer.py``, ``eagle.py``) each sit behind one "propose" call; so do
ours: :class:`~kda_ref.speculative.ngram.NgramDrafter` (prompt lookup, which can also propose a tree)
and :class:`~kda_ref.speculative.draft.DraftModelDrafter` (a small model with its own rolled-back
states). A new drafter is one class with these methods; :func:`make_drafter` builds the configured one.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Drafter(Protocol):
    # True when the drafter also has ``propose_tree(seq_id, tokens, k, width) -> DraftTree``: up to ``width``
    # candidate continuations of at most ``k`` tokens (the scheduler asks for a tree only then)
    supports_trees: bool

    def propose(self, seq_id: int, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens to follow ``tokens`` (the request's prompt and output so far)."""

    def release(self, seq_id: int) -> None:
        """Forget the request (it finished, was aborted or preempted)."""


def make_drafter(spec, draft_model=None, max_tokens: int = 0) -> Drafter:
    """The drafter a :class:`~kda_ref.speculative.SpecConfig` asks for: prompt lookup for ``"ngram"``,
    ``draft_model`` (already loaded, vocabulary checked) for ``"draft"``."""
    if spec.method == "draft":
        from .draft import DraftModelDrafter

        return DraftModelDrafter(draft_model, max_tokens=max_tokens)
    from .ngram import NgramDrafter

    return NgramDrafter(spec.prompt_lookup_min, spec.prompt_lookup_max)
