"""Caching never changes the answer: the engine with the vLLM-style block cache vs the model alone,
under every cache mode, retention and eviction policy; partial hits; options; memory pressure."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kda_ref import LLM, SamplingParams
from kda_ref.memory import PageKind
from kda_ref.trace import TraceRecorder
from test_engine import STATE, check_against_reference
from test_radix_engine import P, model, rand, run_one_by_one  # noqa: F401  (fixture)

KV16 = 16 * 320  # one KV page of 16 tokens of the tiny model (1 MLA layer x 80 fp32)

CONFIGS = {
    "align-dense-lru": dict(mamba_cache_mode="align"),
    "all-dense-lru": dict(mamba_cache_mode="all"),
    "align-interval128": dict(mamba_cache_mode="align", retention_interval=128),
    "all-reachable-partial": dict(mamba_cache_mode="all", retention_interval=0, partial_hits=True),
    "align-reachable-marconi": dict(mamba_cache_mode="align", retention_interval=0, eviction="marconi"),
    "all-interval128-partial-marconi": dict(mamba_cache_mode="all", retention_interval=128, partial_hits=True,
                                            eviction="marconi", marconi_alpha=2.0),
    "align-reachable-unit-replay": dict(mamba_cache_mode="align", retention_interval=0, partial_hits=True,
                                        replay_granularity="unit", eviction="marconi"),
}


def finish(llm):
    llm.prefix_cache.table.check()
    llm.flush_cache()
    assert llm.pool.is_empty(), llm.pool.ownership()
    assert llm.prefix_cache.table.num_kv_pages() == 0


def workload():
    """Shared system prompt, a multi-turn follow-up, a branch, an identical repeat."""
    system = rand(150, 1)
    a = system + rand(40, 2)
    b = system + rand(25, 3)
    c = a + rand(30, 4)  # extends a's prompt (a later turn without the answer)
    d = system[:90] + rand(20, 5)  # diverges inside the system prompt
    return [a, b, c, d, a]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_mode_and_policy_keeps_the_answers(model, name):
    prompts = workload()
    llm = LLM(model, prefix_cache="block", max_num_batched_tokens=80, **CONFIGS[name])
    outs = run_one_by_one(llm, prompts)
    check_against_reference(llm, prompts, 8, outs)
    s = llm.stats()
    # reachable-only retention misses the first divergence from a path (no junction state yet)
    assert s["hits"] >= 2 and s["cached_prompt_tokens"] >= 2 * 128, s
    finish(llm)


def test_dense_align_caches_exactly_the_step_end_block_boundaries(model):
    prompt = rand(200, 7)
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="align", max_num_batched_tokens=100)
    llm.generate([prompt], SamplingParams(max_tokens=1))
    # steps end at 64 (100 aligned down), 128 (164 -> 128), 192 (forced last cacheable chunk), 200;
    # every one of them on a block boundary is a state
    assert llm.prefix_cache.table.state_positions() == [64, 128, 192]
    llm2 = LLM(model, prefix_cache="block", mamba_cache_mode="align", max_num_batched_tokens=512)
    llm2.generate([prompt], SamplingParams(max_tokens=1))
    assert llm2.prefix_cache.table.state_positions() == [192], "one-shot prefill: only the forced last block"
    llm3 = LLM(model, prefix_cache="block", mamba_cache_mode="all", max_num_batched_tokens=512)
    llm3.generate([prompt], SamplingParams(max_tokens=1))
    assert llm3.prefix_cache.table.state_positions() == [64, 128, 192], "'all': the chunk kernel's states"
    for x in (llm, llm2, llm3):
        finish(x)


def test_hit_is_the_minimum_over_groups_and_block_aligned(model):
    system = rand(150, 11)
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="all", max_num_batched_tokens=512)
    first = llm.generate([system + rand(10, 12)], P)
    # KV is cached for every full 16-token unit (160), states only at blocks 64 and 128
    out = llm.generate([system + rand(5, 13)], P)
    s = llm.stats()
    assert s["cached_prompt_tokens"] == 128, "the KV group matched 144 tokens, the state group 128"
    assert first[0].metrics["cached_tokens"] == 0 and out[0].metrics["cached_tokens"] == 128  # per request
    check_against_reference(llm, [system + rand(5, 13)], 8, out)
    finish(llm)


def test_partial_hit_reuses_a_state_inside_a_block(model):
    system = rand(150, 21)  # the shared prefix ends inside block 2 (128..192)
    p1, p2, p3 = system + rand(30, 22), system + rand(30, 23), system + rand(30, 24)
    full = LLM(model, prefix_cache="block", mamba_cache_mode="align", retention_interval=0, partial_hits=True,
               max_num_batched_tokens=512)
    outs = run_one_by_one(full, [p1, p2, p3])
    check_against_reference(full, [p1, p2, p3], 8, outs)
    s = full.stats()
    # p2 finds the junction at 144 (the last unit boundary of the shared KV) and saves a state there;
    # p3 resumes from it: a partial hit inside a block
    assert s["partial_hits"] >= 1 and 144 in full.prefix_cache.table.state_positions()
    coarse = LLM(model, prefix_cache="block", mamba_cache_mode="align", retention_interval=0,
                 max_num_batched_tokens=512)
    run_one_by_one(coarse, [p1, p2, p3])
    assert coarse.stats()["partial_hits"] == 0
    assert coarse.stats()["cached_prompt_tokens"] < s["cached_prompt_tokens"], "block granularity reuses less"
    finish(full)
    finish(coarse)


def test_partial_hit_copy_on_write_isolation(model):
    """Two consumers restore the same partial state concurrently and run different tails: the cached
    state is never written (both answers exact, the checkpoint unchanged)."""
    import torch

    system = rand(150, 31)
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="align", retention_interval=0, partial_hits=True,
              max_num_batched_tokens=512, max_num_seqs=4)
    warm = [system + rand(20, 32), system + rand(20, 33)]
    run_one_by_one(llm, warm)
    node = llm.prefix_cache.table.node_at(llm.prefix_cache.hashes(type("R", (), {"req_id": -1, "all_token_ids": system})(), 144), 144)
    assert node is not None and node.state is not None
    before = llm.pool.tensors.recurrent[:, node.state].clone(), llm.pool.tensors.conv[:, node.state].clone()
    consumers = [system + rand(n, 40 + n) for n in (3, 17, 33)]
    outs = llm.generate(consumers, P)  # admitted together: each gets its own active copy
    check_against_reference(llm, consumers, 8, outs)
    assert llm.stats()["partial_hits"] >= 3
    assert torch.equal(llm.pool.tensors.recurrent[:, node.state], before[0])
    assert torch.equal(llm.pool.tensors.conv[:, node.state], before[1])
    finish(llm)


def test_reachable_retention_keeps_junctions_and_replay_points_only(model):
    convo = rand(100, 51)
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="all", retention_interval=0, max_num_batched_tokens=512)
    dense = LLM(model, prefix_cache="block", mamba_cache_mode="all", max_num_batched_tokens=512)
    prompts = []
    for turn in range(3):
        convo = convo + rand(40, 60 + turn)
        prompts.append(list(convo))
        out = llm.generate([convo], P)[0]
        assert dense.generate([convo], P)[0].token_ids == out.token_ids
        convo = convo + out.token_ids
    sparse_states, dense_states = llm.prefix_cache.table.state_positions(), dense.prefix_cache.table.state_positions()
    # turn lengths 147, 195, 243 computed tokens: the replay points are the last block boundary each
    # turn passed beyond its hit (128, 192; turn 3 passed none beyond 192), not every block
    assert sparse_states == [128, 192] and dense_states == [64, 128, 192]
    assert llm.stats()["pending_committed"] == 2
    # and the replay points are what multi-turn needs: the same prompt tokens are reused
    assert llm.stats()["cached_prompt_tokens"] == dense.stats()["cached_prompt_tokens"] > 0
    finish(llm)
    finish(dense)


def test_interval_retention_keeps_multiples(model):
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="all", retention_interval=128, max_num_batched_tokens=512)
    llm.generate([rand(300, 71)], SamplingParams(max_tokens=1))
    # 128 and 256 by the interval; 64 and 192 dropped; the pending replay point (256) is the same block
    assert llm.prefix_cache.table.state_positions() == [128, 256]
    finish(llm)


@pytest.mark.parametrize("eviction", ["lru", "marconi"])
def test_memory_pressure_evicts_but_keeps_the_answers(model, eviction):
    prompts = [rand(90, 80 + i) for i in range(6)] + [rand(90, 85)[:80] + rand(10, 99)]
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="all", eviction=eviction, max_num_batched_tokens=64,
              memory_budget_bytes=4 * STATE + 24 * KV16)
    outs = run_one_by_one(llm, prompts)
    check_against_reference(llm, prompts, 8, outs)
    s = llm.stats()
    assert s["checkpoints_evicted"] > 0 and s["hits"] >= 1, s
    assert llm.pool.used_bytes[PageKind.CHECKPOINT] == s["cached_states"] * llm.pool.sizes.state_bytes
    finish(llm)


STREAMS = given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 70)), min_size=1, max_size=6),
                st.integers(16, 128), st.integers(1, 4), st.sampled_from(list(CONFIGS)))
FIXTURE_OK = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def random_streams(model, spec, budget, max_seqs, name):
    """Prompts built from a few shared stems plus random tails, some generated together, under every
    cache mode: the answers equal the reference's. Four streams in the default run, 30 under -m slow."""
    stems = [rand(70 + 30 * i, 100 + i) for i in range(4)]
    prompts = [stems[s][: 40 + 20 * s] + rand(n, 200 + n * 7 + s) for s, n in spec]
    llm = LLM(model, prefix_cache="block", max_num_batched_tokens=budget, max_num_seqs=max_seqs, **CONFIGS[name])
    half = len(prompts) // 2
    outs = llm.generate(prompts[:half], P) + run_one_by_one(llm, prompts[half:])
    check_against_reference(llm, prompts, 8, outs)
    finish(llm)


