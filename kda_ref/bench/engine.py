"""Benchmark the serving engine on the tiny model against transformers' Kimi-Linear ``generate``.

    python -m kda_ref.bench.engine [--prompt-len 2048] [--batches 1 8 32] [--decode-tokens 32] [--repeats 3] [--torch-compile]

Same weights, same process, greedy, fp32, 2 threads by default: prefill (time to the first token of one
``--prompt-len`` prompt) and decode (``B`` prompts of 256 tokens), ours and transformers alternately
``--repeats`` times. transformers is optional; its KDA runs on its PyTorch reference path (:func:`hf_torch_kda`).
Benchmarks measure; nothing here asserts a timing.
Design notes: ``docs/benchmarks.md#serving-engine``, ``docs/benchmarks.md#serving-engine-timing-and-options``
"""

from __future__ import annotations

import statistics
import tempfile
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import torch
from tqdm import tqdm

from ..engine import LLM, SamplingParams
from ..model import HybridModel, ModelConfig, save_pretrained
from ..utils.malloc import tune_glibc_malloc
from .report import report


def _prompts(n: int, length: int, vocab: int = 256, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (length,), generator=g).tolist() for _ in range(n)]


def ours_prefill(model: HybridModel, prompt_len: int) -> float:
    llm = LLM(model, max_num_batched_tokens=prompt_len, memory_budget_bytes=256 << 20)
    p = _prompts(1, prompt_len)
    llm.generate(p, SamplingParams(max_tokens=1, ignore_eos=True))  # warm-up
    t0 = time.perf_counter()
    llm.generate(p, SamplingParams(max_tokens=1, ignore_eos=True))
    return prompt_len / (time.perf_counter() - t0)


def decode_engine(model: HybridModel, batch: int, prompt_len: int = 256, torch_compile: bool = False) -> LLM:
    """Our engine for the decode cases (every prompt prefilled in one step): dynamic, or static buckets
    compiled by ``torch.compile``."""
    return LLM(model, max_num_seqs=batch, max_num_batched_tokens=batch * prompt_len, memory_budget_bytes=512 << 20,
               static_decode=torch_compile, torch_compile=torch_compile)


def ours_decode(model: HybridModel, batch: int, new_tokens: int, prompt_len: int = 256, llm: LLM | None = None) -> float:
    """Decode tok/s of one run: a fresh dynamic engine, or ``llm`` (reused across runs: a compiled
    engine's buckets compile in its first run, which the caller leaves out)."""
    llm = decode_engine(model, batch, prompt_len) if llm is None else llm
    prompts = _prompts(batch, prompt_len, seed=1)
    params = SamplingParams(max_tokens=new_tokens, ignore_eos=True)
    llm.generate(prompts[:1], SamplingParams(max_tokens=2, ignore_eos=True))  # warm-up
    for p in prompts:
        llm.add_request(p, params)
    llm.step()  # the prefill step (all prompts fit the token budget), not timed
    t0 = time.perf_counter()
    while llm.has_unfinished():
        llm.step()
    return batch * (new_tokens - 1) / (time.perf_counter() - t0)


HF_KDA_FUNCTIONS = ("chunk_kimi_delta_attention", "recurrent_kimi_delta_attention")


