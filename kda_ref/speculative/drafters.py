"""The drafter registry: which :class:`~kda_ref.speculative.drafter.Drafter` class each
``speculative=`` name builds, and :func:`make_drafter`. vLLM 0.32 chooses its proposer in
``GPUModelRunner.__init__`` (``vllm/v1/worker/gpu_model_runner.py``) by comparing
``speculative_config.method``; SGLang parses ``--speculative-algorithm`` into ``SpeculativeAlgorithm``
(``srt/speculative/spec_info.py``), whose ``create_worker`` builds the draft worker. It names the drafter
modules rather than importing them (:class:`~kda_ref.utils.lazy.LazyRegistry`), so the configuration that
offers their names imports without torch."""

from __future__ import annotations

from ..utils.lazy import LazyRegistry
from .drafter import Drafter

# speculative= name -> the drafter class (prompt lookup; a small model with its own rolled-back states; the
# target's own MTP layer), imported when it is looked up: the names are SpecConfig's choices, read without
# torch. A new drafter subclasses Drafter in its own module and adds its name here (or registers the class itself).
DRAFTERS = LazyRegistry({"ngram": "kda_ref.speculative.ngram_drafter:NgramDrafter",
                         "draft": "kda_ref.speculative.model_drafter:DraftModelDrafter",
                         "mtp": "kda_ref.speculative.mtp_drafter:MTPDrafter"})


def make_drafter(spec, draft_model=None, max_tokens: int = 0, target=None) -> Drafter:
    """The drafter a :class:`~kda_ref.speculative.SpecConfig` asks for, built by its registered class
    (``draft_model``: already loaded, its vocabulary checked, for a drafter that ``needs_model``;
    ``target``: the served model, for a drafter that reads it -- its MTP layer)."""
    cls = DRAFTERS[spec.method]
    if not (isinstance(cls, type) and issubclass(cls, Drafter)):
        raise TypeError(f"speculative: DRAFTERS[{spec.method!r}] is {cls!r}, not a Drafter subclass "
                        f"(kda_ref.speculative.drafter.Drafter declares what the engine calls)")
    return cls.build(spec, draft_model, max_tokens, target=target if cls.needs_target else None)
