"""``Drafter``: what proposes draft tokens -- the one interface the scheduler drafts through.

SGLang's speculative workers (``speculative/ngram_worker.py``, ``eagle_worker.py``) and vLLM's
proposers (``v1/spec_decode/ngram_proposer.py``, ``eagle.py``) each sit behind one "propose" call; so do
ours: :class:`~kda_ref.speculative.ngram.NgramDrafter` (prompt lookup, which can also propose a tree),
:class:`~kda_ref.speculative.draft.DraftModelDrafter` (a small model with its own rolled-back states) and
:class:`~kda_ref.speculative.mtp_drafter.MTPDrafter` (the target's MTP layer, which also needs the
target's hidden states: ``needs_hidden``, handed over by ``observe``). A new drafter is one class with
these methods and its class attributes (``needs_model``, ``looks_up_suffixes``, ``supports_trees``,
optionally ``needs_target`` and ``needs_hidden``, a ``build`` classmethod), registered under its
``speculative=`` name in :data:`DRAFTERS`; :func:`make_drafter` builds the configured one and
:class:`~kda_ref.speculative.SpecConfig` checks the options against the class, never the name.
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


def _registry() -> dict:
    from .draft import DraftModelDrafter
    from .mtp_drafter import MTPDrafter
    from .ngram import NgramDrafter

    return {"ngram": NgramDrafter, "draft": DraftModelDrafter, "mtp": MTPDrafter}


# speculative= name -> the drafter class (prompt lookup; a small model with its own rolled-back states; the
# target's own MTP layer)
DRAFTERS: dict[str, type] = _registry()


def make_drafter(spec, draft_model=None, max_tokens: int = 0, target=None) -> Drafter:
    """The drafter a :class:`~kda_ref.speculative.SpecConfig` asks for, built by its registered class
    (``draft_model``: already loaded, its vocabulary checked, for a drafter that ``needs_model``;
    ``target``: the served model, for a drafter that reads it -- its MTP layer)."""
    cls = DRAFTERS[spec.method]
    if getattr(cls, "needs_target", False):  # a drafter that reads the served model (its MTP layer)
        return cls.build(spec, draft_model, max_tokens, target=target)
    return cls.build(spec, draft_model, max_tokens)
