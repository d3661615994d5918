"""The fused decode step equals the readable reference: ops, layers, the whole model, the engine."""

from __future__ import annotations

import pytest
import torch

from kda_ref import LLM, SamplingParams
from kda_ref.model import ForwardBatch, HybridModel, ModelConfig, RequestCache
from kda_ref.ops import causal_conv1d_update, recurrent_kda, rms_norm
from kda_ref.ops.kda_recurrent import recurrent_kda_decode_
from kda_ref.model.parts import rms_norm_fast
from kda_ref.ops.short_conv import causal_conv1d_update_
from prefill_util import prefilled, tokens
from kda_inputs import make_kda_inputs, make_state

CFG = ModelConfig.tiny()


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()



# ---- ops -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("HV", [4, 8])  # 8: grouped value heads
@pytest.mark.parametrize("slots", [[3, 1, 6], [2, 3, 4]])  # scattered, and one contiguous run (a view)
def test_recurrent_decode_inplace_matches_reference(HV, slots):
    N, H, K, V = len(slots), 4, 16, 8
    q, k, v, g, beta = make_kda_inputs(1, N, H, K, V, HV=HV, seed=3)
    pool = make_state(8, HV, K, V, seed=4)
    want_pool = pool.clone()
    idx = torch.tensor(slots)
    o_ref, final = recurrent_kda(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), g.transpose(0, 1),
                                 beta.transpose(0, 1), initial_state=pool[idx], output_final_state=True)
    want_pool[idx] = final
    contiguous = slots == list(range(slots[0], slots[0] + N))
    o = recurrent_kda_decode_(q[0], k[0], v[0], g[0], beta[0], pool, idx,
                              slot_range=(slots[0], N) if contiguous else None)
    torch.testing.assert_close(o, o_ref[:, 0], atol=1e-5, rtol=0)
    torch.testing.assert_close(pool, want_pool, atol=1e-5, rtol=0)


@pytest.mark.parametrize("contiguous", [False, True])
def test_conv_update_inplace_matches_reference(contiguous):
    gen = torch.Generator().manual_seed(0)
    N, D, W = 3, 10, 4
    pool = torch.randn(6, D, W - 1, generator=gen)
    x, w = torch.randn(N, D, generator=gen), torch.randn(D, W, generator=gen)
    idx = torch.tensor([2, 3, 4] if contiguous else [4, 1, 3])
    want_y, want_state = causal_conv1d_update(x, pool[idx], w)
    want_pool = pool.clone()
    want_pool[idx] = want_state
    y = causal_conv1d_update_(x, pool, idx, w, slot_range=(2, N) if contiguous else None)
    torch.testing.assert_close(y, want_y, atol=1e-6, rtol=0)
    torch.testing.assert_close(pool, want_pool, atol=0, rtol=0)


def test_rms_norm_fast_matches_reference():
    x, w = torch.randn(5, 3, 32), torch.randn(32)
    torch.testing.assert_close(rms_norm_fast(x, w, 1e-5), rms_norm(x, w, 1e-5), atol=1e-6, rtol=0)


# ---- layers --------------------------------------------------------------------------------------


@torch.no_grad()
def test_ffn_fused_paths_match_reference(model):
    x = torch.randn(9, CFG.hidden_size, generator=torch.Generator().manual_seed(1))
    dense = model.model.layers[0].mlp
    torch.testing.assert_close(dense.forward_fused(x), dense(x), atol=1e-6, rtol=0)
    moe = model.model.layers[1].block_sparse_moe
    torch.testing.assert_close(moe.forward_fused(x), moe(x), atol=1e-6, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("cfg", [CFG, ModelConfig.k3_micro()], ids=["kimi_linear", "k3_latent_moe"])
def test_moe_of_many_tokens_groups_them_by_expert(cfg):
    """Past ``dense_max_tokens`` (a prefill step) the fused MoE sorts the token-expert pairs by expert and
    runs each expert once on its rows: the same sum as the reference's routing, the K3 latent MoE too."""
    moe = HybridModel(cfg, seed=3).eval().model.layers[1].block_sparse_moe
    x = torch.randn(moe.dense_max_tokens + 37, cfg.hidden_size, generator=torch.Generator().manual_seed(2))
    got = moe.forward_fused(x)
    torch.testing.assert_close(got, moe(x), atol=2e-6, rtol=0)
    _, ids = moe.gate(x)
    assert len(ids.unique()) > 1  # several experts take rows


# ---- model ---------------------------------------------------------------------------------------


@torch.no_grad()
@pytest.mark.parametrize("seq_ids", [[0, 1, 2], [2, 0, 1]])  # state slots 1..3 in order (views), or not
def test_decode_step_matches_reference_path(model, seq_ids):
    lens = [5, 17, 9]  # different context lengths: the MLA rows are padded and masked
    fast, ref = prefilled(model, lens), prefilled(model, lens)
    for step in range(4):
        ids = tokens(3, seed=10 + step)
        outs = []
        for m, cache in ((True, fast), (False, ref)):
            model.fast_decode = m
            b = cache.batch([1, 1, 1], seq_ids=seq_ids)
            assert model.uses_decode_step(b, cache.tensors) is m
            outs.append(model(ids, b, cache.tensors, logits="last"))
            cache.advance(b, seq_ids)
        model.fast_decode = True
        torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=0)
    for name in ("recurrent", "conv", "kv"):
        torch.testing.assert_close(getattr(fast.tensors, name), getattr(ref.tensors, name), atol=1e-5, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("lens", [[64, 64, 64], [64, 30, 64], [70, 3, 130]], ids=["equal_prompts", "two_of_three_equal", "ragged"])
def test_prefill_step_over_fused_weights_matches_reference_path(model, lens):
    """A prefill step (fused projections, norms and FFN; equal prompts: one MLA attention call, the chunk
    form as a regular batch) and then a step mixing extends and decodes (two phase groups) give the
    reference path's logits and leave the same states and KV rows in the caches."""
    caches = {}
    for fast in (True, False):
        model.fast_decode = fast
        cache = RequestCache(model.config, len(lens), max_tokens=max(lens) + 40, page_size=4)
        b = cache.batch(lens)
        first = model(torch.cat([tokens(n, seed=s) for s, n in enumerate(lens)]), b, cache.tensors, logits="last")
        cache.advance(b)
        b2 = cache.batch([5, 1, 9])
        second = model(tokens(15, seed=7), b2, cache.tensors, logits="last")
        caches[fast] = (first, second, cache)
    model.fast_decode = True
    for a, e in zip(caches[True][:2], caches[False][:2]):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=0)
    for name in ("recurrent", "conv", "kv"):
        torch.testing.assert_close(getattr(caches[True][2].tensors, name), getattr(caches[False][2].tensors, name),
                                   atol=1e-5, rtol=0)


