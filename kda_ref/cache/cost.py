"""FLOP and byte model of the hybrid (KDA, MLA, dense MLP, MoE) used to value cache entries.

``docs/article.md#s9-2`` (concept ``cache.checkpoint_density``): a cached state is worth the prefill
compute it saves and costs its bytes -- Marconi's *FLOPs saved per byte* (Pan et al., MLSys 2025;
``utils.py`` of its released simulator) with the arithmetic of our own hybrid, read off a
:class:`~kda_ref.model.ModelConfig` and the weights' shapes (:mod:`kda_ref.model.shapes`).
``prefill_seconds`` turns FLOPs into an estimated time-to-first-token (``peak_flops`` at ``mfu``, plus
one state restore at ``hbm_bytes_per_s``): assumptions for comparing policies, not measurements.

Design notes: ``docs/block_cache.md#the-flop-and-byte-model-cachecheckpoint_density``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from ..model.config import ModelConfig
from ..model.shapes import dense_shapes, expert_shapes, kda_shapes, matmul_flops, mla_shapes, moe_shapes, numbers


@dataclass(frozen=True)
class CostModel:
    config: ModelConfig
    dtype_bytes: int = 2  # KV and conv storage (bf16 as served); the recurrent state is fp32
    peak_flops: float = 989e12
    mfu: float = 0.4
    hbm_bytes_per_s: float = 4.8e12

    # ---- per-token constants --------------------------------------------------------------------
    @cached_property
    def _numbers(self) -> dict:
        return numbers(self.config)

    @cached_property
    def kda_flops_per_token(self) -> int:
        """One KDA layer, one token: its projections (:func:`~kda_ref.model.shapes.kda_shapes`' matmuls), the
        recurrence ``8·H·K·V`` and the short conv ``2·W·3·H·K``."""
        c = self.config
        H, K, W = c.linear_num_heads, c.linear_head_dim, c.short_conv_kernel_size
        return matmul_flops(kda_shapes(self._numbers)) + 8 * H * K * K + 2 * W * 3 * H * K

    @cached_property
    def mla_proj_flops_per_token(self) -> int:
        """One MLA layer's projections for one token (:func:`~kda_ref.model.shapes.mla_shapes`' matmuls)."""
        return matmul_flops(mla_shapes(self._numbers))

    @cached_property
    def mla_attn_flops_per_position(self) -> int:
        """Score + value FLOPs of one query against one cached position, all heads."""
        c = self.config
        return 2 * c.num_attention_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim)

    @cached_property
    def mlp_flops_per_token(self) -> int:
        """All layers' MLP / MoE FLOPs for one token: a dense MLP's matmuls, or an MoE's router, shared expert
        and latent projections plus ``top_k`` routed experts."""
        c, n = self.config, self._numbers
        moe = matmul_flops(moe_shapes(n)) + c.num_experts_per_token * matmul_flops(expert_shapes(n))
        dense = matmul_flops(dense_shapes(c.hidden_size, c.intermediate_size))
        return sum(moe if c.is_moe_layer(layer) else dense for layer in range(c.num_hidden_layers))

    @cached_property
    def linear_flops_per_token(self) -> int:
        """Everything that does not depend on the position: KDA layers, MLA projections, MLPs."""
        c = self.config
        return (len(c.kda_layer_ids) * self.kda_flops_per_token + len(c.mla_layer_ids) * self.mla_proj_flops_per_token
                + self.mlp_flops_per_token)

    @cached_property
    def _sizes(self):
        from ..memory.pool import unit_sizes  # the pool's own arithmetic: one source of truth

        return unit_sizes(self.config, 1, {2: torch.bfloat16, 4: torch.float32}[self.dtype_bytes])

    @property
    def state_bytes(self) -> int:
        return self._sizes.state_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self._sizes.kv_page_bytes

    @cached_property
    def _mla_attn_per_key(self) -> int:
        return len(self.config.mla_layer_ids) * self.mla_attn_flops_per_position

    # ---- spans ---------------------------------------------------------------------------------------
    def prefill_flops(self, start: int, end: int) -> int:
        """FLOPs to prefill tokens ``[start, end)`` on top of ``start`` cached tokens."""
        if end <= start:
            return 0
        n = end - start
        # sum of the positions p = start .. end-1 each query attends to (p + 1 keys, itself included)
        keys = (start + end + 1) * n // 2
        return n * self.linear_flops_per_token + self._mla_attn_per_key * keys

    def kv_bytes(self, num_tokens: int) -> int:
        return num_tokens * self.kv_bytes_per_token

    def prefill_seconds(self, start: int, end: int, restored_states: int = 0) -> float:
        """Estimated prefill time of ``[start, end)``: compute at ``mfu`` of peak, plus copying
        ``restored_states`` states (copy-on-write restores) at HBM bandwidth."""
        return (self.prefill_flops(start, end) / (self.peak_flops * self.mfu)
                + restored_states * 2 * self.state_bytes / self.hbm_bytes_per_s)
