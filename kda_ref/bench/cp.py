"""Context-parallel prefill: wall time on 1, 2 (and 3) processes, bytes per rank, and the arithmetic
at Kimi-Linear-48B's size.

    python -m kda_ref.bench.cp [--lengths 8192 16384 32768 65536] [--ranks 2 3] [--out docs/bench/cp.json]

The tiny model (random weights), one prompt per length, fp32: the model's own chunked prefill in one process
against :func:`kda_ref.context_parallel.context_parallel_prefill` on gloo ranks, logits checked against the
single process (1e-3). Benchmarks measure; nothing here asserts a timing.
Design notes: ``docs/benchmarks.md#context-parallel-prefill``
"""

from __future__ import annotations

import time

import torch
from tqdm import tqdm

from ..model import HybridModel, ModelConfig, RequestCache
from ..context_parallel import context_parallel_prefill
from ..context_parallel.volume import cp_bytes_per_rank
from .report import md_table, report


def single_prefill(model: HybridModel, ids: list[int], chunk: int = 1024) -> tuple[float, torch.Tensor]:
    """One process, chunked prefill as the engine runs it (a whole 64k-token prompt's attention scores
    would not fit in memory): ``chunk`` tokens per forward, the cache carrying the rest."""
    cache = RequestCache(model.config, 1, max_tokens=len(ids), page_size=64)
    t0 = time.perf_counter()
    with torch.no_grad():
        for a in range(0, len(ids), chunk):
            b = cache.batch([min(chunk, len(ids) - a)])
            logits = model(torch.tensor(ids[a:a + chunk]), b, cache.tensors, logits="last")
            cache.advance(b)
    return time.perf_counter() - t0, logits


def measure(lengths=(8192, 16384, 32768, 65536), ranks=(2,), timeout: float = 600.0) -> list[dict]:
    torch.set_num_threads(2)
    model = HybridModel(ModelConfig.tiny(), seed=0).eval()
    g = torch.Generator().manual_seed(0)
    rows = []
    for T in tqdm(lengths, desc="prompt lengths"):
        ids = torch.randint(0, 256, (T,), generator=g).tolist()
        secs, ref = single_prefill(model, ids)
        rows.append({"tokens": T, "ranks": 1, "wall_s": secs, "forward_s": secs, "sent_bytes_per_rank": 0,
                     "kda_inputs_bytes_per_rank": 0, "max_logit_diff": 0.0})
        for R in ranks:
            t0 = time.perf_counter()
            res = context_parallel_prefill(model, [ids], world_size=R, backend="gloo", timeout=timeout)
            wall = time.perf_counter() - t0
            diff = float((res.logits - ref).abs().max())
            if diff > 1e-3:
                raise AssertionError(f"T={T}, R={R}: the ranks' logits are {diff:.2e} from the single process")
            rows.append({"tokens": T, "ranks": R, "wall_s": wall, "forward_s": max(res.seconds),
                         "sent_bytes_per_rank": max(res.sent_bytes),
                         "kda_inputs_bytes_per_rank": cp_bytes_per_rank(model.config, T, R, act_bytes=4)[
                             "kda_inputs_instead"], "max_logit_diff": diff})
    return rows


def arithmetic_48b(lengths=(131072, 262144, 524288, 1048576), ranks=(2, 4, 8)) -> list[dict]:
    cfg = ModelConfig.kimi_linear_48b()
    return [{"tokens": T, "ranks": R, **cp_bytes_per_rank(cfg, T, R)} for T in lengths for R in ranks]


def to_markdown(rows: list[dict]) -> str:
    def cells(r):
        sent = f"{r['sent_bytes_per_rank'] / 2**20:,.2f} MiB" if r["ranks"] > 1 else "—"
        alt = f"{r['kda_inputs_bytes_per_rank'] / 2**20:,.0f} MiB" if r["ranks"] > 1 else "—"
        return [f"{r['tokens']:,}", r["ranks"], f"{r['wall_s']:.2f}", f"{r['forward_s']:.2f}", sent, alt,
                f"{r['max_logit_diff']:.1e}"]

    return md_table(["prompt tokens", "ranks", "wall s", "slowest forward s", "sent per rank", "KDA inputs instead",
                     "max abs logit diff"], map(cells, rows))


def arithmetic_markdown(rows: list[dict]) -> str:
    mib = lambda b: f"{b / 2**20:,.0f} MiB"  # noqa: E731
    return md_table(["prompt tokens", "ranks", "KDA maps", "conv tails", "MLA rows", "total per rank",
                     "KDA inputs instead"],
                    ([f"{r['tokens']:,}", r["ranks"], mib(r["kda_maps"]), f"{r['conv_tails'] / 2**20:.1f} MiB",
                      mib(r["mla_rows"]), mib(r["total"]), mib(r["kda_inputs_instead"])] for r in rows))



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench cp`` parses them before importing this)."""
    rows = measure(tuple(a.lengths), tuple(a.ranks))
    big = arithmetic_48b()
    report(a, {"measured": rows, "kimi_linear_48b": big}, to_markdown(rows), arithmetic_markdown(big))


if __name__ == "__main__":  # as `kda-ref bench cp` runs it
    from .entry import script

    raise SystemExit(script("cp"))
