"""Time prefill steps of the engine against earlier checkouts of it, with the machine's matmul rate.

    python -m kda_ref.bench.prefill [--cases 8x128 1x2048] [--trees ../baseline] [--repeats 5] [--threads 1]

A case ``NxL`` is one engine step that prefills ``N`` fresh prompts of ``L`` random tokens. Each measurement runs
in a fresh process importing ``kda_ref`` from the tree being timed, beside a square fp32 matmul at the same thread
count; a row reports the median over rounds and, against the first of ``--trees``, the per-round ratios' median,
min and max. Benchmarks measure; nothing here asserts a timing.
Design notes: ``docs/benchmarks.md#prefill-steps-against-earlier-checkouts``
"""

from __future__ import annotations

import ast
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

from .report import md_table, report

HERE = Path(__file__).resolve().parents[2]  # the checkout this module belongs to

# The timed process's program: it uses only names every checkout of the engine has had (LLM,
# SamplingParams, trained_path, add_request / step / has_unfinished), so an older tree runs it unchanged.
WORKER = r"""
import random, sys, time
import torch
threads, kind, steps, tune = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[5] == "1"
cases = [tuple(map(int, c.split("x"))) for c in sys.argv[4].split(",")]
torch.set_num_threads(threads)
if tune:  # as kda-ref serve's engine process and the other benchmarks do (kda_ref.utils.malloc)
    from kda_ref.utils.malloc import tune_glibc_malloc
    tune_glibc_malloc()
from kda_ref import LLM, SamplingParams
from kda_ref.train import trained_path
llm = LLM(trained_path(kind), max_num_batched_tokens=max(n * L for n, L in cases),
          max_num_seqs=max(n for n, _ in cases), memory_budget_bytes=512 << 20)
rng = random.Random(0)
def step(n, L):
    for _ in range(n):
        llm.add_request([rng.randrange(1, 250) for _ in range(L)], SamplingParams(max_tokens=1, ignore_eos=True))
    t0 = time.perf_counter()
    llm.step()
    dt = time.perf_counter() - t0
    while llm.has_unfinished():
        llm.step()
    return dt
out = {"cases": {}}
for n, L in cases:
    for _ in range(2):
        step(n, L)
    out["cases"][f"{n}x{L}"] = sorted(step(n, L) for _ in range(steps))
if sys.argv[6] != "0":  # decode: B requests of a 64-token prompt, every step after their prefill timed
    B, D = map(int, sys.argv[6].split("x"))
    times = []
    for r in range(2):
        for _ in range(B):
            llm.add_request([rng.randrange(1, 250) for _ in range(64)], SamplingParams(max_tokens=D + 1, ignore_eos=True))
        llm.step()  # the prefills
        while llm.has_unfinished():
            t0 = time.perf_counter()
            llm.step()
            if r:  # the first round warms up
                times.append(time.perf_counter() - t0)
    out["cases"][f"decode {B}x{D}"] = sorted(times)
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
torch.mm(a, b)
ts = []
for _ in range(7):
    t0 = time.perf_counter()
    torch.mm(a, b)
    ts.append(time.perf_counter() - t0)
out["matmul_gflops"] = 2 * 1024 ** 3 / min(ts) / 1e9
print("RESULT " + repr(out))
"""


