"""A fixed probe of the machine's own speed, to read beside a test-suite or benchmark time.

    python scripts/speed_probe.py

Three prompts, 32 greedy tokens each, on the tiny model with random weights (seed 0), one torch
thread; prints the fastest of five runs after a warm-up (docs/benchmarks.md "The test suite"). On the
2-core development machine it read 0.14 s at its fastest (2026-12-02) and 0.20-0.22 s in slower hours.
"""

import time

import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.model import HybridModel


def probe(runs: int = 5) -> float:
    torch.set_num_threads(1)
    llm = LLM(HybridModel(ModelConfig.tiny(), seed=0).eval())
    params = SamplingParams(max_tokens=32, ignore_eos=True)
    prompts = [[1, 2, 3, 4, 5] * 4, [7, 8, 9] * 5, [11] * 9]
    llm.generate(prompts, params, use_tqdm=False)  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        times.append(time.perf_counter() - t0)
    return min(times)


if __name__ == "__main__":
    print(f"probe: {probe():.3f} s (fastest of 5)")
