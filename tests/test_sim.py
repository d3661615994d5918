"""The cost-model simulator drives the engine's own cache code: on the tiny model it reproduces the
engine's cache hits exactly; the alpha tuner keeps the alpha that saves the most FLOPs; options and
budgets are checked."""

from __future__ import annotations

import pytest
import torch

from kda_ref import LLM, SamplingParams
from kda_ref.memory import UnifiedMemoryPool, VirtualPool
from kda_ref.model import ModelConfig
from kda_ref.sim import CacheSimulator, SimulationError, tune_alpha
from kda_ref.workloads import make
from test_radix_engine import model  # noqa: F401  (fixture)

POLICIES = {
    "radix-chunk": ("radix", {"checkpoint_policy": "chunk"}),
    "radix-branch": ("radix", {"checkpoint_policy": "branch"}),
    "radix-sglang": ("radix", {"checkpoint_policy": "sglang", "track_interval": 64}),
    "block-align": ("block", {"mamba_cache_mode": "align"}),
    "block-all-reachable-partial": ("block", {"mamba_cache_mode": "all", "retention_interval": 0, "partial_hits": True}),
    "block-marconi": ("block", {"mamba_cache_mode": "all", "retention_interval": 128, "eviction": "marconi"}),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in ("radix-sglang", "block-all-reachable-partial")
                                                else pytest.mark.slow) for n in POLICIES])
def test_simulator_reproduces_the_engine_hits(model, name):  # noqa: F811
    """Serve a workload on the real engine one request at a time, then feed the simulator the same
    prompts with the outputs the engine produced: the same cache code must make the same decisions
    (hits, reused tokens, checkpoints, evictions) — here under memory pressure too."""
    kind, opts = POLICIES[name]
    w = make("multi_turn", seed=3, scale="tiny", num_requests=10)
    sizes = UnifiedMemoryPool(model.config, 1 << 20, page_size=1).sizes
    budget = 6 * sizes.state_bytes + 400 * sizes.kv_page_bytes  # ~6 states, 400 tokens of KV: the caches must evict
    llm = LLM(model, prefix_cache=kind, memory_budget_bytes=budget, max_num_batched_tokens=128, **opts)
    served = []
    for r in w.requests:
        out = llm.generate([list(r.prompt)], SamplingParams(max_tokens=len(r.output), ignore_eos=True))[0]
        served.append((r.prompt, out.token_ids))
    sim = CacheSimulator(model.config, kind, budget, opts, token_budget=128, evict_batch=0.0,
                         dtype=torch.float32)
    res = sim.run(served)
    s = llm.stats()
    assert res.cached_tokens == s["cached_prompt_tokens"] > 0
    assert res.hits == s["hits"]
    assert sim.prefix_cache.stats["checkpoints_evicted"] == s["checkpoints_evicted"] > 0
    assert sim.prefix_cache.occupancy() == llm.prefix_cache.occupancy()


def test_alpha_tuner_keeps_the_alpha_that_saves_most_flops():
    cfg = ModelConfig.kimi_linear_48b()
    w = make("multi_turn", seed=1, scale="large", num_requests=90)
    reqs = [(r.prompt, r.output) for r in w.requests]
    opts = {"block_size": 512, "mamba_cache_mode": "all", "retention_interval": 0, "partial_hits": True,
            "eviction": "marconi"}
    sim = CacheSimulator(cfg, "block", 2 << 30, dict(opts, marconi_alpha="auto"), alpha_grid=(0.0, 1.0, 2.0))
    warmup, window = reqs[:30], reqs[30:]
    saved = {}
    for alpha in (0.0, 1.0, 2.0):  # each alpha replayed on its own
        trial = CacheSimulator(cfg, "block", 2 << 30, dict(opts, marconi_alpha=alpha))
        trial.run(warmup)
        before = trial.result.flops_saved
        for i, (p, o) in enumerate(window, start=len(warmup)):
            trial.serve(i, p, o)
        saved[alpha] = trial.result.flops_saved - before
    assert len(set(saved.values())) > 1, "a constructed case where alpha matters"
    best = tune_alpha(sim, warmup, window)
    assert saved[best] == max(saved.values())


