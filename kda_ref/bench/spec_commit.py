"""What each rollback strategy's verify and commit cost, one KDA layer at a time (kernel level, no engine).

    python -m kda_ref.bench.spec   (prints this table after the others; ``measure_commit_cost`` alone here)

For every registered ``spec_state`` (:data:`kda_ref.speculative.STRATEGIES`): verify ``L = 1 + k`` tokens with
:func:`kda_ref.ops.kda_recurrent.recurrent_kda_verify`, then commit ``kept`` as the strategy's record implies
(:func:`kda_ref.speculative.replay.replay` for ReplaySSM, :func:`kda_ref.speculative.recover` for RecoverSSM), at
the tiny model's size and one Kimi K3 layer's; each time the 10th percentile of ``iters`` rounds, median beside it.
Design notes: ``docs/benchmarks.md#each-strategys-verify-and-commit-one-kda-layer``;
method: ``docs/benchmarks.md#verify-records-by-strategy``
"""

from __future__ import annotations

import statistics
import time

import torch
from tqdm import tqdm

from ..ops import l2norm
from ..ops.kda_recurrent import recurrent_kda_verify
from ..speculative import STRATEGIES, recover
from ..speculative.replay import replay
from .report import md_table

SIZES = {"tiny (4 x 64)": (4, 64), "K3 layer, TP8 (12 x 128)": (12, 128)}


def _inputs(N: int, L: int, H: int, K: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    k = l2norm(torch.randn(N, L, H, K, generator=g))
    gate = -5.0 * torch.sigmoid(torch.randn(N, L, H, K, generator=g))  # K3's bounded gate
    return (l2norm(torch.randn(N, L, H, K, generator=g)), k, torch.randn(N, L, H, K, generator=g), gate,
            torch.rand(N, L, H, generator=g), torch.randn(N, H, K, K, generator=g))


def _verify_and_commit(record, q, k, v, g, beta, S0, kept: int):
    """One verify and one commit of strategy ``record``'s kind; returns the two durations (s)."""
    N, L, H, V = v.shape
    u = torch.empty(N, L, H, V) if record.keeps_corrections else None
    t0 = time.perf_counter()
    _, steps = recurrent_kda_verify(q, k, v, g, beta, S0, keep_step_states=record.keeps_step_states, corrections=u)
    t1 = time.perf_counter()
    if record.keeps_step_states:
        if not record.writes_slots:  # per_step: the kept state copied into the request's slot
            S0.copy_(steps[:, kept - 1])
    elif record.keeps_corrections:  # RecoverSSM: one sum per request
        for n in range(N):
            S0[n] = recover(S0[n], k[n, :kept], g[n, :kept], u[n, :kept])
    else:  # ReplaySSM: the kept tokens through the recurrence again
        for n in range(N):
            S0[n] = replay(S0[n], k[n, :kept], v[n, :kept], g[n, :kept], beta[n, :kept])
    return t1 - t0, time.perf_counter() - t1


def measure_commit_cost(k: int = 3, batches=(1, 8), iters: int = 100) -> list[dict]:
    """The table of the module docstring for ``k`` drafts, every kept count ``1`` and ``1 + k``."""
    torch.set_num_threads(2)
    rows = []
    cases = [(size, N, kept) for size in SIZES for N in batches for kept in (1, 1 + k)]
    with torch.inference_mode():
        for size, N, kept in tqdm(cases, desc="verify and commit cost"):
            H, K = SIZES[size]
            q, kk, v, g, beta, S0 = _inputs(N, 1 + k, H, K)
            times = {name: ([], []) for name in STRATEGIES}
            for _ in range(iters):  # the strategies alternate within each round
                for name, s in STRATEGIES.items():
                    tv, tc = _verify_and_commit(s.record, q, kk, v, g, beta, S0.clone(), kept)
                    times[name][0].append(tv)
                    times[name][1].append(tc)
            for name, (tv, tc) in times.items():
                rows.append({"size": size, "requests": N, "k": k, "kept": kept, "spec_state": name,
                             "verify_ms": _p10(tv) * 1e3, "commit_ms": _p10(tc) * 1e3,
                             "verify_ms_median": statistics.median(tv) * 1e3,
                             "commit_ms_median": statistics.median(tc) * 1e3})
    return rows


def _p10(ts: list[float]) -> float:
    return sorted(ts)[len(ts) // 10]


def commit_cost_to_markdown(rows: list[dict]) -> str:
    return md_table(["KDA layer", "requests", "kept of 1 + k", "spec_state", "verify ms", "commit ms",
                     "verify + commit ms"],
                    ([r["size"], r["requests"], f"{r['kept']} of {1 + r['k']}", r["spec_state"], f"{r['verify_ms']:.3f}",
                      f"{r['commit_ms']:.3f}", f"{r['verify_ms'] + r['commit_ms']:.3f}"] for r in rows))


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(prog="python -m kda_ref.bench.spec_commit", description="Benchmark: the verify kernel's "
                            "commit of accepted drafts, per rollback strategy, kernel level (also printed at the end "
                            "of kda-ref bench spec); no options.").parse_args()
    print(commit_cost_to_markdown(measure_commit_cost()))
