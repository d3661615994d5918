"""How many bytes each rollback strategy keeps for one speculating request, at any model's size.

Each strategy answers for itself (:meth:`~kda_ref.speculative.strategy.RollbackStrategy.request_bytes`):
``1 + k`` states for ``per_step`` and ``slots``, ``1 + k`` fp32 token records for ``replay`` and ``recoverssm``.
Design notes (the table): ``docs/spec_decode.md#one-step``.
"""

from __future__ import annotations

from ..model import ModelConfig
from .config import rollback_strategy
from .rollback import replay_record_bytes


def record_bytes(cfg: ModelConfig) -> int:
    """ReplaySSM's record of one token, all KDA layers, fp32."""
    return replay_record_bytes(cfg)


def rollback_bytes(cfg: ModelConfig, k: int, state, state_bytes: int | None = None) -> int:
    """Rollback storage of one request verifying ``k`` drafts under ``state`` (a ``spec_state`` name or a
    :class:`~kda_ref.speculative.RollbackStrategy`); ``state_bytes`` (one state, all KDA layers) defaults
    to the config's fp32-state / bf16-conv arithmetic (``ModelConfig.state_bytes``)."""
    per_state = cfg.state_bytes()["kda_per_seq"] if state_bytes is None else state_bytes
    return rollback_strategy(state).request_bytes(cfg, k, per_state)
