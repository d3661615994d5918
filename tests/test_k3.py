"""Kimi K3 as a model of the engine: its config, its layers against a float64 reference written from the
published definitions (``tests/k3_reference.py``), its release folder as Moonshot ships it (written by
``tests/k3_release.py`` without this package), and the engine's answers equal K3's alone."""

from __future__ import annotations

import dataclasses

import json

import pytest
import torch
from k3_reference import K3Reference
from k3_release import k3_release_config, k3_release_tensors, k3_text_config, write_k3_release
from test_engine import reference
from test_spec_decode import OracleDrafter

from kda_ref import LLM, SamplingParams
from kda_ref.disagg import DisaggregatedLLM
from kda_ref.model import (CheckpointError, ConfigError, HybridModel, ModelConfig, RequestCache, load_pretrained,
                           parameter_count, save_pretrained)
from kda_ref.model.layout import TEXT_PREFIX, checkpoint_name
from kda_ref.ops.gate import kda_gate_lowerbound
from kda_ref.ops.mxfp4 import MXFP4Error, dequantize_mxfp4, quantize_mxfp4, round_to_mxfp4
from kda_ref.speculative import SPEC_STATES

CFG = ModelConfig.k3_micro()
PARAMS = SamplingParams(max_tokens=10, ignore_eos=True, return_logits=True)


