"""Speculative decoding: drafters, the acceptance rule, and how a KDA state survives a rejection.

Article concept ``spec.state_rollback``: the summary table's "speculative decoding" row (``docs/article.md#s0``) and the verify
kernel of ``docs/article.md#s6-4``. A KV cache rolls back by truncation; a KDA state cannot be
truncated (``docs/article.md#s2-2``), so the engine verifies the draft with the recurrent kernel
keeping the state after every draft token and commits the state of the last accepted one.

* :mod:`.config` -- :class:`SpecConfig` (``LLM(speculative=..., num_speculative_tokens=...,
  spec_state=...)``), checked before anything is allocated;
* :mod:`.strategy` -- :class:`RollbackStrategy`, the interface of a ``spec_state``: what a verify keeps,
  the slots reserved at admission, the commit of a kept run, its rollback bytes;
* :mod:`.rollback` -- the three strategies of the references and :data:`STRATEGIES`, the registry;
* :mod:`.recoverssm` -- RecoverSSM (vLLM's for Kimi K3): corrections kept, the state rebuilt in closed form;
* :mod:`.drafter` -- the :class:`Drafter` contract; :mod:`.drafters` -- the registry and :func:`make_drafter`;
* :mod:`.ngram_drafter` -- :class:`NgramDrafter`, prompt lookup in the request's own tokens;
* :mod:`.model_drafter` -- :class:`DraftModelDrafter`, a small hybrid model with its own rolled-back states;
* :mod:`.mtp_drafter` -- the target's own MTP layer as the drafter;
* :mod:`.accept` -- greedy acceptance and rejection sampling (the output distribution stays the
  target model's);
* :mod:`.replay` -- ReplaySSM's fold of the kept tokens' inputs into the committed state;
* :mod:`.storage` -- the rollback bytes of each strategy at any model's size.
"""

from ..utils.lazy import lazy_exports

__all__ = ["AcceptResult", "accept_greedy", "accept_greedy_tokens", "accept_rejection", "SPEC_METHODS", "SPEC_STATES",
           "SpecConfig", "spec_config", "Drafter", "make_drafter", "NgramDrafter", "DraftModelDrafter",
           "load_draft_model", "replay_conv", "record_bytes", "rollback_bytes", "STRATEGIES",
           "Commit", "NOTHING", "PerStepStates", "ReplaySSM", "RecoverSSM", "recover", "RollbackStrategy", "StateSlots",
           "rollback_strategy"]

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__ = lazy_exports(__name__, {
    '.accept': ['AcceptResult', 'accept_greedy', 'accept_greedy_tokens', 'accept_rejection'],
    '.config': ['SPEC_METHODS', 'SPEC_STATES', 'STRATEGIES', 'SpecConfig', 'rollback_strategy', 'spec_config'],
    '.model_drafter': ['DraftModelDrafter', 'load_draft_model'],
    '.drafter': ['Drafter'],
    '.drafters': ['make_drafter'],
    '.ngram_drafter': ['NgramDrafter'],
    '.replay': ['replay_conv'],
    '.recoverssm': ['RecoverSSM', 'recover'],
    '.rollback': ['NOTHING', 'Commit', 'PerStepStates', 'ReplaySSM', 'RollbackStrategy', 'StateSlots'],
    '.storage': ['record_bytes', 'rollback_bytes'],
})
