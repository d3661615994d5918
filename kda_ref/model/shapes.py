"""Every weight's shape, from the config's numbers alone: the one place the model's shapes are written
down outside the modules that hold them.

Read by :mod:`kda_ref.model.size` and :class:`~kda_ref.cache.cost.CostModel`; ``tests/test_shapes.py``
checks :func:`model_shapes` against built models. Each block function takes the :func:`numbers` of a
config and returns ``{name: shape}`` (checkpoint names relative to the block), O(1) in the number of
layers and experts; :func:`matmul_flops` counts a token's FLOPs. Design notes: ``docs/model.md#shapes-and-size``.
"""

from __future__ import annotations

import math

Shape = tuple[int, ...]

# the ModelConfig fields a shape depends on (the others are flags, ids and layer lists)
SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "linear_num_heads", "linear_head_dim",
               "short_conv_kernel_size", "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim",
               "qk_rope_head_dim", "v_head_dim", "intermediate_size", "moe_intermediate_size", "num_experts",
               "num_shared_experts", "q_lora_rank", "routed_expert_hidden_size", "num_nextn_predict_layers")


def numbers(config) -> dict:
    """The numbers the block functions read: :data:`SIZE_FIELDS`, the switches that change shapes, and the
    layer counts ``n_kda``, ``n_mla``, ``n_moe`` (MoE layers among them) and ``n_mtp``."""
    d = {f: getattr(config, f) for f in SIZE_FIELDS}
    L = config.num_hidden_layers
    moe = max(0, L - config.first_k_dense_replace) if config.num_experts > 0 else 0
    d.update(n_kda=len(config.kda_layers), n_mla=len(config.full_attn_layers), n_moe=moe,
             n_mtp=config.num_nextn_predict_layers, full_rank_gate=config.use_full_rank_gate,
             k3_layout=config.is_k3, mla_gate=config.mla_use_output_gate, latent_norm=config.latent_moe_use_norm,
             attn_res=bool(config.attn_res_block_size), top_k=config.num_experts_per_token)
    return d


def kda_shapes(n: dict) -> dict[str, Shape]:
    """One KDA layer's ``self_attn.*`` (:class:`~kda_ref.model.kda_layer.KDAAttention`)."""
    d, H, K, W = n["hidden_size"], n["linear_num_heads"], n["linear_head_dim"], n["short_conv_kernel_size"]
    D = H * K
    s = {f"{x}_proj.weight": (D, d) for x in "qkv"}
    s.update({f"{x}_conv1d.weight": (D, 1, W) for x in "qkv"})
    s["A_log"] = (max(H, K),) if n["k3_layout"] else (1, 1, H, 1)  # K3 ships it padded to the head dim
    s.update({"dt_bias": (D,), "f_a_proj.weight": (K, d), "f_b_proj.weight": (D, K), "b_proj.weight": (H, d)})
    s.update({"g_proj.weight": (D, d)} if n["full_rank_gate"] else {"g_a_proj.weight": (K, d), "g_b_proj.weight": (D, K)})
    s.update({"o_norm.weight": (K,), "o_proj.weight": (d, D)})
    return s


def mla_shapes(n: dict) -> dict[str, Shape]:
    """One MLA layer's ``self_attn.*`` (:class:`~kda_ref.model.mla_layer.MLAAttention`)."""
    d, h, lat, pe = n["hidden_size"], n["num_attention_heads"], n["kv_lora_rank"], n["qk_rope_head_dim"]
    q_width, r = h * (n["qk_nope_head_dim"] + pe), n["q_lora_rank"]
    s = ({"q_a_proj.weight": (r, d), "q_a_layernorm.weight": (r,), "q_b_proj.weight": (q_width, r)} if r
         else {"q_proj.weight": (q_width, d)})
    s.update({"kv_a_proj_with_mqa.weight": (lat + pe, d), "kv_a_layernorm.weight": (lat,),
              "kv_b_proj.weight": (h * (n["qk_nope_head_dim"] + n["v_head_dim"]), lat)})
    if n["mla_gate"]:
        s["g_proj.weight"] = (h * n["v_head_dim"], d)
    s["o_proj.weight"] = (d, h * n["v_head_dim"])
    return s


def dense_shapes(hidden: int, inter: int) -> dict[str, Shape]:
    """A gated MLP (:class:`~kda_ref.model.mlp.DenseMLP`): ``gate_proj``, ``up_proj``, ``down_proj``."""
    return {"gate_proj.weight": (inter, hidden), "up_proj.weight": (inter, hidden), "down_proj.weight": (hidden, inter)}


