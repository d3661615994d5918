"""The fused verify step equals the readable reference: the op, the whole model's verify forward
(logits, the state and conv window after every token, ReplaySSM's inputs, the KV it writes, the pool
it must not write), and the engine's speculative decoding through either path."""

from __future__ import annotations

import pytest
import torch

from kda_ref.speculative import SPEC_STATES
from kda_ref import LLM, SamplingParams
from kda_ref.model import ForwardBatch, HybridModel, ModelConfig, RequestCache
from kda_ref.ops import recurrent_kda
from kda_ref.ops.dispatcher import KDAKernelDispatcher
from kda_ref.ops.kda_recurrent import recurrent_kda_verify
from prefill_util import prefilled, tokens
from kda_inputs import make_kda_inputs, make_state

CFG = ModelConfig.tiny()


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()



@pytest.mark.parametrize("HV", [4, 8])  # 8: grouped value heads
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_recurrent_verify_matches_the_reference_with_step_states(HV, dtype):
    N, L, H, K, V = 3, 5, 4, 16, 8
    q, k, v, g, beta = (t.reshape(N, L, *t.shape[2:]).to(dtype)
                        for t in make_kda_inputs(1, N * L, H, K, V, HV=HV, seed=3))
    init = make_state(N, HV, K, V, seed=4).to(dtype)
    before = init.clone()
    o_ref, _, steps_ref = recurrent_kda(q, k, v, g, beta, initial_state=init, return_step_states=True)
    o, steps = recurrent_kda_verify(q, k, v, g, beta, init)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(o, o_ref, atol=tol, rtol=0)
    torch.testing.assert_close(steps, steps_ref, atol=tol, rtol=0)
    assert torch.equal(init, before)  # read only
    o2, none = recurrent_kda_verify(q, k, v, g, beta, init, keep_step_states=False)
    assert none is None and torch.equal(o2, o)




