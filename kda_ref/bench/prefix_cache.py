"""The checkpoint-density dilemma, measured: checkpoint memory against recomputed prefill tokens.

    python -m kda_ref.bench.prefix_cache [--budgets-mb 2 8 64] [--out-csv docs/bench/prefix_cache.csv]

``docs/article.md#s9-2`` on the tiny model: ``shared_prefix`` and ``multi_turn`` served with no prefix cache and
with the radix cache under ``sglang``, ``sglang_no_buffer``, ``chunk``, ``every_n`` and ``branch`` at several
memory budgets, every run checked against the no-cache tokens; the 48B columns redo the memory side with
``ModelConfig.kimi_linear_48b``'s sizes.
Design notes: ``docs/benchmarks.md#checkpoint-density``, ``docs/benchmarks.md#checkpoint-density-policies-and-columns``
"""

from __future__ import annotations

import time

import torch
from tqdm import tqdm

from ..engine import LLM, SamplingParams
from ..memory import PageKind
from ..model import HybridModel, ModelConfig
from .report import md_table, report

POLICIES = {
    "none": {},
    "sglang": {"checkpoint_policy": "sglang"},
    "sglang no_buffer": {"checkpoint_policy": "sglang_no_buffer"},
    "dense (every 64)": {"checkpoint_policy": "chunk"},
    "every 256": {"checkpoint_policy": "every_n", "checkpoint_interval": 256},
    "every 1024": {"checkpoint_policy": "every_n", "checkpoint_interval": 1024},
    "branch": {"checkpoint_policy": "branch"},
}


def _rand(g: torch.Generator, n: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=g).tolist()


def serve(model: HybridModel, workload: str, policy: str, budget: int, max_tokens: int = 16) -> dict:
    """Run one workload under one policy; returns the counters and every request's tokens."""
    kw = POLICIES[policy]
    llm = LLM(model, prefix_cache="radix" if kw else "none", memory_budget_bytes=budget,
              max_num_batched_tokens=256, **kw)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    g = torch.Generator().manual_seed(7)
    outputs = []
    t0 = time.perf_counter()
    if workload == "shared_prefix":
        system = _rand(g, 384)
        for _ in range(12):
            outputs.append(llm.generate([system + _rand(g, 24)], params)[0].token_ids)
    elif workload == "multi_turn":
        convos = [_rand(g, 100) for _ in range(4)]
        for _turn in range(4):
            for c in range(len(convos)):
                out = llm.generate([convos[c]], params)[0].token_ids
                outputs.append(out)
                convos[c] = convos[c] + out + _rand(g, 20)
    else:
        raise ValueError(f"workload: unknown {workload!r}")
    wall = time.perf_counter() - t0
    s = llm.stats()
    return {"workload": workload, "policy": policy, "budget_mb": budget / 2**20, "wall_s": wall,
            "prompt_tokens": s["prompt_tokens"], "computed_prompt_tokens": s["computed_prompt_tokens"],
            "cached_prompt_tokens": s["cached_prompt_tokens"],
            "checkpoints": s.get("checkpoints_created", 0) + s.get("checkpoints_donated", 0),
            "peak_checkpoint_bytes": llm.pool.peak_bytes[PageKind.CHECKPOINT],
            "peak_checkpoints": llm.pool.peak_bytes[PageKind.CHECKPOINT] // llm.pool.sizes.of(PageKind.CHECKPOINT),
            "outputs": outputs}


def run(budgets_mb: list[int], seed: int = 0) -> list[dict]:
    model = HybridModel(ModelConfig.tiny(), seed=seed).eval()
    big = ModelConfig.kimi_linear_48b().state_bytes()
    rows = []
    jobs = [(w, b, p) for w in ("shared_prefix", "multi_turn") for b in budgets_mb for p in POLICIES]
    reference: dict[tuple, list] = {}
    for w, b, p in tqdm(jobs, desc="prefix-cache bench", unit="run"):
        r = serve(model, w, p, b << 20)
        key = (w, b)
        if p == "none":
            reference[key] = r["outputs"]
        r["same_tokens_as_no_cache"] = r["outputs"] == reference[key]
        del r["outputs"]
        r["48b_checkpoint_gib"] = r["peak_checkpoints"] * big["kda_per_seq"] / 2**30
        r["48b_recomputed_kv_gib"] = r["computed_prompt_tokens"] * big["mla_kv_per_token"] / 2**30
        rows.append(r)
    return rows


def to_markdown(rows: list[dict]) -> str:
    return md_table(["workload", "budget", "policy", "prompt tokens computed", "reused", "checkpoints made",
                     "peak ckpt memory", "48B: peak ckpt GiB", "wall s", "same tokens"],
                    ([r["workload"], f"{r['budget_mb']:g} MiB", r["policy"], f"{r['computed_prompt_tokens']:,}",
                      f"{r['cached_prompt_tokens']:,}", r["checkpoints"], f"{r['peak_checkpoint_bytes'] / 2**20:.1f} MiB",
                      f"{r['48b_checkpoint_gib']:.1f}", f"{r['wall_s']:.2f}",
                      "yes" if r["same_tokens_as_no_cache"] else "NO"] for r in rows))



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench prefix-cache`` parses them before importing this)."""
    rows = run(a.budgets_mb)
    report(a, rows, to_markdown(rows), csv_rows=rows)


if __name__ == "__main__":  # as `kda-ref bench prefix-cache` runs it
    from .entry import script

    raise SystemExit(script("prefix-cache"))
