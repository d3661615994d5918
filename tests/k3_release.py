"""Write a small Kimi K3 release folder the way Moonshot ships one, without ``kda_ref``.

The tensor list, dtypes and shapes follow the published release layout (the names the K3 loaders of
vLLM ``vllm/models/kimi_k3/nvidia/model.py``, SGLang ``models/kimi_k3.py`` and llama.cpp
``conversion/kimi_k3.py`` read): the multimodal wrapper's ``config.json`` (``text_config`` +
``vision_config``), every text tensor under ``language_model.``, vision tensors beside them, bf16
projections, fp32 ``A_log`` (``[head_dim]``, zero past the heads), ``dt_bias``, conv weights and
``o_norm``, routed experts as MXFP4 ``weight_packed`` / ``weight_scale`` (uint8, low nibble first,
E8M0 scales), sharded safetensors with ``model.safetensors.index.json``. The MXFP4 bytes are packed
here from chosen E2M1 values, so the expected float weights are known without any dequantiser.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def k3_text_config(**overrides) -> dict:
    """A micro K3 ``text_config`` (the release's keys and nesting) with ``overrides``."""
    text = {
        "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "vocab_size": 512,
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 4, "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 8192, "tie_word_embeddings": False,
        "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
        "mla_use_nope": True, "mla_use_output_gate": True, "num_experts": 4, "num_experts_per_token": 2,
        "num_shared_experts": 2, "moe_intermediate_size": 64, "routed_expert_hidden_size": 64,
        "latent_moe_use_norm": True, "moe_renormalize": True, "moe_router_activation_func": "sigmoid",
        "topk_method": "noaux_tc", "use_grouped_topk": True, "num_expert_group": 1, "topk_group": 1,
        "routed_scaling_factor": 1.0, "first_k_dense_replace": 1, "moe_layer_freq": 1, "attn_res_block_size": 2,
        "num_nextn_predict_layers": 0, "bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 258,
        "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "num_heads": 4, "head_dim": 32,
                               "short_conv_kernel_size": 4, "use_full_rank_gate": True, "gate_lower_bound": -5.0},
        "quantization_config": {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"},
    }
    text.update(overrides)
    return text


def k3_release_config(text: dict) -> dict:
    return {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"], "text_config": text,
            "vision_config": {"model_type": "moonvit3d", "patch_size": 14, "hidden_size": 32},
            "media_placeholder_token_id": 259, "pad_token_id": 258}


def _mxfp4(out_f: int, in_f: int, g: torch.Generator):
    """Random E2M1 codes and E8M0 scales: ``(packed, scale, the float weight they encode)``."""
    codes = torch.randint(0, 16, (out_f, in_f), generator=g)
    exps = torch.randint(118, 123, (out_f, in_f // 32), generator=g)
    mag = torch.tensor(E2M1, dtype=torch.float64)[codes & 7] * torch.where(codes >= 8, -1.0, 1.0).double()
    weight = mag * (2.0 ** (exps.double() - 127)).repeat_interleave(32, dim=1)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return packed, exps.to(torch.uint8), weight


def k3_release_tensors(text: dict, seed: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(the release's tensors by name, the float64 weights they hold by text name)``."""
    g = torch.Generator().manual_seed(seed)
    lin = text["linear_attn_config"]
    d, V, L = text["hidden_size"], text["vocab_size"], text["num_hidden_layers"]
    H, K = lin["num_heads"], lin["head_dim"]
    D = H * K
    out, expect = {}, {}

    def put(name, shape, dtype=torch.bfloat16, scale=0.05, value=None):
        t = (torch.randn(*shape, generator=g) * scale) if value is None else value
        t = t.to(dtype)
        out["language_model." + name], expect[name] = t, t.double()

    put("model.embed_tokens.weight", (V, d), scale=1.0)
    put("lm_head.weight", (V, d))
    for n in ("model.norm", "model.output_attn_res_norm"):
        put(n + ".weight", (d,), value=1 + 0.1 * torch.randn(d, generator=g))
    put("model.output_attn_res_proj.weight", (1, d), scale=0.5)
    for i in range(L):
        p = f"model.layers.{i}"
        for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            put(f"{p}.{n}.weight", (d,), value=1 + 0.1 * torch.randn(d, generator=g))
        put(f"{p}.self_attention_res_proj.weight", (1, d), scale=0.5)
        put(f"{p}.mlp_res_proj.weight", (1, d), scale=0.5)
        if (i + 1) in lin["kda_layers"]:
            _kda(put, f"{p}.self_attn", d, H, K, D, lin["short_conv_kernel_size"], g)
        else:
            _mla(put, f"{p}.self_attn", text, d)
        if i < text["first_k_dense_replace"]:
            for n, shape in (("gate_proj", (text["intermediate_size"], d)), ("up_proj", (text["intermediate_size"], d)),
                             ("down_proj", (d, text["intermediate_size"]))):
                put(f"{p}.mlp.{n}.weight", shape)
        else:
            _moe(put, out, expect, f"{p}.block_sparse_moe", text, d, g)
    # the vision part, skipped by the text model's loader
    out["vision_tower.patch_embed.proj.weight"] = torch.randn(32, 3, 14, 14, generator=g).to(torch.bfloat16)
    out["vision_tower.encoder.blocks.0.attn.qkv.weight"] = torch.randn(96, 32, generator=g).to(torch.bfloat16)
    out["mm_projector.proj.0.weight"] = torch.randn(d, 32 * 4, generator=g).to(torch.bfloat16)
    return out, expect


def _kda(put, p, d, H, K, D, W, g):
    for n in ("q_proj", "k_proj", "v_proj", "g_proj"):
        put(f"{p}.{n}.weight", (D, d))
    put(f"{p}.f_a_proj.weight", (K, d))
    put(f"{p}.f_b_proj.weight", (D, K))
    put(f"{p}.b_proj.weight", (H, d))
    for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
        put(f"{p}.{n}.weight", (D, 1, W), torch.float32, scale=0.4)
    a_log = torch.zeros(K)
    a_log[:H] = torch.empty(H).uniform_(0.0, 2.5, generator=g)
    put(f"{p}.A_log", (K,), torch.float32, value=a_log)
    put(f"{p}.dt_bias", (D,), torch.float32, scale=1.0)
    put(f"{p}.o_norm.weight", (K,), torch.float32, value=1 + 0.1 * torch.randn(K, generator=g))
    put(f"{p}.o_proj.weight", (d, D))


def _mla(put, p, text, d):
    h, r, lat = text["num_attention_heads"], text["q_lora_rank"], text["kv_lora_rank"]
    nope, pe, vd = text["qk_nope_head_dim"], text["qk_rope_head_dim"], text["v_head_dim"]
    put(f"{p}.q_a_proj.weight", (r, d))
    put(f"{p}.q_a_layernorm.weight", (r,), value=torch.ones(r))
    put(f"{p}.q_b_proj.weight", (h * (nope + pe), r), scale=0.2)
    put(f"{p}.kv_a_proj_with_mqa.weight", (lat + pe, d))
    put(f"{p}.kv_a_layernorm.weight", (lat,), value=torch.ones(lat))
    put(f"{p}.kv_b_proj.weight", (h * (nope + vd), lat), scale=0.2)
    put(f"{p}.g_proj.weight", (h * vd, d))
    put(f"{p}.o_proj.weight", (d, h * vd))


def _moe(put, out, expect, p, text, d, g):
    E, Im, R, S = text["num_experts"], text["moe_intermediate_size"], text["routed_expert_hidden_size"], \
        text["num_shared_experts"]
    put(f"{p}.gate.weight", (E, d), scale=0.2)
    put(f"{p}.gate.e_score_correction_bias", (E,), torch.float32, scale=0.01)
    put(f"{p}.routed_expert_down_proj.weight", (R, d))
    put(f"{p}.routed_expert_up_proj.weight", (d, R))
    put(f"{p}.routed_expert_norm.weight", (R,), value=1 + 0.1 * torch.randn(R, generator=g))
    for n, shape in (("gate_proj", (Im * S, d)), ("up_proj", (Im * S, d)), ("down_proj", (d, Im * S))):
        put(f"{p}.shared_experts.{n}.weight", shape)
    for e in range(E):
        for w, (o, i) in (("w1", (Im, R)), ("w3", (Im, R)), ("w2", (R, Im))):
            packed, scale, weight = _mxfp4(o, i, g)
            name = f"{p}.experts.{e}.{w}"
            out[f"language_model.{name}.weight_packed"], out[f"language_model.{name}.weight_scale"] = packed, scale
            expect[f"{name}.weight"] = weight


def write_k3_release(folder: Path, tensors: dict[str, torch.Tensor], config: dict, shards: int = 3) -> Path:
    """Write ``tensors`` in ``shards`` files (an expert's packed and scale halves put in different
    shards), the index and the config."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    parts: list[dict] = [{} for _ in range(shards)]
    for j, name in enumerate(names):
        k = (j + 1) % shards if name.endswith(".weight_scale") else j % shards
        parts[k][name] = tensors[name].contiguous()
    weight_map = {}
    for f, part in zip(files, parts):
        save_file(part, str(folder / f), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, f))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(config))
    return folder
