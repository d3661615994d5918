"""Benchmark the KDA core: our torch recurrent and chunk forms next to third-party anchors.

    python -m kda_ref.bench.kernels [--lengths 512 2048 8192] [--repeats 5] [--out results.json]

Anchors, run in the same process when importable: fla's ``naive_recurrent_kda`` / ``naive_chunk_kda`` and
transformers' Kimi-Linear torch paths (their ``__wrapped__`` bodies). Also measured: the fp32 matmul peak and
our chunk forms' GFLOP/s. By default glibc's mmap / trim thresholds are raised first
(:mod:`kda_ref.utils.malloc`), for every implementation alike. Numbers, not asserts.
Design notes: ``docs/benchmarks.md#kda-core``, ``docs/benchmarks.md#kda-core-flop-model``
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..ops import chunk_kda, recurrent_kda
from ..ops.kda_chunk import chunk_kda_impl
from ..utils.malloc import tune_glibc_malloc
from ..utils import cdiv
from .report import report


def chunk_flops(T: int, H: int, K: int, V: int, C: int = 64) -> float:
    n_chunks = cdiv(T, C)
    return H * n_chunks * (6 * C * C * K + 4 * C * C * V + 6 * C * K * V + (2 / 3) * C**3)


def make_inputs(T: int, H: int = 4, K: int = 128, V: int = 128, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(1, T, H, K, generator=gen), dim=-1)
    k = F.normalize(torch.randn(1, T, H, K, generator=gen), dim=-1)
    v = torch.randn(1, T, H, V, generator=gen)
    g = -F.softplus(torch.randn(1, T, H, K, generator=gen)) * 0.1
    beta = torch.rand(1, T, H, generator=gen)
    return q, k, v, g, beta


def time_call(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_peak(repeats: int = 5) -> dict[str, float]:
    """fp32 GFLOP/s of a large mm and of the batched 64 x 64 products the chunk form is made of."""
    out = {}
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    out["mm_1024"] = 2 * 1024**3 / time_call(lambda: a @ b, repeats) / 1e9
    x, y = torch.randn(32, 64, 64), torch.randn(32, 64, 128)
    out["bmm_32x64x64x128"] = 2 * 32 * 64 * 64 * 128 / time_call(lambda: x @ y, repeats * 4) / 1e9
    return out


def anchors() -> dict[str, Callable]:
    """Third-party torch implementations, keyed by name; missing packages are left out."""
    found: dict[str, Callable] = {}
    try:
        from fla.ops.kda.naive import naive_chunk_kda, naive_recurrent_kda

        found["fla naive_recurrent_kda"] = lambda q, k, v, g, b: naive_recurrent_kda(q, k, v, g, b)
        found["fla naive_chunk_kda"] = lambda q, k, v, g, b: naive_chunk_kda(q, k, v, g, b)
    except Exception as e:  # optional anchor: say why it is missing, keep benchmarking ours
        print(f"anchor skipped: flash-linear-attention ({type(e).__name__}: {e})", file=sys.stderr)
    try:
        from transformers.models.kimi_linear import modeling_kimi_linear as mk

        rec = getattr(mk.recurrent_kimi_delta_attention, "__wrapped__", mk.recurrent_kimi_delta_attention)
        chk = getattr(mk.chunk_kimi_delta_attention, "__wrapped__", mk.chunk_kimi_delta_attention)
        found["transformers torch recurrent"] = lambda q, k, v, g, b: rec(q, k, v, g, b, None, False)
        found["transformers torch chunk"] = lambda q, k, v, g, b: chk(q, k, v, g, b, initial_state=None,
                                                                      output_final_state=False)
    except Exception as e:
        print(f"anchor skipped: transformers Kimi-Linear ({type(e).__name__}: {e})", file=sys.stderr)
    return found


def run(lengths: list[int], repeats: int, with_anchors: bool = True, skip_slow_over: int = 1 << 30) -> dict:
    impls: dict[str, Callable] = {
        "ours recurrent_kda": lambda q, k, v, g, b: recurrent_kda(q, k, v, g, b),
        "ours chunk_kda": lambda q, k, v, g, b: chunk_kda(q, k, v, g, b),
        # the differentiable form chunk_kda runs when a gradient is needed (training)
        "ours chunk_kda readable": lambda q, k, v, g, b: chunk_kda_impl(q, k, v, g, b, impl="readable"),
    }
    if with_anchors:
        impls.update(anchors())
    peak = matmul_peak()
    rows = []
    # ours first, then the anchors: the anchors' large temporaries (transformers' chunk path peaks at
    # several GB) leave the allocator in a state that slows whatever runs after them
    jobs = [(T, name) for name in impls for T in lengths]
    with torch.no_grad():
        for T, name in tqdm(jobs, desc="kda kernels", unit="run"):
            if T > skip_slow_over and "chunk" in name and "ours" not in name:
                continue
            q, k, v, g, b = make_inputs(T)
            fn = impls[name]
            sec = time_call(lambda: fn(q, k, v, g, b), repeats)
            row = {"impl": name, "T": T, "seconds": sec, "tokens_per_s": T / sec}
            if name.startswith("ours chunk_kda"):
                row["gflops"] = chunk_flops(T, 4, 128, 128) / sec / 1e9
            rows.append(row)
    return {"threads": torch.get_num_threads(), "torch": torch.__version__, "matmul_peak_gflops": peak, "rows": rows}


def to_markdown(res: dict) -> str:
    lengths = sorted({r["T"] for r in res["rows"]})
    names = list(dict.fromkeys(r["impl"] for r in res["rows"]))
    by = {(r["impl"], r["T"]): r for r in res["rows"]}
    head = "| implementation | " + " | ".join(f"T={T} tok/s" for T in lengths) + " |"
    lines = [head, "|---" * (len(lengths) + 1) + "|"]
    for n in names:
        cells = [f"{by[(n, T)]['tokens_per_s']:,.0f}" if (n, T) in by else "-" for T in lengths]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    peak = res["matmul_peak_gflops"]
    lines.append("")
    lines.append(f"matmul peak (same run): mm 1024 = {peak['mm_1024']:.0f} GFLOP/s, "
                 f"bmm [32,64,64]x[32,64,128] = {peak['bmm_32x64x64x128']:.0f} GFLOP/s; threads = {res['threads']}; "
                 f"malloc tuning = {res.get('malloc_tuning')}")
    for n in (n for n in names if n.startswith("ours chunk_kda")):
        for T in lengths:
            r = by.get((n, T))
            if r:
                lines.append(f"{n} at T={T}: {r['gflops']:.1f} GFLOP/s "
                             f"= {100 * r['gflops'] / peak['mm_1024']:.0f}% of the mm peak")
    return "\n".join(lines)



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench kernels`` parses them before importing this)."""
    torch.set_num_threads(a.threads)
    tuned = False if a.no_malloc_tuning else tune_glibc_malloc()
    res = run(a.lengths, a.repeats, with_anchors=not a.no_anchors)
    res["malloc_tuning"] = tuned
    report(a, res, to_markdown(res))


if __name__ == "__main__":  # as `kda-ref bench kernels` runs it
    from .entry import script

    raise SystemExit(script("kernels"))