@pytest.fixture(scope="module")
def k3():
    """The micro K3 with every attention-residual projection drawn (init leaves them zero: a uniform mix,
    which would hide a wrong block boundary)."""
    m = HybridModel(CFG, seed=0).eval()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("_res_proj.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    m.clear_fused_weights()
    return m


def text_state(model: HybridModel) -> dict[str, torch.Tensor]:
    """The model's tensors by the release's text names (``language_model.`` dropped)."""
    return {checkpoint_name(model.config, k)[len(TEXT_PREFIX):]: v.detach() for k, v in model.state_dict().items()}


def ids_of(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


# ---- the configuration -----------------------------------------------------------------------------------
def test_the_released_k3_config_reads_from_its_multimodal_wrapper(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(k3_release_config(k3_text_config())))
    c = ModelConfig.from_json(tmp_path)
    assert c == CFG.__class__(**{**CFG.__dict__, "num_nextn_predict_layers": 0})  # the micro preset minus MTP
    assert c.is_k3 and c.experts_mxfp4 and c.layer_types == ["kda", "kda", "kda", "mla"]
    back = c.to_dict()
    assert back["model_type"] == "kimi_k3" and back["text_config"]["linear_attn_config"]["gate_lower_bound"] == -5.0
    assert ModelConfig.from_dict(json.loads(json.dumps(back))) == c


def test_the_kimi_k3_preset_has_the_released_layout():
    c = ModelConfig.kimi_k3()
    assert (len(c.kda_layer_ids), len(c.mla_layer_ids)) == (69, 24)
    assert c.mla_layer_ids[-2:] == [91, 92] and c.mla_layer_ids[0] == 3  # every 4th layer, and the last
    assert c.expert_input_size == 3584 and c.gate_lower_bound == -5.0
    # K3's MLA caches the same row as Kimi-Linear's: 512 + 64 values per token and layer
    assert c.state_bytes()["mla_kv_per_token_per_layer"] == (512 + 64) * 2
    assert ModelConfig.kimi_linear_48b().to_dict().keys().isdisjoint({"attn_res_block_size", "quantization_config"})


@pytest.mark.parametrize("where,patch,field", [
    ("linear_attn_config", {"gate_lower_bound": 1.0}, "text_config.gate_lower_bound"),
    ("text", {"hidden_act": "gelu"}, "text_config.hidden_act"),
    ("text", {"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}},
     "text_config.quantization_config.format"),
    ("text", {"routed_expert_hidden_size": None}, "text_config.latent_moe_use_norm"),
    ("text", {"routed_expert_hidden_size": 48}, "text_config.routed_expert_hidden_size"),  # not a multiple of 32
    ("text", {"attn_res_block_size": 0}, "text_config.attn_res_block_size"),
    ("text", {"q_lora_rank": -1}, "text_config.q_lora_rank"),
    ("top", {"text_config": None}, "text_config"),
])
def test_a_bad_k3_field_is_refused_naming_it(where, patch, field):
    text = k3_text_config()
    if where == "linear_attn_config":
        text["linear_attn_config"] = {**text["linear_attn_config"], **patch}
    elif where == "text":
        text.update(patch)
    d = k3_release_config(text)
    if where == "top":
        d.update(patch)
    with pytest.raises(ConfigError, match=rf"^{field}:"):
        ModelConfig.from_dict(d)


def test_the_size_arithmetic_counts_every_k3_tensor():
    for cfg in (CFG, ModelConfig.k3_tiny()):
        m = HybridModel(cfg, seed=0)
        tensors = [*m.parameters(), *m.buffers()]
        assert parameter_count(cfg) == (sum(t.numel() for t in tensors), len(tensors))


# ---- the pieces ------------------------------------------------------------------------------------------
def test_the_bounded_gate_is_flas(gen):
    from fla.ops.kda.gate import naive_kda_lowerbound_gate

    H, K = 3, 8
    g = torch.randn(5, H, K, generator=gen) * 4
    A_log, dt = torch.randn(H, generator=gen), torch.randn(H * K, generator=gen)
    ours = kda_gate_lowerbound(g, A_log, dt, lower_bound=-5.0)
    theirs = naive_kda_lowerbound_gate(g[None], A_log, dt_bias=dt, lower_bound=-5.0)[0]
    torch.testing.assert_close(ours, theirs.float())
    assert bool((ours >= -5.0).all()) and bool((ours < 0).all())  # the floor e^-5 per step on every channel


def test_mxfp4_dequantises_known_codes_low_nibble_first():
    # byte 0x9A: low nibble 0xA = -1.0, high nibble 0x9 = -0.5; byte 0x7F: 0xF = -6.0, 0x7 = 6.0
    packed = torch.tensor([[0x9A, 0x7F] + [0x00] * 14], dtype=torch.uint8)
    for e, unit in ((127, 1.0), (129, 4.0), (120, 2.0 ** -7)):
        w = dequantize_mxfp4(packed, torch.tensor([[e]], dtype=torch.uint8))
        assert w[0, :4].tolist() == [-1.0 * unit, -0.5 * unit, -6.0 * unit, 6.0 * unit]
        assert bool((w[0, 4:] == 0).all())
    all_codes = torch.tensor([list(range(16))], dtype=torch.uint8)  # one block: byte j holds code j low, 0 high
    values = dequantize_mxfp4(all_codes, torch.tensor([[127]], dtype=torch.uint8))[0, 0::2]
    assert values.tolist() == [0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6]
    with pytest.raises(MXFP4Error, match="255"):
        dequantize_mxfp4(packed, torch.tensor([[255]], dtype=torch.uint8))


def test_mxfp4_quantisation_is_exact_on_the_grid_and_idempotent(gen):
    w = torch.randn(6, 64, generator=gen)
    on_grid = round_to_mxfp4(w)
    assert not torch.equal(on_grid, w)
    packed, scale = quantize_mxfp4(on_grid)
    assert torch.equal(dequantize_mxfp4(packed, scale), on_grid)
    assert (on_grid - w).abs().max() <= w.abs().max() / 4  # the step at the top of a block is 2 of 6


# ---- the layers and the model against the float64 reference ---------------------------------------------
def test_k3s_kda_layer_chunked_recurrent_and_float64_agree(k3):
    """A K3 KDA layer run as one chunked prefill and token by token (the decode form) gives the
    reference's outputs, and its state is the reference's ``[V, K]`` state transposed (fla's ``[K, V]``)."""
    attn = k3.model.layers[1].self_attn
    x = torch.randn(21, CFG.hidden_size, generator=torch.Generator().manual_seed(3))
    want, S = K3Reference(CFG, text_state(k3)).kda("model.layers.1.self_attn", x.double())
    rc = RequestCache(CFG, 1, max_tokens=32)
    with torch.no_grad():
        b = rc.batch([21])
        chunked = attn(x, b, rc.tensors, k3.dispatcher)[0]
        state = rc.tensors.recurrent[rc.tensors.kda_index[1]][int(b.state_indices[0])]  # [H, K, V]
        torch.testing.assert_close(state.double(), S.transpose(-1, -2), atol=1e-5, rtol=0)
        rc2 = RequestCache(CFG, 1, max_tokens=32)
        steps = []
        for t in range(21):
            b2 = rc2.batch([1])
            steps.append(attn(x[t:t + 1], b2, rc2.tensors, k3.dispatcher)[0])
            rc2.advance(b2)
    torch.testing.assert_close(chunked.double(), want, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat(steps).double(), want, atol=1e-5, rtol=0)


def test_k3_logits_and_mtp_logits_equal_the_float64_reference(k3):
    ref = K3Reference(CFG, text_state(k3))
    ids = ids_of(23)
    with torch.no_grad():
        torch.testing.assert_close(k3(ids).double(), ref.logits(ids.tolist()), atol=2e-5, rtol=0)
        torch.testing.assert_close(k3.mtp_logits(ids).double(), ref.mtp_logits(ids.tolist()), atol=2e-5, rtol=0)


def _decode_logits_error(model: HybridModel, prompt: list[int], verify: bool) -> float:
    """The largest gap between the engine's logits for each generated token -- from fused decode steps, or
    from fused verify steps whose drafts are all right (every step a uniform verify of k = 3) -- and the
    float64 reference's over the same sequence."""
    params = SamplingParams(max_tokens=8, ignore_eos=True, return_logits=True)
    plain = LLM(model).generate([prompt], params)[0]
    llm = LLM(model, speculative="ngram", num_speculative_tokens=3) if verify else LLM(model)
    if verify:
        llm.scheduler.drafter = OracleDrafter({tuple(prompt): plain.token_ids})
    out = llm.generate([prompt], params)[0]
    assert out.token_ids == plain.token_ids
    if verify:
        assert llm.stats()["spec_verify_steps"] >= 2
    want = K3Reference(model.config, text_state(model)).logits(prompt + out.token_ids[:-1])[len(prompt) - 1:]
    return float((out.logits.double() - want).abs().max())


@pytest.mark.parametrize("step", ["decode", "verify"])
@pytest.mark.parametrize("gate", ["bounded", "softplus"])
def test_k3_fused_steps_equal_the_float64_reference_token_by_token(k3, step, gate, monkeypatch):
    """Each generated token's logits from the fused decode / verify steps equal the float64 reference's, for
    K3's bounded forget gate and for Kimi-Linear's (a K3 with ``gate_lower_bound`` None). A bounded gate
    computed as ``sigmoid(a * f + dt)`` for ``sigmoid(a * (f + dt))`` in the fused path -- a bug that once
    passed every test but one -- is caught here."""
    from kda_ref.model.parts import BoundedForgetGate

    model = k3
    if gate == "softplus":
        model = HybridModel(dataclasses.replace(CFG, gate_lower_bound=None), seed=0).eval()
    prompt = ids_of(9, seed=4).tolist()
    assert _decode_logits_error(model, prompt, step == "verify") < 5e-5
    if gate == "bounded":
        def planted(self, f, a, dt_bias):
            return torch.sigmoid(f.mul_(a).add_(dt_bias)).mul_(self.lower_bound)

        monkeypatch.setattr(BoundedForgetGate, "fused_", planted)
        model.clear_fused_weights()
        assert _decode_logits_error(model, prompt, step == "verify") > 1e-3


def test_kimi_linear_is_unchanged_by_k3s_switches():
    """Every K3 field at its default is Kimi-Linear: the same parameters, and the plain residual."""
    m = HybridModel(ModelConfig.micro(), seed=0)
    names = dict(m.named_parameters())
    assert not any(k.endswith(("_res_proj.weight", "q_a_proj.weight", ".g_proj.weight")) for k in names)
    assert names["model.layers.0.self_attn.A_log"].shape == (1, 1, 4, 1)


# ---- the release folder ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def release(tmp_path_factory):
    text = k3_text_config()
    tensors, expect = k3_release_tensors(text, seed=1)
    folder = write_k3_release(tmp_path_factory.mktemp("k3_release"), tensors, k3_release_config(text))
    return folder, tensors, expect


def test_a_k3_release_folder_loads_and_generates_what_the_reference_computes(release):
    folder, _, expect = release
    m = load_pretrained(folder)
    ids = ids_of(17, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(m(ids).double(), K3Reference(m.config, expect).logits(ids.tolist()),
                                   atol=5e-5, rtol=0)
    out = LLM(folder).generate([ids.tolist()], SamplingParams(max_tokens=6, ignore_eos=True))[0]
    assert out.token_ids == reference(m, ids.tolist(), 6)[0]


@pytest.mark.parametrize("name", [
    "language_model.model.output_attn_res_proj.weight",  # the final depth mix
    "language_model.model.layers.2.mlp_res_proj.weight",  # a layer's attention residual
    "language_model.model.layers.1.block_sparse_moe.experts.0.w2.weight_packed",  # an MXFP4 expert
    "language_model.model.layers.3.self_attn.g_proj.weight",  # MLA's output gate
    "language_model.model.layers.0.self_attn.g_proj.weight",  # KDA's full-rank output gate
    "language_model.model.layers.2.self_attn.A_log",  # the bounded gate's rate
])
def test_each_k3_tensor_matters(release, tmp_path, name):
    folder, tensors, _ = release
    ids = ids_of(40, seed=4)
    changed = dict(tensors)
    t = tensors[name]
    if t.dtype == torch.uint8:
        changed[name] = t ^ 0x11  # flip one bit of both nibbles
    elif name.endswith("A_log"):
        changed[name] = t.clone()
        changed[name][:4] += 1.0
    else:
        changed[name] = t + 0.5 * torch.ones_like(t)
    other = write_k3_release(tmp_path / "changed", changed, k3_release_config(k3_text_config()))
    with torch.no_grad():
        assert not torch.allclose(load_pretrained(folder)(ids), load_pretrained(other)(ids), atol=1e-4)


@pytest.mark.parametrize("edit,match", [
    ("missing", r"^state_dict: missing 1 tensors, e.g. \['language_model.model.layers.3.self_attn.g_proj.weight'\]"),
    ("extra", r"state_dict: unexpected 1 tensors, e.g. \['language_model.model.layers.0.self_attn.h_proj.weight'\]"),
    ("outside", r"^model.norm.weight: a kimi_k3 release names the text model's tensors language_model"),
    ("misshapen", r"^language_model.model.layers.3.self_attn.q_b_proj.weight: shape \(100, 32\)"),
    ("nan", r"^language_model.model.layers.1.block_sparse_moe.routed_expert_norm.weight: holds 1 NaN"),
    ("scale_nan", r"^language_model.model.layers.2.block_sparse_moe.experts.3.w1.weight_scale: .*255"),
    ("a_log_padding", r"^language_model.model.layers.0.self_attn.A_log: non-zero values past the first 4"),
    ("packed_elsewhere", r"only the routed experts are MXFP4"),
    ("half_pair", r"experts.1.w3.weight_packed: its pair .*experts.1.w3.weight_scale is missing"),
    ("scale_huge", r"^language_model.model.layers.2.block_sparse_moe.experts.0.w2.weight_scale: holds the scale "
                   r"byte 160 \(weights up to 5.15e\+10\)"),
    ("scale_edge", r"experts.0.w2.weight_scale: holds the scale byte 141 "),
    ("float_expert", r"^language_model.model.layers.1.block_sparse_moe.experts.2.w1.weight: the config's "
                     r"quantization_config declares the routed experts MXFP4 .* stored as BF16"),
])
def test_a_bad_release_folder_is_refused_naming_the_tensor(release, tmp_path, edit, match):
    _, tensors, _ = release
    t = dict(tensors)
    p = "language_model.model.layers."
    if edit == "missing":
        del t[p + "3.self_attn.g_proj.weight"]
    elif edit == "extra":
        t[p + "0.self_attn.h_proj.weight"] = torch.zeros(3)
    elif edit == "outside":
        t["model.norm.weight"] = t.pop("language_model.model.norm.weight")
    elif edit == "misshapen":
        t[p + "3.self_attn.q_b_proj.weight"] = torch.zeros(100, 32, dtype=torch.bfloat16)
    elif edit == "nan":
        w = t[p + "1.block_sparse_moe.routed_expert_norm.weight"].clone()
        w[5] = float("nan")
        t[p + "1.block_sparse_moe.routed_expert_norm.weight"] = w
    elif edit == "scale_nan":
        s = t[p + "2.block_sparse_moe.experts.3.w1.weight_scale"].clone()
        s[0, 0] = 255
        t[p + "2.block_sparse_moe.experts.3.w1.weight_scale"] = s
    elif edit == "a_log_padding":
        a = t[p + "0.self_attn.A_log"].clone()
        a[-1] = 0.5
        t[p + "0.self_attn.A_log"] = a
    elif edit == "packed_elsewhere":
        w = t.pop(p + "0.self_attn.o_proj.weight")
        t[p + "0.self_attn.o_proj.weight_packed"] = torch.zeros(w.shape[0], w.shape[1] // 2, dtype=torch.uint8)
        t[p + "0.self_attn.o_proj.weight_scale"] = torch.zeros(w.shape[0], w.shape[1] // 32, dtype=torch.uint8)
    elif edit == "half_pair":
        del t[p + "1.block_sparse_moe.experts.1.w3.weight_scale"]
    elif edit in ("scale_huge", "scale_edge"):
        s = t[p + "2.block_sparse_moe.experts.0.w2.weight_scale"].clone()
        s[1, 0] = 160 if edit == "scale_huge" else 141
        t[p + "2.block_sparse_moe.experts.0.w2.weight_scale"] = s
    elif edit == "float_expert":
        base = p + "1.block_sparse_moe.experts.2.w1"
        w = dequantize_mxfp4(t.pop(base + ".weight_packed"), t.pop(base + ".weight_scale"))
        t[base + ".weight"] = w.to(torch.bfloat16)
    folder = write_k3_release(tmp_path / edit, t, k3_release_config(k3_text_config()))
    with pytest.raises((CheckpointError, ConfigError), match=match):
        load_pretrained(folder)


@pytest.mark.parametrize("edit", ["unlisted", "wrong_shard", "ghost"])
def test_a_release_whose_index_disagrees_with_its_shards_is_refused(release, tmp_path, edit):
    _, tensors, _ = release
    folder = write_k3_release(tmp_path / edit, dict(tensors), k3_release_config(k3_text_config()))
    index_file = folder / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    wmap = index["weight_map"]
    name = "language_model.model.layers.3.self_attn.g_proj.weight"
    held = wmap[name]
    if edit == "unlisted":
        del wmap[name]
        match = rf"^{name}: in {held} but not in model.safetensors.index.json's weight_map"
    elif edit == "wrong_shard":
        other = next(f for f in sorted(set(wmap.values())) if f != held)
        wmap[name] = other
        match = rf"^{name}: model.safetensors.index.json puts it in {other}; it is in {held}"
    else:
        wmap["language_model.model.layers.0.self_attn.z_proj.weight"] = held
        match = r"^language_model.model.layers.0.self_attn.z_proj.weight: model.safetensors.index.json lists it"
    index_file.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=match):
        load_pretrained(folder)


def test_a_release_never_holds_a_scale_past_the_bound(k3, tmp_path):
    """The writer refuses what the loader would: an expert on the MXFP4 grid but with weights past 49,152."""
    from kda_ref.ops.mxfp4 import E8M0_MAX_RELEASE

    model = HybridModel(k3.config, seed=3)
    model.round_experts_to_mxfp4()
    name = next(n for n, _ in model.named_parameters() if ".experts." in n)
    with torch.no_grad():
        model.get_parameter(name).mul_(2.0 ** 30)  # still on the grid, scale bytes up by 30
    with pytest.raises(CheckpointError, match=rf"^{name}: holds the scale byte \d+ .* at or below {E8M0_MAX_RELEASE}"):
        save_pretrained(model, tmp_path / "huge")


def test_save_pretrained_writes_the_release_layout_and_loads_back_exactly(k3, tmp_path):
    save_pretrained(k3, tmp_path, max_shard_bytes=1 << 20)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(index.values())) > 1 and all(k.startswith(TEXT_PREFIX) for k in index)
    assert f"{TEXT_PREFIX}model.layers.4.eh_proj.weight" in index  # the MTP layer, past the last
    assert f"{TEXT_PREFIX}model.layers.1.block_sparse_moe.experts.0.w1.weight_packed" in index
    back = load_pretrained(tmp_path)
    for (a, x), (b, y) in zip(k3.state_dict().items(), back.state_dict().items()):
        assert a == b and torch.equal(x, y), a
    with torch.no_grad():
        k3.model.layers[1].block_sparse_moe.experts[0].w1.weight.add_(1e-3)  # off the MXFP4 grid
    try:
        with pytest.raises(CheckpointError, match=r"experts.0.w1.weight: not on the MXFP4 grid"):
            save_pretrained(k3, tmp_path / "off_grid")
    finally:
        k3.round_experts_to_mxfp4()
    assert not (tmp_path / "off_grid" / "config.json").exists()  # nothing written


# ---- the engine gives K3's answers -----------------------------------------------------------------------
ENGINE_SETTINGS = {
    "default": {},
    "radix": dict(prefix_cache="radix"),
    "block": dict(prefix_cache="block", mamba_cache_mode="all"),
    "static": dict(static_decode=True),
    "mixed": dict(max_num_batched_tokens=24, mixed_batch="chunk"),
    "cp-threads": dict(context_parallel_size=2, cp_backend="threads", cp_min_tokens=16),
    "cp-gloo": dict(context_parallel_size=2, cp_backend="gloo", cp_min_tokens=16),  # two processes
}


def _prompts():
    base = ids_of(70, seed=5).tolist()  # past one 64-token block: the block cache keeps a state
    return [base + base[:12], base[:66], ids_of(7, seed=6).tolist()]


def _equal_to_alone(model, outs, prompts, n):
    for p, o in zip(prompts, outs):
        toks, logits = reference(model, p, n)
        assert o.token_ids == toks
        torch.testing.assert_close(o.logits, logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "cp-gloo" else n
                                  for n in ENGINE_SETTINGS])  # two processes: tests/test_context_parallel.py's
def test_the_engine_gives_k3s_answers_under_every_setting(k3, name):
    llm = LLM(k3, **ENGINE_SETTINGS[name])
    prompts = _prompts()
    outs = llm.generate(prompts, PARAMS)
    _equal_to_alone(k3, outs, prompts, PARAMS.max_tokens)
    # a second turn continues each conversation: a prefix cache resumes from the first turn's states
    turns = [p + o.token_ids + ids_of(5, seed=9 + n).tolist() for n, (p, o) in enumerate(zip(prompts, outs))]
    _equal_to_alone(k3, llm.generate(turns, PARAMS), turns, PARAMS.max_tokens)
    if name in ("radix", "block"):
        assert llm.stats()["cached_prompt_tokens"] > 0
    if name.startswith("cp"):
        assert llm.stats()["cp_prefills"] >= 4 and llm.stats()["cp_fallbacks"] == 0


@pytest.mark.parametrize("state,static", [  # every registered strategy, each once by default, both modes under -m slow
    pytest.param(s, static, marks=() if i % 2 == static else pytest.mark.slow)
    for i, s in enumerate(SPEC_STATES) for static in (False, True)])
def test_k3_speculation_keeps_k3s_answers(k3, state, static):
    prompts = _prompts()
    answers = {tuple(p): reference(k3, p, PARAMS.max_tokens)[0] for p in prompts}
    llm = LLM(k3, speculative="ngram", num_speculative_tokens=3, spec_state=state, static_decode=static,
              prefix_cache="radix")
    llm.scheduler.drafter = OracleDrafter(answers, wrong_last=True)  # accepts all but the last draft
    _equal_to_alone(k3, llm.generate(prompts, PARAMS), prompts, PARAMS.max_tokens)
    s = llm.stats()
    assert 0 < s["spec_accepted_tokens"] < s["spec_draft_tokens"]


def test_k3_through_disaggregation_and_the_triton_kernels(k3):
    prompts = _prompts()
    d = DisaggregatedLLM(k3, prefix_cache="radix")
    for p, o in zip(prompts, d.generate(prompts, PARAMS)):
        toks, logits = reference(k3, p, PARAMS.max_tokens)
        assert o.token_ids == toks
        torch.testing.assert_close(o.logits, logits[1:], atol=1e-4, rtol=0)  # the first token came from prefill
    tri = HybridModel(CFG, seed=None, backend="triton")
    tri.load_state_dict(k3.state_dict())
    short = [prompts[2]]
    _equal_to_alone(k3, LLM(tri.eval()).generate(short, PARAMS), short, PARAMS.max_tokens)