def expert_shapes(n: dict) -> dict[str, Shape]:
    """One routed expert's ``experts.{e}.*``, at K3's latent width when there is one."""
    R, inter = n["routed_expert_hidden_size"] or n["hidden_size"], n["moe_intermediate_size"]
    return {"w1.weight": (inter, R), "w3.weight": (inter, R), "w2.weight": (R, inter)}


def moe_shapes(n: dict) -> dict[str, Shape]:
    """An MoE block's ``block_sparse_moe.*`` but its routed experts (:func:`expert_shapes` each): the router
    and its correction bias, the shared expert, K3's latent projections and norm."""
    d, E, R = n["hidden_size"], n["num_experts"], n["routed_expert_hidden_size"]
    s = {"gate.weight": (E, d), "gate.e_score_correction_bias": (E,)}
    if n["num_shared_experts"]:
        shared = dense_shapes(d, n["moe_intermediate_size"] * n["num_shared_experts"])
        s.update({f"shared_experts.{k}": v for k, v in shared.items()})
    if R:
        s.update({"routed_expert_down_proj.weight": (R, d), "routed_expert_up_proj.weight": (d, R)})
        if n["latent_norm"]:
            s["routed_expert_norm.weight"] = (R,)
    return s


def layer_shapes(n: dict) -> dict[str, Shape]:
    """What every decoder layer has beside its attention and MLP: the two norms, and K3's two depth mixes."""
    d = n["hidden_size"]
    s = {"input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,)}
    if n["attn_res"]:
        s.update({"self_attention_res_norm.weight": (d,), "mlp_res_norm.weight": (d,),
                  "self_attention_res_proj.weight": (1, d), "mlp_res_proj.weight": (1, d)})
    return s


def top_shapes(n: dict) -> dict[str, Shape]:
    """The model's own: embedding, final norm (and K3's final depth mix), ``lm_head`` (counted even when tied)."""
    d, V = n["hidden_size"], n["vocab_size"]
    s = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,)}
    if n["attn_res"]:
        s.update({"model.output_attn_res_norm.weight": (d,), "model.output_attn_res_proj.weight": (1, d)})
    s["lm_head.weight"] = (V, d)
    return s


def mtp_extra_shapes(n: dict) -> dict[str, Shape]:
    """An MTP layer's own, beside its MLA decoder layer (:class:`~kda_ref.model.mtp.MTPLayer`)."""
    d, V = n["hidden_size"], n["vocab_size"]
    return {"embed_tokens.weight": (V, d), "enorm.weight": (d,), "hnorm.weight": (d,), "eh_proj.weight": (d, 2 * d),
            "shared_head.norm.weight": (d,), "shared_head.head.weight": (V, d)}


def ffn_shapes(n: dict, moe: bool) -> dict[str, Shape]:
    """A layer's feed-forward block under its checkpoint prefix: ``block_sparse_moe.*`` (every expert named)
    or the dense ``mlp.*``. O(experts): for :func:`model_shapes`, not for the sizes."""
    if not moe:
        return {f"mlp.{k}": v for k, v in dense_shapes(n["hidden_size"], n["intermediate_size"]).items()}
    s = {f"block_sparse_moe.{k}": v for k, v in moe_shapes(n).items()}
    for e in range(n["num_experts"]):
        s.update({f"block_sparse_moe.experts.{e}.{k}": v for k, v in expert_shapes(n).items()})
    return s


def model_shapes(config) -> dict[str, Shape]:
    """Every parameter and buffer of :class:`~kda_ref.model.HybridModel` for ``config``, by its name."""
    n = numbers(config)
    out = dict(top_shapes(n))
    attn = {"kda": kda_shapes(n), "mla": mla_shapes(n)}
    for i, kind in enumerate(config.layer_types):
        block = {**layer_shapes(n), **{f"self_attn.{k}": v for k, v in attn[kind].items()},
                 **ffn_shapes(n, config.is_moe_layer(i))}
        out.update({f"model.layers.{i}.{k}": v for k, v in block.items()})
    for j in range(n["n_mtp"]):
        block = {**layer_shapes(n), **{f"self_attn.{k}": v for k, v in attn["mla"].items()},
                 **ffn_shapes(n, n["num_experts"] > 0), **mtp_extra_shapes(n)}
        out.update({f"mtp.{j}.{k}": v for k, v in block.items()})
    return out


def elements(shapes: dict[str, Shape]) -> int:
    """How many numbers the tensors ``shapes`` hold."""
    return sum(math.prod(s) for s in shapes.values())


def matmul_flops(shapes: dict[str, Shape]) -> int:
    """FLOPs one token spends in the matmuls of ``shapes`` (its 2-D weights; one multiply-add = 2 FLOPs)."""
    return 2 * sum(math.prod(s) for s in shapes.values() if len(s) == 2)
