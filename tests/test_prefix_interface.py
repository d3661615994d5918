"""One prefix-cache interface, one factory, option objects, typed forward results, tracing per engine."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.cache import (BlockCacheOptions, BlockPrefixCache, NoPrefixCache, RadixCacheOptions, RadixPrefixCache,
                           Sequence, cache_options, make_prefix_cache, pool_page_size)
from kda_ref.engine import Request
from kda_ref.memory import PageKind, VirtualPool
from kda_ref.model import ForwardOutput, HybridModel
from kda_ref.trace import TraceRecorder

CFG = ModelConfig.micro()


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()


def test_flat_keywords_and_option_objects_build_the_same_cache():
    assert cache_options("none") is None
    assert cache_options("radix", checkpoint_policy="every_n", checkpoint_interval=128) == \
        RadixCacheOptions(checkpoint_policy="every_n", checkpoint_interval=128)
    opts = BlockCacheOptions(block_size=32, hash_unit=8, retention_interval=0)
    assert cache_options(opts) is opts and cache_options("block", block_size=32, hash_unit=8, retention_interval=0) == opts
    assert pool_page_size(None) == 16 and pool_page_size(RadixCacheOptions()) == 1 and pool_page_size(opts) == 8


@pytest.mark.parametrize("kind,kw,match", [
    ("radix", {"block_size": 64}, r"^options: \['block_size'\] do not apply to the radix cache"),
    ("block", {"checkpoint_policy": "chunk"}, r"^options: \['checkpoint_policy'\] do not apply to the block cache"),
    ("none", {"eviction": "lru"}, "^options: .*without a prefix cache"),
    ("lsm", {}, "^prefix_cache: must be one of"),
    (RadixCacheOptions(), {"checkpoint_policy": "branch"}, "^options: .*set them on the object"),
    ("block", {"block_size": 40, "hash_unit": 16}, "^block_size: must be a positive multiple of hash_unit=16"),
])
def test_bad_options_name_what_is_wrong(kind, kw, match):
    with pytest.raises(ValueError, match=match):
        cache_options(kind, **kw)
    with pytest.raises(ValueError, match=match):
        LLM(CFG, prefix_cache=kind, **kw)


def test_page_size_conflicts_are_errors():
    with pytest.raises(ValueError, match="^page_size: the radix prefix cache needs page_size=1"):
        LLM(CFG, prefix_cache="radix", page_size=16)
    with pytest.raises(ValueError, match="^page_size: the block cache uses one KV page per hash unit"):
        LLM(CFG, prefix_cache="block", hash_unit=16, page_size=8)


def test_the_factory_builds_each_cache_and_the_none_cache_is_inert():
    pool = VirtualPool(CFG, 1 << 24, page_size=1)
    assert isinstance(make_prefix_cache(RadixCacheOptions(), pool), RadixPrefixCache)
    assert isinstance(make_prefix_cache(BlockCacheOptions(hash_unit=1, block_size=64), pool), BlockPrefixCache)
    none = make_prefix_cache(None, pool)
    assert isinstance(none, NoPrefixCache) and not none.enabled
    seq = Sequence(0, list(range(100)))
    assert none.admit(seq) == 0 and none.align_chunk(seq, 37) == 37 and none.shared_tokens(seq) == 0
    assert none.make_room(PageKind.KDA_STATE, 1) and pool.is_empty()


def test_option_objects_and_flat_keywords_give_the_same_engine(model):
    prompts = [list(range(1, 150)), list(range(1, 140)) + [7, 8, 9]]
    p = SamplingParams(max_tokens=4)
    a = LLM(model, prefix_cache="block", block_size=32, hash_unit=8, retention_interval=64)
    b = LLM(model, prefix_cache=BlockCacheOptions(block_size=32, hash_unit=8, retention_interval=64))
    outs_a = [a.generate([q], p)[0] for q in prompts]  # one after the other: the second hits the first
    outs_b = [b.generate([q], p)[0] for q in prompts]
    assert [o.token_ids for o in outs_a] == [o.token_ids for o in outs_b]
    sa, sb = a.stats(), b.stats()
    assert sa["cached_prompt_tokens"] == sb["cached_prompt_tokens"] > 0
    assert sa["checkpoints_created"] == sb["checkpoints_created"]


def test_cache_bookkeeping_lives_in_the_cache_not_on_the_request(model):
    fields = {f.name for f in dataclasses.fields(Request)}
    assert not fields & {"shared_len", "cache_node", "branching_len"}
    llm = LLM(model, prefix_cache="radix")
    prompt = list(range(1, 140))
    llm.generate([prompt], SamplingParams(max_tokens=2))
    rid = llm.add_request(prompt + [5, 6], SamplingParams(max_tokens=2))
    llm.step()
    req = llm.request(rid)
    assert llm.prefix_cache.shared_tokens(req) >= 128  # read from the cache's own record
    while llm.has_unfinished():
        llm.step()
    assert llm.prefix_cache.shared_tokens(req) == 0 and not llm.prefix_cache._seqs  # released
    llm.flush_cache()
    assert llm.pool.is_empty()


def test_the_scheduler_is_the_only_driver_of_the_cache(model, monkeypatch):
    """Every cache call of a step comes from the scheduler's schedule() or postprocess()."""
    import inspect as pyinspect

    llm = LLM(model, prefix_cache="radix")
    callers = set()
    for name in ("admit", "align_chunk", "make_room", "snapshot", "donate", "release", "save_boundary_states"):
        orig = getattr(llm.prefix_cache, name)

        def spy(*a, _orig=orig, **k):
            frames = [f.function for f in pyinspect.stack()[1:10]]  # the nearest of them drove the call
            callers.add(next(f for f in frames if f in ("schedule", "postprocess", "abort", "step")))
            return _orig(*a, **k)
        monkeypatch.setattr(llm.prefix_cache, name, spy)
    llm.generate([list(range(1, 100)), list(range(1, 90))], SamplingParams(max_tokens=3))
    assert callers == {"schedule", "postprocess"}


