"""The hybrid model: config parsing, cached decoding, mixed batches, checkpoints, and the HF oracle."""

from __future__ import annotations

import json

import pytest
import torch

from kda_ref.model import (
    CheckpointError,
    ConfigError,
    ForwardBatch,
    HybridModel,
    ModelConfig,
    RequestCache,
    load_pretrained,
    save_pretrained,
)
from oracles import hf_kimi_linear


@pytest.fixture(scope="module")
def tiny():
    return HybridModel(ModelConfig.tiny(), seed=0).eval()


def tokens(n, seed=0, vocab=256):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


# ---- config ------------------------------------------------------------------------------------


def test_config_layers_are_one_indexed_in_json(tmp_path):
    d = ModelConfig.tiny().to_dict()
    d["num_hidden_layers"] = 5
    d["linear_attn_config"].update(kda_layers=[1, 2, 4, 5], full_attn_layers=[3])
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg = ModelConfig.from_json(tmp_path)
    assert cfg.layer_types == ["kda", "kda", "mla", "kda", "kda"]
    assert cfg.mla_layer_ids == [2]


def test_config_reads_transformers_aliases():
    d = ModelConfig.tiny().to_dict()
    d["num_local_experts"] = d.pop("num_experts")
    d["num_experts_per_tok"] = d.pop("num_experts_per_token")
    cfg = ModelConfig.from_dict(d)
    assert cfg.num_experts == 4 and cfg.num_experts_per_token == 2


def test_tiny_is_a_few_million_parameters_with_3_to_1(tiny):
    assert 1_000_000 < tiny.num_parameters() < 10_000_000
    types = tiny.config.layer_types
    assert types.count("kda") == 3 * types.count("mla")


def test_48b_byte_arithmetic():
    b = ModelConfig.kimi_linear_48b().state_bytes()
    assert ModelConfig.kimi_linear_48b().mla_layer_ids == [3, 7, 11, 15, 19, 23, 26]
    assert b["kda_recurrent_per_layer"] == 2_097_152  # 32 * 128 * 128 fp32
    assert b["kda_conv_per_layer"] == 73_728  # 3 * 4096 * 3 bf16
    assert b["kda_per_seq"] == 20 * 2_170_880
    assert b["mla_kv_per_token"] == 8_064  # 7 layers * 576 * 2 bytes
    assert round(b["break_even_tokens"]) == 1884


@pytest.mark.parametrize(
    "patch,field",
    [
        ({"linear_attn_config": {"kda_layers": [0, 1, 2], "full_attn_layers": [3], "num_heads": 4, "head_dim": 64,
                                 "short_conv_kernel_size": 4}}, "kda_layers"),
        ({"linear_attn_config": {"kda_layers": [1, 2], "full_attn_layers": [4], "num_heads": 4, "head_dim": 64,
                                 "short_conv_kernel_size": 4}}, "full_attn_layers"),
        ({"q_lora_rank": 0}, "q_lora_rank"),
        ({"num_experts_per_token": 9}, "num_experts_per_token"),
        ({"model_type": "llama"}, "model_type"),
        ({"hidden_size": -1}, "hidden_size"),
    ],
)
def test_bad_config_names_the_field(patch, field):
    d = ModelConfig.tiny().to_dict()
    d.update(patch)
    with pytest.raises(ConfigError, match=rf"^{field}:"):
        ModelConfig.from_dict(d)


def test_missing_or_malformed_config_file(tmp_path):
    with pytest.raises(ConfigError, match="^path:"):
        ModelConfig.from_json(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="^path:"):
        ModelConfig.from_json(tmp_path)


# ---- forward -----------------------------------------------------------------------------------


def test_seed_is_deterministic_and_matters():
    a = HybridModel(ModelConfig.tiny(), seed=3)
    b = HybridModel(ModelConfig.tiny(), seed=3)
    c = HybridModel(ModelConfig.tiny(), seed=4)
    ids = tokens(20)
    with torch.no_grad():
        assert torch.equal(a(ids), b(ids))
        assert not torch.allclose(a(ids), c(ids))


@torch.no_grad()
def test_decode_steps_continue_a_prefill_exactly(tiny):
    ids = tokens(150, seed=1)
    full = tiny(ids)
    cache = RequestCache(tiny.config, 1, max_tokens=200)
    got = []
    for a, e in [(0, 100), (100, 130)] + [(t, t + 1) for t in range(130, 150)]:
        b = cache.batch([e - a])
        got.append(tiny(ids[a:e], b, cache.tensors))
        cache.advance(b)
    torch.testing.assert_close(torch.cat(got), full, atol=1e-4, rtol=0)


