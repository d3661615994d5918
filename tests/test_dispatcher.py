"""KDAKernelDispatcher: phase -> kernel, state-pool semantics, and torch == triton backends."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kda_ref.model import HybridModel, ModelConfig, RequestCache
from kda_ref.ops import KDAKernelDispatcher, KDAPhase, recurrent_kda
from kda_inputs import make_kda_inputs, make_state


def test_phase_selects_kernel():
    d = KDAKernelDispatcher("torch")
    assert d.select("extend").kernel == "chunk_kda"
    assert d.select(KDAPhase.DECODE).kernel == "fused_recurrent_kda"
    assert d.select("verify").kernel == "fused_recurrent_kda"
    with pytest.raises(ValueError, match="^phase:"):
        d.select("prefill-ish")
    with pytest.raises(ValueError, match="^backend:"):
        KDAKernelDispatcher("cuda")


def _pool_case(seed=0):
    lens = [5, 1, 12]
    q, k, v, g, b = make_kda_inputs(1, sum(lens), 2, 8, 8, seed=seed)
    cu = torch.tensor([0, 5, 6, 18])
    pool = make_state(6, 2, 8, 8, seed=seed + 1)
    idx = torch.tensor([4, 1, 3])
    has = torch.tensor([True, False, True])
    return q, k, v, g, b, cu, pool, idx, has


def _expected(q, k, v, g, b, cu, pool, idx, has):
    init = pool[idx] * has.float().view(-1, 1, 1, 1)
    return recurrent_kda(q, k, v, g, b, initial_state=init, output_final_state=True, cu_seqlens=cu)


BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.triton)]


@pytest.mark.parametrize("fresh", [[True, True, True], [False, True, False]])
def test_a_sequence_without_a_state_starts_from_zeros_whatever_its_slot_holds(fresh):
    """The torch path's initial states: a fresh sequence's slot is not read (every sequence fresh: no gather
    at all), so a slot left holding NaN does not reach it; the others continue their states."""
    q, k, v, g, b, cu, pool, idx, _ = _pool_case()
    has = ~torch.tensor(fresh)
    pool[idx[~has]] = float("nan")
    o_ref, s_ref = _expected(q, k, v, g, b, cu, torch.nan_to_num(pool, nan=0.0), idx, has)
    res = KDAKernelDispatcher("torch", chunk_size=16)("extend", q, k, v, g, b, state_pool=pool, state_indices=idx,
                                                       cu_seqlens=cu, has_initial_state=has)
    torch.testing.assert_close(res.o, o_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(pool[idx], s_ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_extend_reads_and_writes_the_pool_by_index(backend):
    q, k, v, g, b, cu, pool, idx, has = _pool_case()
    o_ref, s_ref = _expected(q, k, v, g, b, cu, pool, idx, has)
    before = pool.clone()
    calls = []
    d = KDAKernelDispatcher(backend, chunk_size=16, on_dispatch=calls.append)
    res = d("extend", q, k, v, g, b, state_pool=pool, state_indices=idx, cu_seqlens=cu, has_initial_state=has,
            return_chunk_states=True)
    torch.testing.assert_close(res.o, o_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(pool[idx], s_ref, atol=1e-5, rtol=0)
    untouched = [i for i in range(6) if i not in idx.tolist()]
    assert torch.equal(pool[untouched], before[untouched])
    assert res.chunk_states.shape == (1, 1 + 1 + 1, 2, 8, 8)
    assert calls and calls[0].kernel == "chunk_kda" and calls[0].backend == backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_and_verify(backend):
    q, k, v, g, b = make_kda_inputs(1, 3, 2, 8, 8, seed=3)
    cu = torch.arange(4)
    pool = make_state(5, 2, 8, 8, seed=4)
    idx = torch.tensor([2, 0, 4])
    o_ref, s_ref = _expected(q, k, v, g, b, cu, pool, idx, torch.ones(3, dtype=torch.bool))
    d = KDAKernelDispatcher(backend)
    # verify first: per-step states, pool untouched
    before = pool.clone()
    res_v = d("verify", q, k, v, g, b, state_pool=pool, state_indices=idx, cu_seqlens=cu)
    assert torch.equal(pool, before)
    torch.testing.assert_close(res_v.o, o_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(res_v.step_states[0], s_ref, atol=1e-5, rtol=0)  # one token each
    res = d("decode", q, k, v, g, b, state_pool=pool, state_indices=idx, cu_seqlens=cu)
    torch.testing.assert_close(res.o, o_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(pool[idx], s_ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_state_indices_leave_the_pool_intact(backend):
    """Both backends refuse the same calls by name. The torch path took a repeated slot (every sequence read
    one state and only one final state was kept), float flags (they scaled the state), flags of the wrong
    length (broadcast over every sequence) and, in a decode, a ``cu_seqlens`` that does not describe the batch."""
    q, k, v, g, b, cu, pool, idx, has = _pool_case()
    before = pool.clone()
    d = KDAKernelDispatcher(backend, chunk_size=16)
    run = lambda phase, *a, **kw: d(phase, *(a or (q, k, v, g, b)), state_pool=pool, **kw)  # noqa: E731
    for bad in ([0, 1, 9], [0, 1], [4, 1, 4]):
        with pytest.raises(ValueError, match="^state_indices:"):
            run("extend", state_indices=torch.tensor(bad), cu_seqlens=cu)
    for flags in (torch.tensor([0.3, 1.0, 1.0]), torch.tensor([True])):
        with pytest.raises(ValueError, match="^has_initial_state:"):
            run("extend", state_indices=idx, cu_seqlens=cu, has_initial_state=flags)
    with pytest.raises(ValueError, match="^q:"):
        run("decode", state_indices=idx, cu_seqlens=cu)
    one = [t[:, :3] for t in (q, k, v, g, b)]  # a decode of three sequences
    with pytest.raises(ValueError, match="^cu_seqlens:"):
        run("decode", *one, state_indices=idx, cu_seqlens=torch.tensor([0, 5, 6, 9]))
    with pytest.raises(ValueError, match="^state_indices:"):
        run("decode", *one, state_indices=torch.tensor([2, 2, 0]), cu_seqlens=torch.arange(4))
    assert torch.equal(pool, before)


@pytest.mark.triton
@torch.no_grad()
def test_model_triton_backend_matches_torch_backend():
    """The whole hybrid model on the Triton kernels (chunk prefill, recurrent decode, paged MLA
    decode) gives the torch backend's logits. Two KDA heads of 32 instead of four of 64: the
    interpreter's time grows with the grid, and two heads still check the per-head indexing."""
    cfg = dataclasses.replace(ModelConfig.tiny(), linear_num_heads=2, linear_head_dim=32)
    ref = HybridModel(cfg, seed=0, backend="torch", chunk_size=16).eval()
    tri = HybridModel(cfg, seed=0, backend="triton", chunk_size=16).eval()
    ids = torch.randint(0, 256, (26,), generator=torch.Generator().manual_seed(0))
    outs = {}
    for name, m in (("torch", ref), ("triton", tri)):
        cache = RequestCache(cfg, 2, max_tokens=32, page_size=8)
        b = cache.batch([20, 3])
        first = m(torch.cat([ids[:20], ids[20:23]]), b, cache.tensors, logits="last")
        cache.advance(b)
        b = cache.batch([1, 1])
        second = m(torch.stack([ids[20], ids[23]]), b, cache.tensors, logits="last")
        outs[name] = torch.cat([first, second])
    torch.testing.assert_close(outs["triton"], outs["torch"], atol=1e-4, rtol=0)