def hf_model(model: HybridModel):
    """transformers' ``KimiLinearForCausalLM`` with ``model``'s weights (saved in the Hugging Face layout
    and loaded back), or ``None`` when transformers has no Kimi-Linear (the anchor is optional). Run
    it inside :func:`hf_torch_kda`."""
    try:
        from transformers import KimiLinearForCausalLM
    except Exception as e:  # optional anchor: say why, keep benchmarking ours
        print(f"anchor skipped: transformers Kimi-Linear ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as d:
        save_pretrained(model, d)
        return KimiLinearForCausalLM.from_pretrained(d, dtype=torch.float32).eval()


@contextmanager
def hf_torch_kda() -> Iterator[None]:
    """While inside, transformers' Kimi-Linear module runs its own PyTorch KDA functions; the module is
    exactly as before on exit, also on error.

    Swaps the module's ``chunk_kimi_delta_attention`` / ``recurrent_kimi_delta_attention`` globals for their
    ``__wrapped__`` references, only around :func:`hf_generate_time` / :func:`hf_decode`. Benchmark-only: the one
    patch site ``tests/test_layering.py`` allows (``PATCH_ALLOWANCE``).
    Design notes: ``docs/benchmarks.md#transformers-kda-on-its-pytorch-path``"""
    try:
        from transformers.models.kimi_linear import modeling_kimi_linear as mk
    except Exception:  # no transformers Kimi-Linear: nothing to switch (hf_model said why)
        yield
        return
    originals = {name: getattr(mk, name) for name in HF_KDA_FUNCTIONS}
    try:
        for name, fn in originals.items():
            setattr(mk, name, getattr(fn, "__wrapped__", fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(mk, name, fn)


@torch.no_grad()
def hf_generate_time(hf, batch: int, prompt_len: int, new_tokens: int) -> float:
    ids = torch.tensor(_prompts(batch, prompt_len, seed=1))
    with hf_torch_kda():
        t0 = time.perf_counter()
        hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                    do_sample=False, pad_token_id=0)
        return time.perf_counter() - t0


def hf_prefill(hf, prompt_len: int) -> float:
    hf_generate_time(hf, 1, 16, 1)  # warm-up
    return prompt_len / hf_generate_time(hf, 1, prompt_len, 1)


@torch.no_grad()
def hf_decode(hf, batch: int, new_tokens: int, prompt_len: int = 256) -> float:
    """transformers' ``generate`` (greedy, cached), timed from its first decode step to its last by a
    logits processor that records when each step's logits arrive (so the prefill is excluded)."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class Clock(LogitsProcessor):
        def __init__(self):
            self.times: list[float] = []

        def __call__(self, input_ids, scores):
            self.times.append(time.perf_counter())
            return scores

    ids = torch.tensor(_prompts(batch, prompt_len, seed=1))
    clock = Clock()
    with hf_torch_kda():
        hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                    do_sample=False, pad_token_id=0, logits_processor=LogitsProcessorList([clock]))
    # times[0]: logits of the prefill; times[i]: after decode step i
    return batch * (len(clock.times) - 1) / (clock.times[-1] - clock.times[0])


def trace_overhead(model: HybridModel, repeats: int = 5) -> dict:
    """Wall time of one mixed workload (8 prompts of 64..512 tokens, 24 new tokens each, 128-token
    budget so prefills are chunked) with no tracer, the no-op tracer, and a recording tracer.
    Runs are interleaved and the median kept, to spread the machine's noise over all three."""
    from ..trace import NullTracer, TraceRecorder

    prompts = [p[: 64 * (1 + i % 8)] for i, p in enumerate(_prompts(8, 512, seed=2))]
    params = SamplingParams(max_tokens=24, ignore_eos=True)

    def once(tracer) -> float:
        llm = LLM(model, max_num_batched_tokens=128, tracer=tracer)
        t0 = time.perf_counter()
        llm.generate(prompts, params)
        return time.perf_counter() - t0

    once(None)  # warm-up
    times: dict[str, list[float]] = {"none": [], "null": [], "recorder": []}
    for _ in tqdm(range(repeats), desc="tracing overhead (a fixed 8-prompt workload)", unit="round"):
        times["none"].append(once(None))
        times["null"].append(once(NullTracer()))
        times["recorder"].append(once(TraceRecorder()))
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {"seconds": med, "null_overhead": med["null"] / med["none"] - 1,
            "recorder_overhead": med["recorder"] / med["none"] - 1}


def run(prompt_len: int, batches: list[int], new_tokens: int, seed: int = 0, repeats: int = 3,
        torch_compile: bool = False) -> dict:
    """``torch_compile``: our decode cases run one static engine per batch size under ``torch.compile``,
    warmed up by two untimed runs, which compile its buckets (their seconds reported as ``compile_s``)."""
    model = HybridModel(ModelConfig.tiny(), seed=seed).eval()
    hf = hf_model(model)
    rows = []
    jobs = [("prefill", 1)] + [("decode", b) for b in batches]
    for kind, b in tqdm(jobs, desc="engine bench", unit="case"):
        ours_runs, theirs_runs = [], []
        llm, compile_s = None, None
        if torch_compile and kind == "decode":
            llm = decode_engine(model, b, torch_compile=True)
            t0 = time.perf_counter()
            for _ in range(2):  # a bucket runs eagerly at its first use and compiles at its second
                ours_decode(model, b, new_tokens, llm=llm)
            compile_s = time.perf_counter() - t0
        for _ in range(repeats):  # interleaved: ours, theirs, ours, theirs, ...
            ours_runs.append(ours_prefill(model, prompt_len) if kind == "prefill"
                             else ours_decode(model, b, new_tokens, llm=llm))
            if hf is not None:
                theirs_runs.append(hf_prefill(hf, prompt_len) if kind == "prefill" else hf_decode(hf, b, new_tokens))
        row = {"case": kind, "batch": b, "ours_tok_s": statistics.median(ours_runs), "transformers_tok_s": None,
               "ratio": None, "ours_runs": ours_runs, "transformers_runs": theirs_runs or None,
               "torch_compile": llm is not None, "compile_s": compile_s}
        if hf is not None:
            ratios = [o / t for o, t in zip(ours_runs, theirs_runs)]
            row.update(transformers_tok_s=statistics.median(theirs_runs), ratio=statistics.median(ratios),
                       ratio_min=min(ratios), ratio_max=max(ratios))
        rows.append(row)
    tracing = trace_overhead(model, repeats=repeats)
    return {"threads": torch.get_num_threads(), "prompt_len": prompt_len, "new_tokens": new_tokens,
            "repeats": repeats, "torch_compile": torch_compile, "rows": rows, "tracing": tracing}


def to_markdown(res: dict) -> str:
    lines = ["| case | ours tok/s | transformers tok/s | ratio (median, min - max) |", "|---|---|---|---|"]
    for r in res["rows"]:
        name = f"prefill {res['prompt_len']} tokens" if r["case"] == "prefill" else f"decode, batch {r['batch']}"
        hf = "-" if r["transformers_tok_s"] is None else f"{r['transformers_tok_s']:,.0f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x ({r['ratio_min']:.2f} - {r['ratio_max']:.2f})"
        lines.append(f"| {name} | {r['ours_tok_s']:,.0f} | {hf} | {ratio} |")
    t = res.get("tracing")
    if t:
        sec = t["seconds"]
        lines.append("")
        lines.append(f"tracing overhead on a mixed workload: no tracer {sec['none']:.3f} s, no-op tracer "
                     f"{sec['null']:.3f} s ({100 * t['null_overhead']:+.1f}%), recorder {sec['recorder']:.3f} s "
                     f"({100 * t['recorder_overhead']:+.1f}%)")
    return "\n".join(lines)



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench engine`` parses them before importing this)."""
    torch.set_num_threads(a.threads)
    tune_glibc_malloc()
    res = run(a.prompt_len, a.batches, a.decode_tokens, repeats=a.repeats, torch_compile=a.torch_compile)
    report(a, res, to_markdown(res))


if __name__ == "__main__":  # as `kda-ref bench engine` runs it
    from .entry import script

    raise SystemExit(script("engine"))