@torch.no_grad()
def test_mixed_batch_of_prefills_and_decodes_equals_separate_runs(tiny):
    """One forward over a varlen batch mixing a decode, a fresh prefill and an extend."""
    seqs = [tokens(40, 2), tokens(70, 3), tokens(90, 4)]
    cache = RequestCache(tiny.config, 3, max_tokens=128)
    b = cache.batch([39, 50], seq_ids=[0, 2])
    tiny(torch.cat([seqs[0][:39], seqs[2][:50]]), b, cache.tensors)
    cache.advance(b, [0, 2])
    # seq 0 decodes its 40th token, seq 1 prefills 70, seq 2 extends by 40
    b = cache.batch([1, 70, 40])
    out = tiny(torch.cat([seqs[0][39:], seqs[1], seqs[2][50:]]), b, cache.tensors, logits="last")
    for n, s in enumerate(seqs):
        torch.testing.assert_close(out[n], tiny(s)[-1], atol=1e-4, rtol=0)


@torch.no_grad()
def test_chunk_states_carry_matching_conv_windows(tiny):
    """Recorded chunk-start checkpoints (recurrent + conv) restore to the same logits as a full run."""
    ids = tokens(150, seed=5)
    full = tiny(ids)
    cache = RequestCache(tiny.config, 1, max_tokens=160)
    b = cache.batch([150], return_chunk_states=True)
    res = tiny.forward_output(ids, b, cache.tensors)
    layer0 = tiny.config.kda_layer_ids[0]
    rec = res.chunk_states[layer0]
    assert [p.tolist() for p in rec.positions] == [[0, 64, 128]]
    # restore the checkpoint at 64 for every KDA layer into a second cache, keep MLA KV, continue
    cache2 = RequestCache(tiny.config, 1, max_tokens=160)
    cache2.tensors.kv.copy_(cache.tensors.kv)
    for li, layer in enumerate(tiny.config.kda_layer_ids):
        cache2.tensors.recurrent[li, 1] = res.chunk_states[layer].recurrent[1]
        cache2.tensors.conv[li, 1] = res.chunk_states[layer].conv[1]
    cache2.lengths[0] = 64
    b2 = cache2.batch([86])
    torch.testing.assert_close(tiny(ids[64:], b2, cache2.tensors), full[64:], atol=1e-4, rtol=0)
    # boundary consistency: the conv window of another boundary changes the answer
    cache3 = RequestCache(tiny.config, 1, max_tokens=160)
    cache3.tensors.kv.copy_(cache.tensors.kv)
    for li, layer in enumerate(tiny.config.kda_layer_ids):
        cache3.tensors.recurrent[li, 1] = res.chunk_states[layer].recurrent[1]
        cache3.tensors.conv[li, 1] = res.chunk_states[layer].conv[2]  # window from position 128
    cache3.lengths[0] = 64
    wrong = tiny(ids[64:], cache3.batch([86]), cache3.tensors)
    assert (wrong - full[64:]).abs().max() > 1e-3


@torch.no_grad()
def test_verify_returns_per_step_states_and_leaves_the_pool(tiny):
    ids = tokens(60, seed=6)
    cache = RequestCache(tiny.config, 1, max_tokens=64)
    b = cache.batch([50])
    tiny(ids[:50], b, cache.tensors)
    cache.advance(b)
    before = cache.tensors.recurrent.clone(), cache.tensors.conv.clone()
    vb = cache.batch([6], verify=True)
    res = tiny.forward_output(ids[50:56], vb, cache.tensors)
    assert torch.equal(cache.tensors.recurrent, before[0]) and torch.equal(cache.tensors.conv, before[1])
    torch.testing.assert_close(res.logits, tiny(ids[:56])[50:], atol=1e-4, rtol=0)
    layer0 = tiny.config.kda_layer_ids[0]
    assert res.step_states[layer0].recurrent.shape[0] == 6
    # committing the state after draft token 3 and decoding from there matches a plain run
    for li, layer in enumerate(tiny.config.kda_layer_ids):
        cache.tensors.recurrent[li, 1] = res.step_states[layer].recurrent[2]
        cache.tensors.conv[li, 1] = res.step_states[layer].conv[2]
    cache.lengths[0] = 53
    nb = cache.batch([1])
    torch.testing.assert_close(tiny(ids[53:54], nb, cache.tensors)[0], tiny(ids[:54])[-1], atol=1e-4, rtol=0)


