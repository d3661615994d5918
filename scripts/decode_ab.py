"""Decode speed of the trained demo, for before / after comparisons of one change: 8 text prompts x 64
greedy tokens (three runs) and one prompt of 64 (three runs), ms per decode step, medians.

    python scripts/decode_ab.py CHECKOUT   # the engine of CHECKOUT (a git worktree of the commit before)

Alternate two checkouts run by run (the machine's speed drifts); docs/benchmarks.md has a table made so."""
import statistics, sys, time
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
import torch
torch.set_num_threads(2)
from kda_ref import LLM, SamplingParams
from kda_ref.train import load_trained
llm = LLM(load_trained())
p = SamplingParams(max_tokens=64, ignore_eos=True)
prompts = [f"The KDA state {i} keeps" for i in range(8)]
llm.generate(prompts, p)
runs = []
for _ in range(3):
    outs = llm.generate(prompts, p)
    dec = max(o.metrics["latency_s"] - o.metrics["ttft_s"] for o in outs)
    runs.append(dec / 63 * 1e3)
one = []
for _ in range(3):
    o = llm.generate([prompts[0]], p)[0]
    one.append((o.metrics["latency_s"] - o.metrics["ttft_s"]) / 63 * 1e3)
print(f"batch8 {statistics.median(runs):.3f} ms/step  single {statistics.median(one):.3f} ms/step")