def tree_label(tree: Path) -> str:
    """``tree``'s short commit (``+dirty`` when it has uncommitted changes), or its folder name."""
    def git(*args):
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=30)
    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return tree.name
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def time_tree(tree: Path, cases, threads: int, kind: str, steps: int, tune: bool = True, decode: str = "0") -> dict:
    """One fresh process importing ``kda_ref`` from ``tree`` (glibc's malloc thresholds raised first when
    ``tune``): ``{"cases": {name: [s, ...]}, "matmul_gflops"}``."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(threads), CUDA_VISIBLE_DEVICES="")
    names = ",".join(f"{n}x{L}" for n, L in cases)
    proc = subprocess.run([sys.executable, "-c", WORKER, str(threads), kind, str(steps), names, "1" if tune else "0",
                           decode],
                          cwd=str(tree), env=env, capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"timing {tree} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return ast.literal_eval(lines[-1][len("RESULT "):])


# the last layer's weights a prompt needs at its last row alone (the rows past its attention feed nothing else)
_LAST_ROW_ONLY = (".mlp.", ".block_sparse_moe.", ".mlp_res_proj.", ".q_proj.", ".q_a_proj.", ".q_b_proj.", ".g_proj.",
                  ".o_proj.")


def useful_flops(model, n: int, L: int, chunk: int = 64) -> float:
    """The model's FLOP for prefilling ``n`` prompts of ``L`` tokens (see the module docstring): every weight
    over every token, but the last layer's MLP / MoE (and, for an MLA layer, its queries, output and the
    attention of one query over ``L`` keys) at each prompt's last row, the only one whose output is read."""
    c = model.config
    linear = conv = last = 0.0
    tail = f"model.layers.{c.num_hidden_layers - 1}."
    for name, p in model.named_parameters():
        if name.startswith("mtp.") or "embed_tokens" in name or "lm_head" in name:
            continue
        if p.dim() == 3:  # a depthwise short-conv weight [D, 1, W]
            conv += 2 * p.numel()
        elif p.dim() == 2:
            routed = ".experts." in name
            flop = 2 * p.numel() * (c.num_experts_per_token / c.num_experts if routed else 1)
            if name.startswith(tail) and (any(k in name for k in _LAST_ROW_ONLY) and
                                          (c.layer_types[-1] == "mla" or ".self_attn." not in name)):
                last += flop
            else:
                linear += flop
    head = 2 * model.lm_head.weight.numel() * n
    H, K = c.linear_num_heads, c.linear_head_dim
    chunks = -(-L // chunk)
    kda = len(c.kda_layer_ids) * n * H * chunks * (10 * chunk ** 2 * K + 6 * chunk * K * K + 2 / 3 * chunk ** 3)
    qk, v = c.qk_nope_head_dim + c.qk_rope_head_dim, c.v_head_dim
    per_pair = n * 2 * c.num_attention_heads * (qk + v)  # one query against one key, n prompts
    mla = sum(per_pair * (L if i == c.num_hidden_layers - 1 else L * (L + 1) / 2) for i in c.mla_layer_ids)
    return (linear + conv) * n * L + last * n + head + kda + mla


def trees_to_time(given) -> list[Path]:
    """The checkouts ``--trees`` names, then this one, each once (``--trees .`` from this checkout adds nothing)."""
    return list(dict.fromkeys([Path(t).resolve() for t in given] + [HERE]))


def tree_labels(trees: list[Path]) -> list[str]:
    """One label per tree (:func:`tree_label`); two trees at the same commit get their folder names added, so
    that their timings stay apart."""
    labels = [tree_label(t) for t in trees]
    return [f"{label} ({t.name})" if labels.count(label) > 1 else label for t, label in zip(trees, labels)]


def run(trees: list[Path], cases, repeats: int, steps: int, threads: int, kind: str, tune: bool = True,
        decode: str = "0") -> dict:
    """Time every tree ``repeats`` times (order alternating by round); the raw results by tree label."""
    labels = tree_labels(trees)
    runs = {label: [] for label in labels}
    with tqdm(total=repeats * len(trees), desc="prefill", unit="process") as bar:
        for r in range(repeats):
            order = list(zip(trees, labels))
            for tree, label in (order if r % 2 == 0 else order[::-1]):
                runs[label].append(time_tree(tree, cases, threads, kind, steps, tune, decode))
                bar.update()
    return {"labels": labels, "runs": runs}


def summarize(res: dict, cases, flops: dict) -> list[dict]:
    """One row per (case, tree): median step, tokens/s, GFLOP/s, fraction of the matmul rate, ratio to the
    first tree (per-round ratios: median, min, max). A decode case (``"decode BxD"``) makes ``B`` tokens a step;
    its FLOP and fraction are left out (``None``)."""
    rows = []
    base = res["labels"][0]
    names = [f"{n}x{L}" for n, L in cases] + [c for c in res["runs"][base][0]["cases"] if c.startswith("decode ")]
    for name in names:
        tokens = int(name.split()[1].split("x")[0]) if name.startswith("decode ") else \
            int(name.split("x")[0]) * int(name.split("x")[1])
        base_step = [statistics.median(r["cases"][name]) for r in res["runs"][base]]
        for label in res["labels"]:
            runs = res["runs"][label]
            step = [statistics.median(r["cases"][name]) for r in runs]  # per round
            ratio = [b / s for b, s in zip(base_step, step)]  # > 1: faster than the baseline
            med, flop = statistics.median(step), flops.get(name)
            frac = None if flop is None else statistics.median(
                flop / s / 1e9 / r["matmul_gflops"] for s, r in zip(step, runs))
            rows.append({"case": name, "tree": label, "step_ms": med * 1e3, "tok_s": tokens / med,
                         "gflops": None if flop is None else flop / med / 1e9,
                         "matmul_gflops": statistics.median(r["matmul_gflops"] for r in runs),
                         "fraction_of_matmul": frac, "speedup": statistics.median(ratio),
                         "speedup_min": min(ratio), "speedup_max": max(ratio)})
    return rows


def to_markdown(rows: list[dict], baseline: str) -> str:
    return md_table(["case", "tree", "step ms", "tokens/s", "useful GFLOP/s", "matmul GFLOP/s", "fraction of matmul",
                     f"x {baseline} (min - max)"],
                    ([r["case"], r["tree"], f"{r['step_ms']:.1f}", f"{r['tok_s']:,.0f}",
                      "-" if r["gflops"] is None else f"{r['gflops']:.1f}", f"{r['matmul_gflops']:.0f}",
                      "-" if r["fraction_of_matmul"] is None else f"{100 * r['fraction_of_matmul']:.1f} %",
                      f"{r['speedup']:.2f}x ({r['speedup_min']:.2f} - {r['speedup_max']:.2f})"] for r in rows))



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench prefill`` parses them before importing this)."""
    from ..train import load_trained

    kind = {"trained": "kimi_linear", "trained-k3": "k3"}[a.model]
    cases = [tuple(map(int, c.split("x"))) for c in a.cases]
    trees = trees_to_time(a.trees)
    model = load_trained(kind=kind)
    flops = {f"{n}x{L}": useful_flops(model, n, L) for n, L in cases}
    res = run(trees, cases, a.repeats, a.steps, a.threads, kind, tune=not a.no_malloc_tuning, decode=a.decode or "0")
    rows = summarize(res, cases, flops)
    data = {"threads": a.threads, "model": a.model, "malloc_tuning": not a.no_malloc_tuning, "flops": flops,
            "rows": rows, **res}
    report(a, data, to_markdown(rows, res["labels"][0]))


if __name__ == "__main__":  # as `kda-ref bench prefill` runs it
    from .entry import script

    raise SystemExit(script("prefill"))
