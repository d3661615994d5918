"""How many bytes each rollback strategy keeps for one speculating request, at any model's size.

* ``per_step`` and ``slots``: ``1 + k`` states (recurrent state and conv window of every KDA layer;
  per_step only while the request verifies, slots all the time);
* ``replay``: ``1 + k`` token records, each the conv input (``q | k | v`` projections), ``k``,
  ``v``, ``g`` (``H x K`` each) and ``beta`` (``H``) of every KDA layer, in fp32.
"""

from __future__ import annotations

from ..model import ModelConfig
from .rollback import rollback_strategy


def record_bytes(cfg: ModelConfig) -> int:
    """ReplaySSM's record of one token, all KDA layers, fp32."""
    H, K, n = cfg.linear_num_heads, cfg.linear_head_dim, len(cfg.kda_layer_ids)
    return n * 4 * (3 * H * K + H * K + H * K + H * K + H)


def rollback_bytes(cfg: ModelConfig, k: int, state, state_bytes: int | None = None) -> int:
    """Rollback storage of one request verifying ``k`` drafts under ``state`` (a ``spec_state`` name or a
    :class:`~kda_ref.speculative.RollbackStrategy`): its inputs per token if the strategy keeps no states,
    else a state per token; ``state_bytes`` defaults to the config's fp32-state / bf16-conv arithmetic
    (``ModelConfig.state_bytes``)."""
    if not rollback_strategy(state).record.keeps_step_states:
        return (1 + k) * record_bytes(cfg)
    per_state = cfg.state_bytes()["kda_per_seq"] if state_bytes is None else state_bytes
    return (1 + k) * per_state