test_random_streams = settings(max_examples=4, **FIXTURE_OK)(STREAMS(random_streams))
test_random_streams_wide = pytest.mark.slow(settings(max_examples=30, **FIXTURE_OK)(STREAMS(random_streams)))


def test_trace_names_the_vllm_concepts(model):
    rec = TraceRecorder()
    system = rand(150, 91)
    llm = LLM(model, prefix_cache="block", mamba_cache_mode="align", retention_interval=0, partial_hits=True,
              max_num_batched_tokens=512, tracer=rec)
    run_one_by_one(llm, [system + rand(20, 92), system + rand(20, 93), system + rand(20, 94)])
    ops = {(e.op, e.concepts[0]) for e in rec.events if e.kind == "cache"}
    assert ("match", "vllm.hybrid_hit") in ops
    assert ("partial_hit", "vllm.state_block.partial_hit") in ops
    assert ("pending", "vllm.retention") in ops and ("commit", "vllm.state_block") in ops


@pytest.mark.parametrize("kw,match", [
    (dict(block_size=24, hash_unit=16), "^block_size:"),
    (dict(hash_unit=0), "^hash_unit:"),
    (dict(retention_interval=-64), "^retention_interval:"),
    (dict(retention_interval=96), "^retention_interval:.*multiple"),
    (dict(mamba_cache_mode="none"), "^mamba_cache_mode:"),
    (dict(mamba_cache_mode="all", block_size=32, hash_unit=16), "^block_size:.*chunk"),
    (dict(page_size=1), "^page_size:"),
    (dict(eviction="fifo"), "^eviction:"),
    (dict(marconi_alpha=-1.0, eviction="marconi"), "^marconi_alpha:"),
])
def test_bad_options_are_clear_errors(model, kw, match):
    with pytest.raises(ValueError, match=match):
        LLM(model, prefix_cache="block", **kw)