def test_decode_step_is_only_taken_when_it_applies(model):
    cache = prefilled(model, [4, 6])
    dec = cache.batch([1, 1])
    with torch.no_grad():
        assert model.uses_decode_step(dec, cache.tensors)
        assert not model.uses_decode_step(dec, None)  # stateless
        assert not model.uses_decode_step(cache.batch([1, 2]), cache.tensors)  # an extend in the batch
        assert not model.uses_decode_step(cache.batch([1, 1], probe=True), cache.tensors)
        assert not model.uses_decode_step(cache.batch([1, 1], verify=True), cache.tensors)
        fresh = RequestCache(model.config, 1)
        assert not model.uses_decode_step(fresh.batch([1]), fresh.tensors)  # a 1-token prefill
    assert not model.uses_decode_step(dec, cache.tensors)  # autograd on: the reference path


@torch.no_grad()
def test_fused_weights_follow_parameter_updates():
    m = HybridModel(CFG, seed=0).eval()
    other = HybridModel(CFG, seed=5).eval()

    def decode_logits(model, fast):
        model.fast_decode = fast
        cache = prefilled(model, [6])
        return model(tokens(1, seed=9), cache.batch([1]), cache.tensors)

    decode_logits(m, True)  # builds the fused caches
    for name, p in m.named_parameters():  # in-place writes (as load_state_dict / an optimizer does)
        if "layers.1." in name or name == "lm_head.weight":
            p.copy_(dict(other.named_parameters())[name])
    torch.testing.assert_close(decode_logits(m, True), decode_logits(m, False), atol=1e-5, rtol=0)
    m.load_state_dict(other.state_dict(), assign=True)  # replaced parameter objects
    torch.testing.assert_close(decode_logits(m, True), decode_logits(other, False), atol=1e-5, rtol=0)
    assert not any("fused" in k for k in m.state_dict())  # checkpoint names unchanged


def test_engine_fast_and_reference_paths_agree():
    prompts = [tokens(n, seed=n).tolist() for n in (3, 40, 17, 64, 8)]
    params = SamplingParams(max_tokens=12, ignore_eos=True, return_logits=True)
    outs = []
    for fast in (True, False):
        m = HybridModel(CFG, seed=0, fast_decode=fast).eval()
        outs.append(LLM(m, max_num_batched_tokens=32, max_num_seqs=4).generate(prompts, params))
    for a, b in zip(*outs):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)


def test_decode_plan_needs_pages_for_the_new_token(model):
    b = ForwardBatch(cu_seqlens=torch.tensor([0, 1]), context_lens=torch.tensor([8]),
                     state_indices=torch.tensor([1]), block_table=torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="^block_table:"):
        b.decode_plan(page_size=4)  # position 8 needs a third page


@torch.no_grad()
@pytest.mark.parametrize("fast", [True, False])
def test_never_written_kv_rows_do_not_leak(model, fast):
    """The engine's pool is torch.empty: rows past a sequence's end (the rest of its last page, PAD
    pages) may hold any bits, NaN included; decoding must not read them into the result."""
    lens = [5, 17]
    clean, dirty = prefilled(model, lens), prefilled(model, lens)
    ps = dirty.tensors.page_size
    kv = dirty.tensors.kv.view(dirty.tensors.kv.shape[0], -1, dirty.tensors.kv.shape[-1])  # [L_mla, rows, D]
    table = dirty._block_table
    written = {int(table[s, p // ps]) * ps + p % ps for s, n in enumerate(lens) for p in range(n + 1)}
    for r in range(kv.shape[1]):
        if r not in written:
            kv[:, r] = float("nan")
    model.fast_decode = fast
    try:
        outs = []
        for cache in (clean, dirty):
            b = cache.batch([1, 1])
            outs.append(model(tokens(2, seed=7), b, cache.tensors, logits="last"))
    finally:
        model.fast_decode = True
    assert torch.isfinite(outs[1]).all()
    torch.testing.assert_close(outs[1], outs[0], atol=0, rtol=0)
