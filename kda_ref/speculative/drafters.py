"""The drafter registry: which :class:`~kda_ref.speculative.drafter.Drafter` class each
``speculative=`` name builds, and :func:`make_drafter`. vLLM 0.32 chooses its proposer in
``GPUModelRunner.__init__`` (``vllm/v1/worker/gpu_model_runner.py``) by comparing
``speculative_config.method``; SGLang parses ``--speculative-algorithm`` into ``SpeculativeAlgorithm``
(``srt/speculative/spec_info.py``), whose ``create_worker`` builds the draft worker. It sits above the drafter modules, which
import only the :class:`Drafter` contract, so no module imports one that imports it back."""

from __future__ import annotations

from .drafter import Drafter
from .model_drafter import DraftModelDrafter
from .mtp_drafter import MTPDrafter
from .ngram_drafter import NgramDrafter

# speculative= name -> the drafter class (prompt lookup; a small model with its own rolled-back states; the
# target's own MTP layer). A new drafter subclasses Drafter in its own module and adds its name here.
DRAFTERS: dict[str, type] = {"ngram": NgramDrafter, "draft": DraftModelDrafter, "mtp": MTPDrafter}


def make_drafter(spec, draft_model=None, max_tokens: int = 0, target=None) -> Drafter:
    """The drafter a :class:`~kda_ref.speculative.SpecConfig` asks for, built by its registered class
    (``draft_model``: already loaded, its vocabulary checked, for a drafter that ``needs_model``;
    ``target``: the served model, for a drafter that reads it -- its MTP layer)."""
    cls = DRAFTERS[spec.method]
    if not (isinstance(cls, type) and issubclass(cls, Drafter)):
        raise TypeError(f"speculative: DRAFTERS[{spec.method!r}] is {cls!r}, not a Drafter subclass "
                        f"(kda_ref.speculative.drafter.Drafter declares what the engine calls)")
    return cls.build(spec, draft_model, max_tokens, target=target if cls.needs_target else None)
