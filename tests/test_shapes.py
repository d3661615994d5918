"""The shapes written in one place (:mod:`kda_ref.model.shapes`) are the modules' shapes, for Kimi-Linear,
K3 and each K3 switch on its own, and the size and cost arithmetic read them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kda_ref.cache.cost import CostModel
from kda_ref.model import HybridModel, ModelConfig, parameter_count
from kda_ref.model.shapes import elements, model_shapes

K3 = ModelConfig.k3_micro()
VARIANTS = {
    "kimi_linear": ModelConfig.micro(),
    "k3": K3,
    "k3_low_rank_kda_gate": dataclasses.replace(K3, use_full_rank_gate=False),
    "k3_softplus_gate": dataclasses.replace(K3, gate_lower_bound=None),
    "k3_plain_query": dataclasses.replace(K3, q_lora_rank=None),
    "k3_no_mla_gate": dataclasses.replace(K3, mla_use_output_gate=False),
    "k3_full_width_moe": dataclasses.replace(K3, routed_expert_hidden_size=None, latent_moe_use_norm=False),
    "k3_no_latent_norm": dataclasses.replace(K3, latent_moe_use_norm=False),
    "k3_plain_residual": dataclasses.replace(K3, attn_res_block_size=None),
    "kimi_linear_with_mtp": dataclasses.replace(ModelConfig.micro(), num_nextn_predict_layers=2),
}


def _built(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):  # shapes only: nothing allocated
        model = HybridModel(config, seed=None)
    return {k: tuple(v.shape) for k, v in model.state_dict(keep_vars=True).items()}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_tensor_has_the_shape_written_in_shapes(name):
    config = VARIANTS[name]
    built, written = _built(config), model_shapes(config)
    assert built == written
    assert parameter_count(config) == (elements(written), len(written))


def test_the_cost_model_prices_the_written_matmuls():
    """A KDA layer's projection FLOPs move with its output gate's shape: the full-rank gate costs
    ``2·d·D`` where the low-rank one costs ``2·(d·K + K·D)``."""
    full, low = CostModel(K3), CostModel(VARIANTS["k3_low_rank_kda_gate"])
    d, H, K = K3.hidden_size, K3.linear_num_heads, K3.linear_head_dim
    assert full.kda_flops_per_token - low.kda_flops_per_token == 2 * d * H * K - 2 * (d * K + K * H * K)
    plain = CostModel(VARIANTS["k3_plain_query"])
    qk = K3.qk_nope_head_dim + K3.qk_rope_head_dim
    r, n = K3.q_lora_rank, K3.num_attention_heads
    assert full.mla_proj_flops_per_token - plain.mla_proj_flops_per_token == 2 * (d * r + r * n * qk) - 2 * d * n * qk
