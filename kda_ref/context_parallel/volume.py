"""Bytes a context-parallel prefill moves, for any model config and prompt length: the arithmetic
beside what the engine measures (``CPResult.sent_bytes``).

Per rank and sequence, for ``R`` ranks and ``T`` tokens: per KDA layer one fp32 map ``HV * K * (K + V)``
(independent of ``T``) and a conv tail ``(W - 1) * 3 * H * K``; per MLA layer the rank's ``T / R``
latent rows ``(Dc + Dp)``; and, for comparison, gathering the KDA layers' inputs instead.
Design notes: ``docs/context_parallel.md#bytes-per-rank``.
"""

from __future__ import annotations

from ..model import ModelConfig


def cp_bytes_per_rank(config: ModelConfig, T: int, world_size: int, act_bytes: int = 2) -> dict[str, int]:
    """What one rank contributes to the all-gathers of one prefill of a ``T``-token prompt."""
    c = config
    H, K, W = c.linear_num_heads, c.linear_head_dim, c.short_conv_kernel_size
    n_kda, n_mla = len(c.kda_layer_ids), len(c.mla_layer_ids)
    local = -(-T // world_size)
    maps = n_kda * H * K * (K + K) * 4
    tails = n_kda * (W - 1) * 3 * H * K * act_bytes
    mla = n_mla * local * c.mla_latent_dim * act_bytes
    kda_inputs = n_kda * local * H * (4 * K + 1) * act_bytes  # q, k, v, g per head and beta: gathering instead
    return {"kda_maps": maps, "conv_tails": tails, "mla_rows": mla, "total": maps + tails + mla,
            "kda_inputs_instead": kda_inputs}