def test_unit_replay_point_resumes_a_follow_up_near_the_end(model):
    """A conversation's next turn extends prompt + output. With the replay point moved every hash
    unit, the follow-up resumes at the last unit boundary of the previous request (here 160 of 165
    computed tokens) instead of the prompt's partial tail (144) or its last block boundary (128)."""
    first = rand(150, 131)
    prompts, outs, llms = [], [], {}
    for gran in ("block", "unit"):
        llm = LLM(model, prefix_cache="block", mamba_cache_mode="all", retention_interval=0, partial_hits=True,
                  replay_granularity=gran, max_num_batched_tokens=512)
        o1 = llm.generate([first], SamplingParams(max_tokens=16, ignore_eos=True))[0]
        follow = first + o1.token_ids + rand(20, 132)
        outs.append(llm.generate([follow], P)[0])
        prompts.append(follow)
        llms[gran] = llm
    check_against_reference(llms["unit"], prompts[1:], 8, outs[1:])
    assert llms["block"].stats()["cached_prompt_tokens"] == 144
    assert llms["unit"].stats()["cached_prompt_tokens"] == 160
    for llm in llms.values():
        finish(llm)
    with pytest.raises(ValueError, match="^replay_granularity:.*partial_hits"):
        LLM(model, prefix_cache="block", replay_granularity="unit")
    with pytest.raises(ValueError, match="^replay_granularity:"):
        LLM(model, prefix_cache="block", partial_hits=True, replay_granularity="token")
