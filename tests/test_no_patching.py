"""The public ways in that replaced monkey-patches of engine objects (``tests/test_layering.py``,
``PATCH_ALLOWANCE``): the block cache's observers, the radix cache's boundary-check switch, and the
bench's scoped switch of transformers' Kimi-Linear KDA functions to their PyTorch reference."""

from __future__ import annotations

import dataclasses

import pytest

from kda_ref import LLM, SamplingParams
from kda_ref.cache import BoundaryMismatchError
from kda_ref.cache.block.cache import BlockObservation
from kda_ref.trace import TraceRecorder
from test_radix_engine import P, model, rand  # noqa: F401  (fixture)

ONE = SamplingParams(max_tokens=1)


# ---- BlockPrefixCache.observers ---------------------------------------------------------------------------
def test_block_observers_see_every_admit_and_step_end(model):
    rec, seen = TraceRecorder(), []
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="align", max_num_batched_tokens=100, tracer=rec)
    llm.prefix_cache.observers.append(seen.append)
    prompt = rand(200, 7)
    first = llm.generate([prompt], ONE)[0]
    mine = [s for s in seen if s.req_id == first.req_id]
    assert mine[0] == BlockObservation("admit", first.req_id, 0, mine[0].slot, ())  # a miss: empty table
    # align mode: steps end at 64, 128, 192 (the forced last cacheable chunk) and 200
    assert [s.length for s in mine if s.when == "snapshot"] == [64, 128, 192, 200]

    second = llm.generate([prompt[:150] + rand(20, 8)], ONE)[0]
    (admit,) = [s for s in seen if s.req_id == second.req_id and s.when == "admit"]
    (cow,) = [e for e in rec.events if getattr(e, "op", None) == "copy_on_write" and e.req_id == second.req_id]
    assert admit.length == 128 and cow.position == 128
    # vLLM's logical state block table after the hit: a null block, then the hit's cached state
    assert admit.state_block_table == (None, cow.detail["checkpoint"]) and admit.slot == cow.detail["active"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        admit.length = 0  # a copy for reading, not a handle on the cache


def test_block_observers_can_stop_and_cost_nothing_when_absent(model):
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="align", max_num_batched_tokens=100)
    seen = []
    llm.prefix_cache.observers.append(seen.append)
    llm.generate([rand(80, 3)], ONE)
    n = len(seen)
    assert n > 0
    llm.prefix_cache.observers.remove(seen.append)
    llm.generate([rand(80, 4)], ONE)
    assert len(seen) == n and llm.prefix_cache.observers == []


# ---- RadixPrefixCache.without_boundary_check ---------------------------------------------------------------
def _corrupted_radix(model):
    """A radix LLM whose checkpoint at 64 claims another boundary: a restore there fails the check."""
    base = rand(150, 8)
    llm = LLM(model, prefix_cache="radix", max_num_batched_tokens=64)
    llm.generate([base], P)
    cache = llm.prefix_cache
    slot = cache.tree.match_prefix(base[:64]).state_slot
    length, h = cache.boundary[slot]
    cache.boundary[slot] = (length + 1, h)
    return llm, base[:100] + [1, 2], slot, base[:64]


def test_without_boundary_check_lets_admit_restore_and_puts_the_check_back(model):
    llm, follow, slot, tokens = _corrupted_radix(model)
    cache = llm.prefix_cache
    assert cache.check_boundaries
    with cache.without_boundary_check():
        assert not cache.check_boundaries
        out = llm.generate([follow], P)[0]  # the wrong-boundary restore runs instead of raising
        with pytest.raises(BoundaryMismatchError):  # a direct call still checks
            cache.check_boundary(slot, tokens, list(range(len(tokens))))
    assert len(out.token_ids) == P.max_tokens and cache.check_boundaries
    with pytest.raises(BoundaryMismatchError, match=f"checkpoint {slot}"):
        llm.generate([follow[:-1] + [3]], P)


def test_without_boundary_check_restores_on_error(model):
    llm = LLM(model, prefix_cache="radix", max_num_batched_tokens=64)
    cache = llm.prefix_cache
    with pytest.raises(RuntimeError, match="boom"):
        with cache.without_boundary_check():
            raise RuntimeError("boom")
    assert cache.check_boundaries
    cache.check_boundaries = False  # nested: the outer setting comes back
    with cache.without_boundary_check():
        pass
    assert cache.check_boundaries is False


# ---- kda_ref.bench.engine.hf_torch_kda -------------------------------------------------------------------
def _kimi_module():
    pytest.importorskip("transformers")
    try:
        from transformers.models.kimi_linear import modeling_kimi_linear as mk
    except Exception as e:  # an older transformers
        pytest.skip(f"transformers has no Kimi-Linear: {e}")
    return mk


def test_hf_torch_kda_is_scoped_and_restored_even_on_error():
    from kda_ref.bench import engine

    mk = _kimi_module()
    before = {name: getattr(mk, name) for name in engine.HF_KDA_FUNCTIONS}
    with engine.hf_torch_kda():
        for name, fn in before.items():
            assert getattr(mk, name) is getattr(fn, "__wrapped__", fn)
    assert {name: getattr(mk, name) for name in before} == before
    with pytest.raises(RuntimeError, match="boom"):
        with engine.hf_torch_kda():
            raise RuntimeError("boom")
    assert {name: getattr(mk, name) for name in before} == before


def test_hf_anchor_runs_on_the_cpu_and_leaves_transformers_untouched():
    import torch

    from kda_ref.bench import engine
    from kda_ref.model import HybridModel, ModelConfig

    mk = _kimi_module()
    before = {name: getattr(mk, name) for name in engine.HF_KDA_FUNCTIONS}
    hf = engine.hf_model(HybridModel(ModelConfig.tiny(), seed=0).eval())
    assert {name: getattr(mk, name) for name in before} == before, "loading the anchor patched nothing"
    with torch.no_grad():
        assert engine.hf_decode(hf, 1, 3, prompt_len=16) > 0
    assert {name: getattr(mk, name) for name in before} == before