@torch.no_grad()
@pytest.mark.parametrize("keep", ["states", "trajectory"])
@pytest.mark.parametrize("L", [2, 4])
def test_verify_step_matches_the_reference_path(model, keep, L):
    lens = [5, 17, 9]  # page boundaries fall inside some verify segments (page_size 4)
    outs, caches = [], []
    for fast in (True, False):
        cache = prefilled(model, lens)
        pool_before = (cache.tensors.recurrent.clone(), cache.tensors.conv.clone())
        model.fast_decode = fast
        try:
            b = cache.batch([L] * 3, verify=True, verify_keep=keep)
            assert model.uses_verify_step(b, cache.tensors) is fast
            outs.append(model.forward_output(tokens(3 * L, seed=11), b, cache.tensors, logits="all"))
        finally:
            model.fast_decode = True
        # a verify writes no state: the committed ones are untouched
        assert torch.equal(cache.tensors.recurrent, pool_before[0]) and torch.equal(cache.tensors.conv, pool_before[1])
        caches.append(cache)
    fast, ref = outs
    torch.testing.assert_close(fast.logits, ref.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(caches[0].tensors.kv, caches[1].tensors.kv, atol=1e-5, rtol=0)  # the drafts' KV
    layers = list(CFG.kda_layer_ids)
    if keep == "states":
        assert sorted(fast.step_states) == sorted(ref.step_states) == layers
        for i in layers:
            a, r = fast.step_states[i], ref.step_states[i]
            assert a.seq_ids.tolist() == r.seq_ids.tolist() == [0, 1, 2]
            assert [p.tolist() for p in a.positions] == [p.tolist() for p in r.positions]
            torch.testing.assert_close(a.recurrent, r.recurrent, atol=1e-5, rtol=0)
            torch.testing.assert_close(a.conv, r.conv, atol=1e-5, rtol=0)  # projections: fused vs separate matmuls
    else:
        assert not fast.step_states and sorted(fast.trajectories) == layers
        for i in layers:
            a, r = fast.trajectories[i], ref.trajectories[i]
            for name in ("x", "k", "v", "g", "beta"):
                torch.testing.assert_close(getattr(a, name), getattr(r, name), atol=1e-5, rtol=0)


def test_verify_step_is_only_taken_for_uniform_verify_batches(model):
    cache = prefilled(model, [4, 6])
    with torch.no_grad():
        assert model.uses_verify_step(cache.batch([3, 3], verify=True), cache.tensors)
        assert model.uses_verify_step(cache.batch([3, 3], verify_seqs=(0, 1)), cache.tensors)
        assert not model.uses_verify_step(cache.batch([3, 2], verify=True), cache.tensors)  # ragged
        assert not model.uses_verify_step(cache.batch([3, 3], verify_seqs=(0,)), cache.tensors)  # one extends
        assert not model.uses_verify_step(cache.batch([1, 1], verify=True), cache.tensors)  # one token: decode
        assert not model.uses_verify_step(cache.batch([3, 3], verify=True, probe=True), cache.tensors)
        fresh = RequestCache(model.config, 1)
        assert not model.uses_verify_step(fresh.batch([3], verify=True), fresh.tensors)  # no cached context
    assert not model.uses_verify_step(cache.batch([3, 3], verify=True), cache.tensors)  # autograd on


def test_verify_plan_needs_pages_for_every_new_token():
    b = ForwardBatch(cu_seqlens=torch.tensor([0, 3]), context_lens=torch.tensor([6]), verify=True,
                     state_indices=torch.tensor([1]), block_table=torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="^block_table:"):
        b.verify_plan(page_size=4)  # positions 6..8: 8 needs a third page
    ragged = ForwardBatch(cu_seqlens=torch.tensor([0, 3, 5]), context_lens=torch.tensor([6, 2]), verify=True,
                          state_indices=torch.tensor([1, 2]), block_table=torch.tensor([[1, 2, 3], [4, 5, 6]]))
    with pytest.raises(ValueError, match="^batch: verify_plan"):
        ragged.verify_plan(page_size=4)


def test_the_dispatcher_reports_the_fused_verify():
    seen = []
    d = KDAKernelDispatcher(backend="torch", on_dispatch=seen.append)
    N, L, H, K = 2, 3, 2, 4
    x = torch.rand(N, L, H, K)
    o, steps = d.verify_(x, x, x, -x, torch.rand(N, L, H), state_pool=torch.zeros(3, H, K, K),
                         state_indices=torch.tensor([2, 1]), layer=5)
    assert o.shape == (N, L, H, K) and steps.shape == (N, L, H, K, K)
    assert [(c.phase.value, c.kernel, c.layer, c.num_seqs, c.num_tokens) for c in seen] == [
        ("verify", "fused_recurrent_kda", 5, 2, 6)]


@pytest.mark.parametrize("spec_state", SPEC_STATES)
def test_engine_speculation_through_either_verify_path_gives_the_same_logits(spec_state):
    prompts = [[5, 6, 7, 8] * 6, [1, 2, 3, 1, 2, 3, 1, 2]]
    params = SamplingParams(max_tokens=14, ignore_eos=True, return_logits=True)
    outs = []
    for fast in (True, False):
        m = HybridModel(CFG, seed=0, fast_decode=fast).eval()
        llm = LLM(m, speculative="ngram", num_speculative_tokens=3, spec_state=spec_state)
        outs.append(llm.generate(prompts, params, use_tqdm=False))
        assert llm.stats()["spec_verify_steps"] > 0
    plain = LLM(HybridModel(CFG, seed=0).eval()).generate(prompts, params, use_tqdm=False)
    for a, b, p in zip(*outs, plain):
        assert a.token_ids == b.token_ids == p.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)
        torch.testing.assert_close(a.logits, p.logits, atol=1e-4, rtol=0)


def test_the_triton_verify_matches_the_torch_one():
    """The Triton backend's verify: fused_recurrent_kda over the packed segments with step states
    (``TRITON_INTERPRET=1`` on a CPU, set by conftest)."""
    pytest.importorskip("triton")
    N, L, H, K, V = 2, 3, 2, 16, 16
    q, k, v, g, beta = (t.reshape(N, L, *t.shape[2:]) for t in make_kda_inputs(1, N * L, H, K, V, seed=5))
    pool = make_state(4, H, K, V, seed=6)
    before = pool.clone()
    idx = torch.tensor([3, 1])
    o_t, s_t = KDAKernelDispatcher("torch").verify_(q, k, v, g, beta, state_pool=pool, state_indices=idx)
    o_x, s_x = KDAKernelDispatcher("triton").verify_(q, k, v, g, beta, state_pool=pool, state_indices=idx)
    torch.testing.assert_close(o_x, o_t, atol=1e-5, rtol=0)
    torch.testing.assert_close(s_x, s_t, atol=1e-5, rtol=0)
    assert torch.equal(pool, before)
