"""Which prefix-cache policy to pick: every workload family x memory budget x policy, at 48B sizes.

    kda-ref bench workloads [--requests 1000] [--budgets-gib 4 16 64] [--out-csv docs/bench/workloads.csv]
    kda-ref bench workloads --engine            # spot check on the real tiny engine
    kda-ref bench workloads --scale 10000       # time the simulator on 10k requests

``docs/article.md#s9-2`` (``cache.checkpoint_density``): the cost-model simulator (:mod:`kda_ref.sim`) serves
seeded ``scale="large"`` workloads through the engine's own caches with Kimi-Linear-48B's byte and FLOP arithmetic;
``--engine`` runs the ``scale="tiny"`` ones on the tiny model and checks every output against the cache-less run.
Policies mirror SGLang's tracking (extra_buffer, no_buffer), vLLM's ``mamba_cache_mode="all"`` (gone from its 0.32
release) and Marconi's admission and eviction.
Design notes: ``docs/benchmarks.md#prefix-cache-policies-on-workloads``;
method: ``docs/benchmarks.md#policies-of-the-workload-benchmark``
"""

from __future__ import annotations

import time

from tqdm import tqdm

from ..model import ModelConfig
from ..sim import CacheSimulator
from ..workloads import FAMILIES, make
from .args import WORKLOAD_POLICIES
from .report import md_table, report

POLICIES = WORKLOAD_POLICIES  # name -> (prefix_cache, options), beside the torch-free arguments
REFERENCE, OURS, DENSE = "marconi", "ours: marconi + unit replay", "block dense"
COLUMNS = ["family", "budget_gib", "policy", "cache", "token_hit_rate", "flops_saved_frac", "prefill_tflops",
           "flops_saved_tflops", "peak_checkpoint_gib", "mean_checkpoint_gib", "ttft_mean_ms", "ttft_p95_ms", "hits",
           "evictions", "alpha", "requests", "wall_s"]


def run(families, budgets_gib, policies, requests: int, seed: int = 0, progress: bool = True) -> list[dict]:
    cfg = ModelConfig.kimi_linear_48b()
    rows = []
    jobs = [(f, b, p) for f in families for b in budgets_gib for p in policies]
    workloads = {f: make(f, seed=seed, scale="large", num_requests=requests) for f in families}
    for fam, budget, pol in tqdm(jobs, desc="workloads x budgets x policies", disable=not progress):
        kind, opts = POLICIES[pol]
        sim = CacheSimulator(cfg, kind, int(budget * 2**30), opts, name=pol)
        s = sim.run(workloads[fam].requests).summary()
        s.update(family=fam, budget_gib=budget, cache=kind)
        rows.append({k: s[k] for k in COLUMNS})
    return rows


def comparisons(rows: list[dict]) -> list[dict]:
    """Per family and budget: the best hit rate against dense per-block checkpointing (Marconi's
    "up to 34.4x" axis), and our policy against the Marconi-style reference (FLOPs saved)."""
    out = []
    keyed = {(r["family"], r["budget_gib"], r["policy"]): r for r in rows}
    for fam, budget in sorted({(r["family"], r["budget_gib"]) for r in rows}):
        get = lambda p: keyed.get((fam, budget, p))  # noqa: E731
        ref, ours, dense = get(REFERENCE), get(OURS), get(DENSE)
        row = {"family": fam, "budget_gib": budget}
        if ref and dense:
            row["marconi_vs_dense_hit_x"] = ref["token_hit_rate"] / max(dense["token_hit_rate"], 1e-9)
        if ref and ours:
            row["ours_vs_marconi_flops"] = ours["flops_saved_frac"] / max(ref["flops_saved_frac"], 1e-9)
        out.append(row)
    return out


def to_markdown(rows: list[dict]) -> str:
    return md_table(["family", "budget GiB", "policy", "hit rate", "FLOPs saved", "peak ckpt GiB", "TTFT mean / p95 ms",
                     "evictions", "alpha"],
                    ([r["family"], f"{r['budget_gib']:g}", r["policy"], f"{r['token_hit_rate']:.1%}",
                      f"{r['flops_saved_frac']:.1%}", f"{r['peak_checkpoint_gib']:.1f}",
                      f"{r['ttft_mean_ms']:.0f} / {r['ttft_p95_ms']:.0f}", r["evictions"],
                      "" if r["alpha"] is None else f"{r['alpha']:g}"] for r in rows))