def test_forward_bad_input(tiny):
    with pytest.raises(ValueError, match="^input_ids:"):
        tiny(torch.tensor([1, 2, 600]))
    with pytest.raises(ValueError, match="^input_ids:"):
        tiny(torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="^batch:"):
        tiny(tokens(5), ForwardBatch.prefill([4]))
    cache = RequestCache(tiny.config, 1, max_tokens=8)
    with pytest.raises(ValueError, match="^new_lens:"):
        cache.batch([9])
    with pytest.raises(ValueError, match="^cu_seqlens:"):
        ForwardBatch(cu_seqlens=torch.tensor([0, 3, 3]), context_lens=torch.zeros(2, dtype=torch.long))


# ---- weights -----------------------------------------------------------------------------------


def test_save_load_roundtrip_with_checkpoint_names(tiny, tmp_path):
    save_pretrained(tiny, tmp_path)
    from safetensors.torch import load_file

    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "model.layers.0.self_attn.q_conv1d.weight" in keys
    assert "model.layers.1.block_sparse_moe.experts.3.w2.weight" in keys
    assert "model.layers.3.self_attn.kv_a_proj_with_mqa.weight" in keys
    assert "model.layers.0.mlp.gate_proj.weight" in keys
    m2 = load_pretrained(tmp_path)
    ids = tokens(30)
    with torch.no_grad():
        assert torch.equal(m2(ids), tiny(ids))


def test_checkpoint_errors(tiny, tmp_path):
    from kda_ref.model import load_hf_state_dict

    sd = dict(tiny.state_dict())
    sd.pop("model.layers.0.self_attn.A_log")
    with pytest.raises(CheckpointError, match="missing"):
        load_hf_state_dict(HybridModel(ModelConfig.tiny(), seed=None), sd)
    sd = dict(tiny.state_dict())
    sd["model.layers.0.self_attn.dt_bias"] = torch.zeros(4)
    with pytest.raises(CheckpointError, match=r"^model\.layers\.0\.self_attn\.dt_bias:"):
        load_hf_state_dict(HybridModel(ModelConfig.tiny(), seed=None), sd)


# ---- oracle: transformers' native Kimi-Linear --------------------------------------------------


@pytest.mark.oracle
def test_matches_transformers_kimi_linear(tmp_path):
    hf_kimi_linear()
    from transformers import KimiLinearForCausalLM

    # larger init so the logits are not all near zero
    model = HybridModel(ModelConfig.tiny(), seed=11).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("proj.weight", "w1.weight", "w2.weight", "w3.weight", "embed_tokens.weight")):
                p.mul_(4.0)
    save_pretrained(model, tmp_path)
    hf = KimiLinearForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = tokens(100, seed=8)
    with torch.no_grad():
        want = hf(ids[None]).logits[0]
        ours = model(ids)
        assert want.abs().max() > 1.0
        torch.testing.assert_close(ours, want, atol=1e-4, rtol=0)
        # cached token-by-token decode on both sides
        out = hf(ids[None, :80], use_cache=True)
        hf_cache = out.past_key_values
        cache = RequestCache(model.config, 1, max_tokens=128)
        b = cache.batch([80])
        model(ids[:80], b, cache.tensors)
        cache.advance(b)
        for t in range(80, 100):
            step = hf(ids[None, t:t + 1], past_key_values=hf_cache, use_cache=True)
            hf_cache = step.past_key_values
            b = cache.batch([1])
            mine = model(ids[t:t + 1], b, cache.tensors)
            cache.advance(b)
            torch.testing.assert_close(mine[0], step.logits[0, -1], atol=1e-4, rtol=0)


def test_moe_dense_and_routed_paths_agree(tiny):
    """Small batches run every expert densely and mask the routing; large ones gather per expert."""
    moe = tiny.model.layers[1].block_sparse_moe
    x = torch.randn(40, tiny.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        w, ids = moe.gate(x)
        torch.testing.assert_close(moe._dense(x, w, ids), moe._routed(x, w, ids), atol=1e-6, rtol=0)
        assert ids.unique().numel() > 1
