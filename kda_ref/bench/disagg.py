"""Prefill/decode disaggregation: bytes per request by kind, and latency against one engine.

    python -m kda_ref.bench.disagg [--lengths 1024 4096 16384] [--requests 4] [--new-tokens 32] [--dist] [--out F]

The tiny model (random weights), greedy: handoff bytes by kind, measured and from
:func:`kda_ref.disagg.volume.handoff_bytes`; wall time through one :class:`~kda_ref.LLM`, through
:class:`~kda_ref.disagg.DisaggregatedLLM` in this process and, with ``--dist``, through two worker processes
over gloo. Tokens checked equal. Benchmarks measure; nothing here asserts a timing.
Design notes: ``docs/benchmarks.md#prefilldecode-disaggregation``;
method: ``docs/benchmarks.md#disaggregation-transfers-and-48b-bytes``
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch
from tqdm import tqdm

from ..disagg import DisaggregatedLLM
from ..disagg.volume import handoff_bytes
from ..engine import LLM, SamplingParams
from ..model import ModelConfig
from .report import md_table, report

MIB = 2**20


def _timed(engine, prompts, params, want) -> float:
    t0 = time.perf_counter()
    got = engine.generate(prompts, params)
    secs = time.perf_counter() - t0
    if [o.token_ids for o in got] != [o.token_ids for o in want]:
        raise AssertionError("disaggregation changed the tokens")
    return secs


def measure(lengths=(1024, 4096, 16384), requests: int = 4, new_tokens: int = 32, dist: bool = False) -> list[dict]:
    torch.set_num_threads(2)
    # the random tiny model knows no positional limit of its own: it declares one past the longest prompt
    cfg = replace(ModelConfig.tiny(), max_position_embeddings=max(8192, max(lengths) + new_tokens))
    g = torch.Generator().manual_seed(0)
    rows = []
    for T in tqdm(lengths, desc="prompt lengths"):
        prompts = [torch.randint(0, 256, (T,), generator=g).tolist() for _ in range(requests)]
        params = SamplingParams(max_tokens=new_tokens, ignore_eos=True)
        budget = max(64 << 20, 4 * requests * (T + new_tokens) * 4 * cfg.mla_latent_dim)
        kw = dict(seed=0, memory_budget_bytes=budget, max_model_len=T + new_tokens)
        single = LLM(cfg, **kw)
        t0 = time.perf_counter()
        want = single.generate(prompts, params, use_tqdm=False)
        t_single = time.perf_counter() - t0
        d = DisaggregatedLLM(cfg, **kw)
        t_disagg = _timed(d, prompts, params, want)
        per = next(iter(d.request_bytes.values()))
        arith = handoff_bytes(cfg, T, state_bytes=4, conv_bytes=4, kv_bytes=4)
        row = {"tokens": T, "kv": per["kv"], "state": per["state"], "conv": per["conv"],
               "arith_total": arith["total"], "kv_early_share": d.counters["kv_bytes_early"] / d.counters["kv_bytes"],
               "single_s": t_single, "disagg_s": t_disagg, "transfer_s": d.counters["transfer_s"],
               "requests": requests}
        if dist:
            with DisaggregatedLLM(cfg, transfer="dist", timeout=120, **kw) as dd:
                dd.start()
                row["dist_s"] = _timed(dd, prompts, params, want)
                row["dist_transfer_s"] = dd.counters["transfer_s"]
        rows.append(row)
    return rows


def arithmetic_48b(lengths=(1024, 4096, 16384, 65536, 131072)) -> list[dict]:
    cfg = ModelConfig.kimi_linear_48b()
    return [{"tokens": T, **handoff_bytes(cfg, T)} for T in lengths]


def to_markdown(rows: list[dict]) -> str:
    dist = all("dist_s" in r for r in rows)
    head = ("| prompt tokens | KV | KDA state | conv | total (arithmetic) | KV sent with earlier chunks | "
            "single engine s | disaggregated s | in transfer s |")
    if dist:
        head += " worker processes s | in receives s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        line = (f"| {r['tokens']:,} | {r['kv'] / MIB:.2f} MiB | {r['state'] / MIB:.2f} MiB | "
                f"{r['conv'] / MIB:.3f} MiB | {r['arith_total'] / MIB:.2f} MiB | {r['kv_early_share']:.0%} | "
                f"{r['single_s']:.2f} | {r['disagg_s']:.2f} | {r['transfer_s']:.3f} |")
        if dist:
            line += f" {r['dist_s']:.2f} | {r['dist_transfer_s']:.3f} |"
        lines.append(line)
    return "\n".join(lines)


def arithmetic_markdown(rows: list[dict]) -> str:
    return md_table(["prompt tokens", "MLA KV", "KDA states", "conv windows", "total", "states + conv share"],
                    ([f"{r['tokens']:,}", f"{r['kv'] / MIB:,.1f} MiB", f"{r['state'] / MIB:.1f} MiB",
                      f"{r['conv'] / MIB:.2f} MiB", f"{r['total'] / MIB:,.1f} MiB",
                      f"{(r['state'] + r['conv']) / r['total']:.0%}"] for r in rows))



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench disagg`` parses them before importing this)."""
    rows = measure(tuple(a.lengths), a.requests, a.new_tokens, a.dist)
    big = arithmetic_48b()
    report(a, {"measured": rows, "kimi_linear_48b": big}, to_markdown(rows), arithmetic_markdown(big))


if __name__ == "__main__":  # as `kda-ref bench disagg` runs it
    from .entry import script

    raise SystemExit(script("disagg"))