def test_auto_alpha_tunes_after_the_first_eviction():
    cfg = ModelConfig.kimi_linear_48b()
    w = make("few_shot", seed=1, scale="large", num_requests=120)
    sim = CacheSimulator(cfg, "block", 2 << 30, {"mamba_cache_mode": "all", "retention_interval": 0,
                                                 "eviction": "marconi", "marconi_alpha": "auto"},
                         alpha_grid=(0.0, 2.0), max_window=40)
    res = sim.run(w.requests)
    assert res.evictions > 0 and res.alpha in (0.0, 2.0)
    assert sim.prefix_cache.table.alpha == res.alpha


def test_virtual_pool_has_the_48b_sizes_without_tensors():
    pool = VirtualPool(ModelConfig.kimi_linear_48b(), 80 << 30, page_size=16)
    assert pool.sizes.state_bytes == 43_417_600  # 41.4 MiB: fp32 recurrent + bf16 conv, 20 KDA layers
    assert pool.sizes.kv_page_bytes == 16 * 8064
    assert not hasattr(pool, "tensors")
    ids = pool.alloc("kda_state", 3, owner=1)
    pool.free("kda_state", ids)
    assert pool.is_empty()


def test_results_are_consistent():
    cfg = ModelConfig.kimi_linear_48b()
    w = make("shared_system_prompt", seed=0, scale="large", num_requests=60)
    none = CacheSimulator(cfg, "none", 8 << 30).run(w.requests)
    block = CacheSimulator(cfg, "block", 8 << 30, {"mamba_cache_mode": "all"}).run(w.requests)
    assert none.cached_tokens == 0 and none.flops_saved == 0
    assert block.prompt_tokens == none.prompt_tokens and block.prefill_flops == none.prefill_flops
    assert 0 < block.cached_tokens <= w.stats()["shared_prefix_tokens"]
    assert 0 < block.flops_saved_frac < 1
    s = block.summary()
    assert s["ttft_mean_ms"] < none.summary()["ttft_mean_ms"]
    assert s["peak_checkpoint_gib"] <= 8


@pytest.mark.parametrize("kind,opts,match", [
    ("radix", {"block_size": 64}, "^options:"),
    ("block", {"checkpoint_policy": "chunk"}, "^options:"),
    ("none", {"eviction": "lru"}, "^options:"),
    ("lsm", {}, "^cache:"),
    ("block", {"marconi_alpha": "auto"}, "^marconi_alpha:"),
])
def test_bad_options(kind, opts, match):
    with pytest.raises(SimulationError, match=match):
        CacheSimulator(ModelConfig.tiny(), kind, 1 << 24, opts)


def test_budget_too_small_is_a_clear_error():
    with pytest.raises(SimulationError, match="budget_bytes"):
        CacheSimulator(ModelConfig.kimi_linear_48b(), "block", 1 << 20)
    sim = CacheSimulator(ModelConfig.kimi_linear_48b(), "block", 50 << 20)  # one state and a little KV
    with pytest.raises(SimulationError, match="budget_bytes.*KV"):
        sim.serve(0, list(range(5000)), [1, 2])


def test_the_p95_is_the_nearest_rank_and_an_empty_output_is_named():
    """The p95 took rank int(0.95 n), one too high (of 20 values, the largest); a request with no output token
    was an IndexError from deep inside the simulation."""
    from kda_ref.sim.simulator import SimResult

    r = SimResult(policy="none", budget_bytes=1 << 30)
    r.ttft_s = [i / 1000 for i in range(1, 21)]  # 1 .. 20 ms
    assert r.summary()["ttft_p95_ms"] == pytest.approx(19.0)
    r.ttft_s = [i / 1000 for i in range(1, 101)]
    assert r.summary()["ttft_p95_ms"] == pytest.approx(95.0)
    sim = CacheSimulator(ModelConfig.tiny(), "none", 1 << 24)
    with pytest.raises(SimulationError, match="^requests: request 0 has no output token"):
        sim.run([((1, 2, 3), ())])
    assert sim.pool.is_empty()  # refused before its slot or pages were taken
