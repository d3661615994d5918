"""Drift of compressed checkpoints: how far bf16 / int8 cached states move logits and tokens.

    python -m kda_ref.bench.checkpoints [--turns 6] [--max-tokens 24]

Workload: multi-turn conversations (each turn extends the previous prompt and output) plus a
shared system prompt, greedy. Each checkpoint dtype runs the same requests in the same order on the
radix cache; the reference is the same engine without a prefix cache. Reported per dtype: bytes per
checkpoint, cache hits, max |logit difference| over all generated positions, and the fraction of
generated tokens that match the reference (a divergence changes every later token of that turn).
"""

from __future__ import annotations

import json

import torch
from tqdm import tqdm

from ..engine import LLM, SamplingParams
from ..memory import PageKind
from ..model import HybridModel, ModelConfig
from .args import parse


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


def to_markdown(res: dict) -> str:
    lines = ["| checkpoint dtype | bytes / checkpoint | hits | cached prompt tokens | max logit drift | tokens equal |",
             "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['dtype']} | {r['checkpoint_bytes']:,} | {r['hits']} | {r['cached_prompt_tokens']:,} | "
                     f"{r['max_logit_drift']:.2e} | {100 * r['token_agreement']:.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """``python -m kda_ref.bench.checkpoints``: parse (ranges checked, output files claimed), then run."""
    cli(parse("checkpoints", argv))


def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench checkpoints`` parses them before importing this)."""
    res = measure(turns=a.turns, max_tokens=a.max_tokens)
    print(to_markdown(res))
    if a.out:
        with a.out.open() as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