def test_forward_output_is_typed_and_the_batch_stays_metadata(model):
    from kda_ref.model import RequestCache

    cache = RequestCache(CFG, 1, max_tokens=200)
    b = cache.batch([150], return_chunk_states=True, probe=True)
    out = model.forward_output(torch.arange(1, 151), b, cache.tensors)
    assert isinstance(out, ForwardOutput) and out.logits.shape == (150, CFG.vocab_size)
    for layer in CFG.kda_layer_ids:
        st = out.chunk_states[layer]
        assert [p.tolist() for p in st.positions] == [[0, 64, 128]] and len(st) == 3
        assert st.recurrent.shape[1:] == (CFG.linear_num_heads, CFG.linear_head_dim, CFG.linear_head_dim)
        assert out.probes[layer].g.shape == (150, CFG.linear_num_heads, CFG.linear_head_dim)
    assert set(out.chunk_states) == set(CFG.kda_layer_ids) and not out.step_states
    assert not any(hasattr(b, name) for name in ("chunk_states", "step_states", "probes"))


def _kernel_tokens(rec: TraceRecorder) -> dict[int, int]:
    """step -> tokens the first KDA layer's kernels saw in that step."""
    layer0 = CFG.kda_layer_ids[0]
    out: dict[int, int] = {}
    for e in rec.events_of("kernel_dispatch"):
        if e.layer == layer0:
            out[e.step] = out.get(e.step, 0) + e.num_tokens
    return out


def test_two_traced_engines_on_one_model_each_record_only_their_own_kernels(model):
    rec_a, rec_b = TraceRecorder(), TraceRecorder()
    a = LLM(model, tracer=rec_a)
    b = LLM(model, tracer=rec_b)
    LLM(model)  # an untraced engine built last must not switch the others' tracing off
    a.add_request(list(range(1, 40)), SamplingParams(max_tokens=3))
    b.add_request(list(range(1, 70)), SamplingParams(max_tokens=5))
    b.add_request(list(range(3, 20)), SamplingParams(max_tokens=2))
    while a.has_unfinished() or b.has_unfinished():  # interleaved
        if a.has_unfinished():
            a.step()
        if b.has_unfinished():
            b.step()
    for rec in (rec_a, rec_b):
        scheduled = {e.step: e.tokens_scheduled for e in rec.events_of("schedule_decision")}
        assert _kernel_tokens(rec) == scheduled and scheduled
    assert sum(_kernel_tokens(rec_a).values()) == 39 + 2 and sum(_kernel_tokens(rec_b).values()) == 69 + 4 + 17 + 1
