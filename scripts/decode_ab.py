"""Decode and prefill speed of a trained demo, for before / after comparisons of one change: 8 text prompts
x 64 greedy tokens (three runs; ms per decode step, median) and one 1,520-byte prompt's prefill (three
runs; ms to the first token, median). Two torch threads.

    python scripts/decode_ab.py CHECKOUT [kimi_linear|k3] [compiled]   # the engine of CHECKOUT (a git worktree);
                                                                        # compiled: static_decode + torch_compile

Alternate two checkouts run by run (the machine's speed drifts); docs/benchmarks.md has tables made so."""
import statistics, sys
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
import torch
torch.set_num_threads(2)
from kda_ref import LLM, SamplingParams
from kda_ref.train import load_trained
kind = sys.argv[2] if len(sys.argv) > 2 else "kimi_linear"
compiled = len(sys.argv) > 3 and sys.argv[3] == "compiled"
llm = LLM(load_trained(kind=kind), **({"static_decode": True, "torch_compile": True} if compiled else {}))
p = SamplingParams(max_tokens=64, ignore_eos=True)
prompts = [f"The KDA state {i} keeps" for i in range(8)]
llm.generate(prompts, p)
runs = []
for _ in range(3):
    outs = llm.generate(prompts, p)
    runs.append(max(o.metrics["latency_s"] - o.metrics["ttft_s"] for o in outs) / 63 * 1e3)
one = []
for _ in range(3):
    o = llm.generate([prompts[0]], p)[0]
    one.append((o.metrics["latency_s"] - o.metrics["ttft_s"]) / 63 * 1e3)
long = "The state of a linear attention layer " * 40
pre = [llm.generate([long], SamplingParams(max_tokens=1, ignore_eos=True))[0].metrics["ttft_s"] * 1e3
       for _ in range(3)]
print(f"{kind}{' compiled' if compiled else ''}: batch8 {statistics.median(runs):.3f} ms/step  single {statistics.median(one):.3f} ms/step  "
      f"prefill {len(long)} B {statistics.median(pre):.1f} ms")
