"""Speculative decoding: drafters, the acceptance rule, and how a KDA state survives a rejection.

Article concept ``spec.state_rollback``: the summary table's "speculative decoding" row (``docs/article.md#s0``) and the verify
kernel of ``docs/article.md#s6-4``. A KDA state cannot be truncated (``docs/article.md#s2-2``), so the verify
keeps the state after every draft token and commits the last accepted one's.
Modules: :mod:`.config` (:class:`SpecConfig`); :mod:`.strategy`, :mod:`.rollback`, :mod:`.recoverssm`, :mod:`.replay`
(the ``spec_state`` strategies); :mod:`.drafter`, :mod:`.drafters` (contract, registry); :mod:`.ngram_drafter`,
:mod:`.model_drafter`, :mod:`.mtp_drafter`, :mod:`.mtp_static` (the drafters); :mod:`.accept` (greedy and rejection
sampling); :mod:`.tree` (draft trees).
Design notes: ``docs/spec_decode.md#one-step``.
"""

from ..utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.accept': ['AcceptResult', 'accept_greedy', 'accept_greedy_tokens', 'accept_rejection'],
    '.config': ['SPEC_METHODS', 'SPEC_STATES', 'STRATEGIES', 'SpecConfig', 'rollback_bytes', 'rollback_strategy',
                'spec_config'],
    '.model_drafter': ['DraftModelDrafter', 'load_draft_model'],
    '.drafter': ['Drafter'],
    '.drafters': ['make_drafter'],
    '.ngram_drafter': ['NgramDrafter'],
    '.replay': ['replay_conv'],
    '.recoverssm': ['RecoverSSM', 'recover'],
    '.rollback': ['NOTHING', 'Commit', 'PerStepStates', 'ReplaySSM', 'RollbackStrategy', 'StateSlots',
                  'replay_record_bytes'],
})
