"""Drift of compressed checkpoints: how far bf16 / int8 cached states move logits and tokens.

    python -m kda_ref.bench.checkpoints [--turns 6] [--max-tokens 24] [--requests 96]

Each checkpoint dtype serves the same multi-turn + shared-system-prompt requests on the radix cache, against
the same engine without a prefix cache; per dtype: bytes per checkpoint, cache hits, max |logit difference|,
fraction of generated tokens equal. :func:`promise` counts how many answers a lossy dtype changes (radix and
block cache, small concurrent batches, each answer against the request run alone; with fp32 none may).
Design notes: ``docs/benchmarks.md#compressed-checkpoints``
"""

from __future__ import annotations


import torch
from tqdm import tqdm

from ..engine import LLM, SamplingParams
from ..memory import PageKind
from ..model import HybridModel, ModelConfig
from .report import md_table, report


def workload(turns: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(0, 256, (n,), generator=g).tolist()  # noqa: E731
    system = rand(160)
    return [system + rand(12) for _ in range(3)] + [rand(40) for _ in range(turns)]


def run(model: HybridModel, dtype: str | None, turns: int, max_tokens: int,
        prompts: list[list[int]] | None = None) -> dict:
    """Serve the workload. Without ``prompts`` (the reference run) the conversation is built as it
    goes — turn i+1 = turn i + its output + new text — and the prompts are returned, so every
    checkpoint dtype then serves exactly the same prompts."""
    llm = LLM(model, prefix_cache="none" if dtype is None else "radix", max_num_batched_tokens=128,
              checkpoint_dtype=dtype or "fp32")
    params = SamplingParams(max_tokens=max_tokens, return_logits=True, ignore_eos=True)
    g = torch.Generator().manual_seed(1)
    build = prompts is None
    prompts = workload(turns) if build else prompts
    logits, tokens, served = [], [], []
    convo: list[int] | None = None
    for i, p in enumerate(prompts):
        if build and i >= 3:  # the conversation turns
            convo = p if convo is None else convo + tokens[-1] + torch.randint(0, 256, (9,), generator=g).tolist()
            p = convo
        out = llm.generate([p], params)[0]
        served.append(p)
        logits.append(out.logits)
        tokens.append(out.token_ids)
    return {"logits": logits, "tokens": tokens, "stats": llm.stats(), "prompts": served,
            "checkpoint_bytes": llm.pool.sizes.of(PageKind.CHECKPOINT) if dtype else None}


def measure(dtypes=("fp32", "bf16", "int8"), turns: int = 6, max_tokens: int = 24, seed: int = 0) -> dict:
    model = HybridModel(ModelConfig.tiny(), seed=seed).eval()
    ref = run(model, None, turns, max_tokens)
    rows = []
    for dt in tqdm(dtypes, desc="checkpoint dtypes", unit="dtype"):
        res = run(model, dt, turns, max_tokens, prompts=ref["prompts"])
        same = total = 0
        drift = 0.0
        for a, b, ta, tb in zip(res["logits"], ref["logits"], res["tokens"], ref["tokens"]):
            # logits are comparable up to (and including) the first position where the tokens differ
            n = min(len(ta), len(tb))
            upto = next((i for i in range(n) if ta[i] != tb[i]), n - 1) + 1
            drift = max(drift, float((a[:upto] - b[:upto]).abs().max()))
            same += sum(x == y for x, y in zip(ta, tb))
            total += len(tb)
        rows.append({"dtype": dt, "checkpoint_bytes": res["checkpoint_bytes"], "hits": res["stats"]["hits"],
                     "cached_prompt_tokens": res["stats"]["cached_prompt_tokens"],
                     "max_logit_drift": drift, "token_agreement": same / total})
    return {"turns": turns, "max_tokens": max_tokens, "rows": rows}


def stream(num_requests: int, seed: int = 0) -> list[list[int]]:
    """Prompts that restore checkpoints: four 64-128-token system prompts, each followed by a question,
    and every third request extending an earlier prompt (a conversation's next turn)."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(0, 256, (n,), generator=g).tolist()  # noqa: E731
    systems = [rand(64 + 16 * i) for i in range(4)]
    prompts: list[list[int]] = []
    for i in range(num_requests):
        if i % 3 == 2 and prompts:
            prompts.append(prompts[int(torch.randint(0, len(prompts), (1,), generator=g))] + rand(12))
        else:
            prompts.append(systems[int(torch.randint(0, 4, (1,), generator=g))] + rand(int(torch.randint(4, 24, (1,), generator=g))))
    return prompts


CACHES = {"radix": {"prefix_cache": "radix"}, "block": {"prefix_cache": "block", "block_size": 16}}


def _served(model, settings: dict, prompts, params, batch: int) -> tuple[list[list[int]], dict]:
    """Every prompt's tokens served ``batch`` at a time by ``LLM(model, **settings)``, and its stats."""
    llm = LLM(model, max_num_batched_tokens=128, **settings)
    tokens = []
    for i in range(0, len(prompts), batch):
        tokens += [o.token_ids for o in llm.generate(prompts[i:i + batch], params)]
    return tokens, llm.stats()


def promise(model: HybridModel, num_requests: int = 96, max_tokens: int = 16, batch: int = 4, seed: int = 0,
            dtypes=("fp32", "bf16", "int8"), caches=tuple(CACHES), progress=None) -> list[dict]:
    """One row per (cache, checkpoint dtype): requests served, prefix hits, and how many answers differ
    from the request run alone. ``progress(done, total)`` is called after each configuration."""
    prompts = stream(num_requests, seed)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    alone = [LLM(model).generate([p], params)[0].token_ids for p in prompts]
    rows, todo = [], [(c, d) for c in caches for d in dtypes]
    for k, (cache, dtype) in enumerate(todo):
        tokens, stats = _served(model, {**CACHES[cache], "checkpoint_dtype": dtype}, prompts, params, batch)
        changed = [i for i, (a, b) in enumerate(zip(tokens, alone)) if a != b]
        rows.append({"cache": cache, "dtype": dtype, "requests": len(prompts), "hits": stats["hits"],
                     "cached_prompt_tokens": stats["cached_prompt_tokens"], "answers_changed": len(changed),
                     "first_changed": changed[:5]})
        if progress is not None:
            progress(k + 1, len(todo))
    return rows


def promise_markdown(rows: list[dict]) -> str:
    return md_table(["cache", "checkpoint dtype", "requests", "prefix hits", "cached prompt tokens", "answers changed"],
                    ([r["cache"], r["dtype"], r["requests"], r["hits"], f"{r['cached_prompt_tokens']:,}",
                      f"{r['answers_changed']} ({100 * r['answers_changed'] / r['requests']:.1f}%)"] for r in rows))


def to_markdown(res: dict) -> str:
    return md_table(["checkpoint dtype", "bytes / checkpoint", "hits", "cached prompt tokens", "max logit drift",
                     "tokens equal"],
                    ([r["dtype"], f"{r['checkpoint_bytes']:,}", r["hits"], f"{r['cached_prompt_tokens']:,}",
                      f"{r['max_logit_drift']:.2e}", f"{100 * r['token_agreement']:.1f}%"] for r in res["rows"]))



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench checkpoints`` parses them before importing this)."""
    res = measure(turns=a.turns, max_tokens=a.max_tokens)
    print(to_markdown(res))
    if a.requests:
        bar = tqdm(total=len(CACHES) * 3, desc="answers changed", unit="config")
        res["promise"] = promise(HybridModel(ModelConfig.tiny(), seed=0).eval(), num_requests=a.requests,
                                 progress=lambda done, total: bar.update(1))
        bar.close()
    report(a, res, *([promise_markdown(res["promise"])] if a.requests else []))


if __name__ == "__main__":  # as `kda-ref bench checkpoints` runs it
    from .entry import script

    raise SystemExit(script("checkpoints"))