def engine_spot_check(seed: int = 0, progress: bool = True, families=None, policies=None,
                      num_requests: int = 12) -> list[dict]:
    """Tiny workloads on the real engine: every policy family vs no cache, outputs compared."""
    import torch

    from ..engine import LLM, SamplingParams
    from ..model import HybridModel

    torch.set_num_threads(1)  # correctness, not speed: one thread does not fight other processes for cores
    model = HybridModel(ModelConfig.tiny(), seed=seed).eval()
    small = {"block_size": 64, "hash_unit": 16, "mamba_cache_mode": "all"}
    table = {
        "none": ("none", {}),
        "radix sglang": ("radix", {"checkpoint_policy": "sglang", "track_interval": 64}),
        "radix sglang no_buffer": ("radix", {"checkpoint_policy": "sglang_no_buffer"}),
        "radix dense-64": ("radix", {"checkpoint_policy": "chunk"}),
        "radix branch": ("radix", {"checkpoint_policy": "branch"}),
        "block dense": ("block", dict(small)),
        "block interval-128": ("block", dict(small, retention_interval=128)),
        "block reachable": ("block", dict(small, retention_interval=0, partial_hits=True)),
        "marconi (alpha 1)": ("block", dict(small, retention_interval=0, partial_hits=True, eviction="marconi")),
        "block align": ("block", {"mamba_cache_mode": "align"}),
    }
    chosen = ["none"] + [p for p in (policies or table) if p != "none"]
    rows = []
    jobs = [(f, p) for f in (families or FAMILIES) for p in chosen]
    ref_out = {}
    for fam, pol in tqdm(jobs, desc="engine spot check", disable=not progress):
        w = make(fam, seed=seed, scale="tiny", num_requests=num_requests)
        kind, opts = table[pol]
        llm = LLM(model, prefix_cache=kind, max_num_batched_tokens=256, memory_budget_bytes=16 << 20, **opts)
        t0 = time.perf_counter()
        outs = [llm.generate([list(r.prompt)], SamplingParams(max_tokens=len(r.output), ignore_eos=True,
                                                              return_logits=True))[0] for r in w.requests]
        wall = time.perf_counter() - t0
        if pol == "none":
            ref_out[fam] = outs
        ref = ref_out[fam]
        same = all(a.token_ids == b.token_ids for a, b in zip(outs, ref))
        drift = max(float((a.logits - b.logits).abs().max()) for a, b in zip(outs, ref))
        if not same or drift > 1e-4:
            raise AssertionError(f"{fam} / {pol}: outputs changed with the cache (max logit drift {drift:.2e})")
        s = llm.stats()
        rows.append({"family": fam, "policy": pol, "prompt_tokens": s["prompt_tokens"],
                     "cached_prompt_tokens": s["cached_prompt_tokens"],
                     "token_hit_rate": s["cached_prompt_tokens"] / s["prompt_tokens"],
                     "max_logit_drift": drift, "wall_s": wall})
    return rows


def scale_check(num_requests: int, seed: int = 0) -> list[dict]:
    """Simulator speed: ``num_requests`` large requests per policy family, wall time measured."""
    cfg = ModelConfig.kimi_linear_48b()
    t0 = time.perf_counter()
    w = make("shared_system_prompt", seed=seed, scale="large", num_requests=num_requests)
    gen = time.perf_counter() - t0
    rows = []
    for pol in ("block dense", "block reachable", OURS, "radix branch"):
        kind, opts = POLICIES[pol]
        res = CacheSimulator(cfg, kind, 32 << 30, opts, name=pol).run(w.requests, progress=True)
        rows.append({"policy": pol, "requests": res.requests, "prompt_tokens": res.prompt_tokens,
                     "generate_s": gen, "simulate_s": res.wall_s, "token_hit_rate": res.token_hit_rate})
    return rows



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench workloads`` parses them before importing this)."""
    if a.engine:
        rows = engine_spot_check(a.seed)
        report(a, rows, "\n".join(f"{r['family']:22s} {r['policy']:20s} hit {r['token_hit_rate']:6.1%}  "
                                  f"drift {r['max_logit_drift']:.1e}  {r['wall_s']:.1f}s" for r in rows), csv_rows=rows)
        return
    if a.scale:
        rows = scale_check(a.scale, a.seed)
        report(a, rows, "\n".join(str(r) for r in rows), csv_rows=rows)
        return
    rows = run(a.families, a.budgets_gib, a.policies, a.requests, a.seed)
    found = comparisons(rows)
    report(a, {"rows": rows, "comparisons": found}, "\n".join([to_markdown(rows), *map(str, found)]),
           csv_rows=rows, csv_columns=COLUMNS)

if __name__ == "__main__":  # as `kda-ref bench workloads` runs it
    from .entry import script

    raise SystemExit(script("workloads"))
