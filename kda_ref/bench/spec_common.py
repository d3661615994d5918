"""What the speculative-decoding benchmarks share (:mod:`.spec`, :mod:`.spec_mtp`): the two workloads and
one timed greedy request."""

from __future__ import annotations

import pathlib
import time

import torch

from ..engine import LLM, SamplingParams

ROOT = pathlib.Path(__file__).resolve().parents[2]


def workloads() -> dict[str, str | list[int]]:
    text = (ROOT / "docs" / "kda.md").read_text(encoding="utf-8")[:300]
    g = torch.Generator().manual_seed(0)
    return {"repetitive": text, "random": torch.randint(0, 256, (300,), generator=g).tolist()}


def timed_request(llm: LLM, prompt, n: int) -> tuple[float, float, list[int], dict]:
    """``(request seconds, decode seconds, tokens, metrics)`` of one greedy request of ``n`` tokens;
    decode seconds run from its first token to its last."""
    t0 = time.perf_counter()
    out = llm.generate([prompt], SamplingParams(max_tokens=n, ignore_eos=True))[0]
    total = time.perf_counter() - t0
    return total, out.metrics["latency_s"] - out.metrics["ttft_s"], out.token_ids, out.metrics
