"""The benchmarks' command-line arguments, torch-free.

``kda-ref bench NAME ...`` and ``python -m kda_ref.bench.NAME ...`` both parse here first, before the
benchmark's module (and torch) is imported, so ``--help`` and an argument error answer at once. Every
output flag is claimed while parsing (:func:`~kda_ref.utils.outputs.claim_output`): a path that cannot
be written stops the command before the benchmark runs, not after it. :func:`parse` returns the
namespace with each output flag replaced by its :class:`~kda_ref.utils.outputs.OutputFile` (or
``None``).
"""

from __future__ import annotations

import argparse
import math
import os
import re

from ..speculative.config import SPEC_STATES
from ..utils import machine_memory_bytes
from ..utils.limits import MAX_BENCH_LENGTH, MAX_NUM_SEQS, MAX_THREADS, MAX_WORLD_SIZE, SEED_RANGE, path_problem
from ..utils.outputs import OutputError, claim_output

MAX_SIM_GIB = float(1 << 20)  # a simulated pool of up to a PiB: the cache simulator's pools are virtual

MAX_SIM_REQUESTS = 1_000_000  # the simulator's requests per family: 10k took 1.7 s; 10**8 filled 16 GB without a word
MAX_SERVE_REQUESTS = 100_000  # requests one served-load run sends

MAX_K = 16  # drafts per verify (SpecConfig's bound; kept here so the flags are checked before torch)

# the workload benchmark's families: kda_ref.workloads.FAMILIES' names (tests/test_workloads.py checks they agree)
WORKLOAD_FAMILIES = ("shared_system_prompt", "multi_turn", "tree_search", "few_shot", "long_document_qa")
_BLOCK = {"block_size": 512, "hash_unit": 16, "mamba_cache_mode": "all"}
# the cache policies the workload benchmark compares: name -> (prefix_cache, options)
WORKLOAD_POLICIES = {
    "none": ("none", {}),
    "radix sglang": ("radix", {"checkpoint_policy": "sglang"}),
    "radix sglang no_buffer": ("radix", {"checkpoint_policy": "sglang_no_buffer"}),
    "radix dense-64": ("radix", {"checkpoint_policy": "chunk"}),
    "radix every-1024": ("radix", {"checkpoint_policy": "every_n", "checkpoint_interval": 1024}),
    "radix branch": ("radix", {"checkpoint_policy": "branch"}),
    "block dense": ("block", dict(_BLOCK)),
    "block interval-2048": ("block", dict(_BLOCK, retention_interval=2048)),
    "block reachable": ("block", dict(_BLOCK, retention_interval=0, partial_hits=True)),
    "marconi": ("block", dict(_BLOCK, retention_interval=0, partial_hits=True, eviction="marconi",
                              marconi_alpha="auto")),
    "reachable + interval-4096, marconi": ("block", dict(_BLOCK, retention_interval=4096, partial_hits=True,
                                                         eviction="marconi", marconi_alpha="auto")),
    "ours: marconi + unit replay": ("block", dict(_BLOCK, retention_interval=0, partial_hits=True, eviction="marconi",
                                                  marconi_alpha="auto", replay_granularity="unit")),
}
OUT_HELP = "also write the results as JSON to this file (checked before the benchmark runs)"


def _rules(*rules):
    """The range check of a benchmark's flags from ``(flag, test, requirement)`` rules, ``test`` a function of the
    flag's value: the first rule that fails names its flag and the value it got."""
    def check(a):
        for flag, ok, need in rules:
            value = getattr(a, flag.lstrip("-").replace("-", "_"))
            if not ok(value):
                return f"{flag}: {need}, got {value!r}"
        return None
    return check


def _within(lo, hi):
    return lambda v: lo <= v <= hi


def _each(lo, hi):
    return lambda vs: all(lo <= v <= hi for v in vs)


def _positive(v) -> bool:
    return v >= 1


def _out_path(text: str) -> str:
    """``type=`` of an output flag: a path the OS can look up (a NUL byte is a ``ValueError`` in ``open``);
    the file itself is claimed by :func:`parse`."""
    why = path_problem(text)
    if why:
        raise argparse.ArgumentTypeError(why)
    return text


def _kernels(p):
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192],
                   help="sequence lengths T to time (default %(default)s)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per case (median reported), after a warm-up")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--no-anchors", action="store_true", help="time only our implementations")
    p.add_argument("--no-malloc-tuning", action="store_true",
                   help="keep glibc's default mmap/trim thresholds (temporaries are page-faulted on every call)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)
    return _rules(("--lengths", _each(1, MAX_BENCH_LENGTH), f"each must be in [1, {MAX_BENCH_LENGTH}]"),
                  ("--repeats", _positive, "must be positive"),
                  ("--threads", _within(1, MAX_THREADS), f"must be in [1, {MAX_THREADS}]"))


def _engine(p):
    p.add_argument("--prompt-len", type=int, default=2048, help="prompt length of the prefill case")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32], help="decode batch sizes")
    p.add_argument("--decode-tokens", type=int, default=32, help="new tokens per request in the decode cases")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs of each side per case, and rounds of the "
                   "tracing-overhead workload (medians reported)")
    p.add_argument("--torch-compile", action="store_true",
                   help="our decode cases: static buckets under torch.compile (needs a C++ compiler)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)
    return _rules(("--prompt-len", _within(1, MAX_BENCH_LENGTH), f"must be in [1, {MAX_BENCH_LENGTH}]"),
                  ("--batches", _each(1, MAX_NUM_SEQS), f"each must be in [1, {MAX_NUM_SEQS}]"),
                  ("--decode-tokens", _within(2, MAX_BENCH_LENGTH), f"must be in [2, {MAX_BENCH_LENGTH}]"),
                  ("--threads", _within(1, MAX_THREADS), f"must be in [1, {MAX_THREADS}]"),
                  ("--repeats", _positive, "must be positive"))


def _prefix_cache(p):
    p.add_argument("--budgets-mb", type=int, nargs="+", default=[2, 8, 64], help="pool budgets in MiB")
    p.add_argument("--out-csv", type=_out_path, help="write the rows as CSV (the visualizer plots it)")
    p.add_argument("--out-json", type=_out_path, help="write the rows as JSON")
    most = (machine_memory_bytes() or 1 << 50) >> 20
    return _rules(("--budgets-mb", _each(1, most), f"each must be in [1, {most}] (this machine's memory)"))


def _checkpoints(p):
    p.add_argument("--turns", type=int, default=6, help="conversation turns (default 6)")
    p.add_argument("--max-tokens", type=int, default=24, help="generated tokens per turn (default 24)")
    p.add_argument("--requests", type=int, default=96,
                   help="requests of the answers-changed stream per cache and dtype (default 96; 0: skip it)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)
    return _rules(("--turns", _positive, "must be positive"), ("--max-tokens", _positive, "must be positive"),
                  ("--requests", _within(0, 10_000), "must be in [0, 10000]"))


def _workloads(p):
    p.add_argument("--requests", type=int, default=1000, help="requests per workload family (scale='large')")
    p.add_argument("--budgets-gib", type=float, nargs="+", default=[4, 16, 64], help="memory budgets in GiB")
    p.add_argument("--families", nargs="+", default=list(WORKLOAD_FAMILIES), choices=WORKLOAD_FAMILIES,
                   help="workload families")
    p.add_argument("--policies", nargs="+", default=list(WORKLOAD_POLICIES), choices=list(WORKLOAD_POLICIES),
                   metavar="POLICY", help=f"policies (default all): {', '.join(WORKLOAD_POLICIES)}")
    p.add_argument("--seed", type=int, default=0, help="workload seed")
    p.add_argument("--out-csv", type=_out_path, help="write the rows as CSV (the visualizer's density page reads it)")
    p.add_argument("--out-json", type=_out_path, help="write rows and comparisons as JSON")
    p.add_argument("--engine", action="store_true", help="instead: spot check on the real tiny engine")
    p.add_argument("--scale", type=int, metavar="N", help="instead: time the simulator on N requests")
    rules = _rules(("--requests", _within(1, MAX_SIM_REQUESTS), f"must be in [1, {MAX_SIM_REQUESTS:,}]"),
                   ("--budgets-gib", lambda bs: all(0 < b <= MAX_SIM_GIB for b in bs),
                    f"each must be in (0, {MAX_SIM_GIB}]"),
                   ("--scale", lambda n: n is None or 1 <= n <= MAX_SIM_REQUESTS,
                    f"must be in [1, {MAX_SIM_REQUESTS:,}]"))

    def check(a):  # --engine and --scale run workloads of their own: the sweep's flags would be silently ignored
        mode = "--engine" if a.engine else "--scale" if a.scale is not None else None
        if a.engine and a.scale is not None:
            return "--engine and --scale: one at a time (each is its own run)"
        unused = [f"--{k.replace('_', '-')}" for k in ("requests", "budgets_gib", "families", "policies")
                  if mode and getattr(a, k) != p.get_default(k)]
        return rules(a) or (unused and f"{unused[0]}: does not apply with {mode}, which runs its own workload")
    return check


def _spec(p):
    p.add_argument("--new-tokens", type=int, default=128, help="new tokens per request (default %(default)s)")
    p.add_argument("--ks", type=int, nargs="+", default=[3, 5],
        help="drafts per verify to compare (default %(default)s)")
    p.add_argument("--lookup-mins", type=int, nargs="*", default=[2],
                   help="also run per_step with these prompt_lookup_min values (the default is 1)")
    p.add_argument("--repeats", type=int, default=3,
        help="interleaved runs per case, medians reported (default %(default)s)")
    p.add_argument("--tree-widths", type=int, nargs="*", default=[1, 2, 3, 4],
                   help="draft-tree widths compared at k = 4 (1: a chain); none to skip")
    p.add_argument("--torch-compile", action="store_true",
                   help="also plain and per_step rows with static_decode + torch_compile (needs a C++ compiler)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)
    return _rules(("--new-tokens", _within(2, MAX_BENCH_LENGTH), f"must be in [2, {MAX_BENCH_LENGTH}]"),
                  ("--ks", _each(1, MAX_K), f"every k must be in [1, {MAX_K}]"),
                  ("--repeats", _positive, "must be positive"),
                  ("--tree-widths", _each(1, 8), "every tree width must be in [1, 8]"),
                  ("--lookup-mins", lambda ns: all(n >= 1 for n in ns), "every lookup min must be >= 1"))


def _cp(p):
    p.add_argument("--lengths", type=int, nargs="+", default=[8192, 16384, 32768, 65536],
                   help="prompt lengths to prefill (default %(default)s)")
    p.add_argument("--ranks", type=int, nargs="+", default=[2], help="rank counts to run (default %(default)s)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)
    return _rules(("--lengths", _each(2, MAX_BENCH_LENGTH), f"every length must be in [2, {MAX_BENCH_LENGTH}]"),
                  ("--ranks", _each(2, MAX_WORLD_SIZE), f"every rank count must be in [2, {MAX_WORLD_SIZE}]"))


def _disagg(p):
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384],
                   help="prompt lengths (default %(default)s)")
    p.add_argument("--requests", type=int, default=4, help="requests per length (default %(default)s)")
    p.add_argument("--new-tokens", type=int, default=32, help="new tokens per request (default %(default)s)")
    p.add_argument("--dist", action="store_true", help="also run a prefill and a decode worker process (gloo)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)
    return _rules(("--lengths", _each(1, MAX_BENCH_LENGTH), f"every length must be in [1, {MAX_BENCH_LENGTH}]"),
                  ("--requests", _within(1, MAX_NUM_SEQS), f"must be in [1, {MAX_NUM_SEQS}]"),
                  ("--new-tokens", _within(2, MAX_BENCH_LENGTH), f"must be in [2, {MAX_BENCH_LENGTH}]"))


def _spec_mtp(p):
    p.add_argument("--new-tokens", type=int, default=96, help="new tokens per request (default %(default)s)")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4],
        help="drafts per verify to compare (default %(default)s)")
    p.add_argument("--repeats", type=int, default=5,
        help="interleaved runs per case, medians reported (default %(default)s)")
    p.add_argument("--states", nargs="+", default=None, choices=SPEC_STATES,
                   help="rollback strategies to run (default: every registered spec_state; per_step alone with --torch-compile)")
    p.add_argument("--torch-compile", action="store_true",
                   help="every engine with static_decode + torch_compile (needs a C++ compiler)")
    p.add_argument("--compile-gemm", action="store_true",
                   help="with --torch-compile: the steps' products through inductor's C++ GEMM template (compile_gemm)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)
    rules = _rules(("--new-tokens", _within(2, MAX_BENCH_LENGTH), f"must be in [2, {MAX_BENCH_LENGTH}]"),
                   ("--repeats", _positive, "must be positive"),
                   ("--ks", _each(1, MAX_K), f"every k must be in [1, {MAX_K}]"))
    return lambda a: rules(a) or (a.compile_gemm and not a.torch_compile
                                  and "--compile-gemm: only with --torch-compile")


def _prefill(p):
    p.add_argument("--cases", nargs="+", default=["8x128", "1x2048"],
                   help="prefill steps to time, each NxL: N prompts of L tokens in one step (default 8x128 1x2048)")
    p.add_argument("--trees", nargs="+", default=[], metavar="PATH",
                   help="other checkouts of this project to time in the same run, alternating with this one "
                        "(e.g. a git worktree of an earlier commit: the first is the baseline of the ratios)")
    p.add_argument("--repeats", type=int, default=5, help="rounds; each round runs every tree once, in a fresh process")
    p.add_argument("--steps", type=int, default=5, help="timed prefill steps per case and process (median kept)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the timed processes")
    p.add_argument("--model", choices=("trained", "trained-k3"), default="trained", help="the demo model to prefill")
    p.add_argument("--no-malloc-tuning", action="store_true",
                   help="keep glibc's default mmap/trim thresholds in the timed processes")
    p.add_argument("--decode", default=None, metavar="BxD",
                   help="also time decode: B requests of 64-token prompts, every step of their D new tokens (e.g. 8x32)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)

    def check(a):
        bad = [c for c in a.cases + ([a.decode] if a.decode else []) if not re.fullmatch(r"[1-9][0-9]*x[1-9][0-9]*", c)]
        if bad:
            return f"--cases and --decode: each must be NxL (e.g. 8x128), got {bad[0]!r}"
        cases = [tuple(map(int, c.split("x"))) for c in a.cases]
        if any(n > MAX_NUM_SEQS or L > MAX_BENCH_LENGTH for n, L in cases):
            return f"--cases: N at most {MAX_NUM_SEQS}, L at most {MAX_BENCH_LENGTH}"
        missing = [t for t in a.trees if path_problem(t) or not os.path.isdir(os.path.join(t, "kda_ref"))]
        if missing:
            return f"--trees: {missing[0]!r} is not a checkout of this project (no kda_ref/ folder in it)"
        B, D = map(int, (a.decode or "1x1").split("x"))
        if B > MAX_NUM_SEQS or D > MAX_BENCH_LENGTH:
            return f"--decode: B at most {MAX_NUM_SEQS}, D at most {MAX_BENCH_LENGTH}, got {a.decode!r}"
        return _rules(("--repeats", _positive, "must be positive"), ("--steps", _positive, "must be positive"),
                      ("--threads", _within(1, MAX_THREADS), f"must be in [1, {MAX_THREADS}]"))(a)
    return check


# name on the command line -> (module under kda_ref.bench, what it measures, its arguments)
def _serve(p):
    p.add_argument("--model", choices=("trained", "trained-k3", "micro"), default="trained",
                   help="the served model (default: the trained Kimi-Linear-layout demo)")
    p.add_argument("--family", choices=WORKLOAD_FAMILIES, default="multi_turn",
                   help="the workload family whose prompts are sent (tiny scale; default multi_turn)")
    p.add_argument("--num-requests", type=int, default=48, help="requests per load (default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=24, help="output tokens per request (at most the workload's)")
    p.add_argument("--rates", type=float, nargs="+", default=[2.0, 4.0, 8.0],
                   help="Poisson arrival rates, requests per second (default 2 4 8)")
    p.add_argument("--concurrency", type=int, default=None, help="instead of rates: this many requests at a time")
    p.add_argument("--caches", nargs="+", choices=("none", "radix", "block"), default=["none", "radix", "block"])
    p.add_argument("--max-num-seqs", type=int, default=16, help="each server's max_num_seqs (default %(default)s)")
    p.add_argument("--sweep", action="store_true", help="also double the rate (radix) until TTFT p99 passes 2 s")
    p.add_argument("--fill", action="store_true", help="instead: fill each cache with unique traffic to 1x, 4x "
                   "and 16x its pool, then shared-prefix traffic, with and without a Live reader (serve_fill.py)")
    p.add_argument("--idle", type=int, default=None, metavar="ROUNDS", help="instead: one request on an idle "
                   "server (no cache) against offline generate, 20 times each, on ROUNDS fresh servers")
    p.add_argument("--fill-budget-mb", type=float, default=8.0, help="with --fill: each server's memory budget")
    p.add_argument("--fill-rounds", type=int, default=1, help="with --fill: run every server this many times, "
                   "the caches' order reversed every other round; the table gives medians and paired ratios")
    p.add_argument("--url", default=None, help="load a server already running there (kda-ref serve) instead of "
                   "starting one per cache; --caches, --model and --max-num-seqs then do not apply")
    p.add_argument("--api-key", default=None, help="with --url: the server's API key")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: as kda-ref serve, "
                   "every core but one)")
    p.add_argument("--out", type=_out_path, help=OUT_HELP)
    rules = _rules(("--num-requests", _within(1, MAX_SERVE_REQUESTS), f"must be in [1, {MAX_SERVE_REQUESTS:,}]"),
                   ("--max-tokens", _within(1, MAX_BENCH_LENGTH), f"must be in [1, {MAX_BENCH_LENGTH}]"),
                   ("--rates", lambda rs: all(0 < r < math.inf for r in rs), "every rate must be positive and finite"),
                   ("--concurrency", lambda c: c is None or 1 <= c <= MAX_NUM_SEQS, f"must be in [1, {MAX_NUM_SEQS}]"),
                   ("--max-num-seqs", _within(1, MAX_NUM_SEQS), f"must be in [1, {MAX_NUM_SEQS}]"),
                   ("--seed", _within(*SEED_RANGE), "must be a 64-bit seed"),
                   ("--threads", lambda t: t is None or 1 <= t <= MAX_THREADS, f"must be in [1, {MAX_THREADS}]"),
                   ("--fill-budget-mb", _within(0.5, 1024), "must be in [0.5, 1024]"),
                   ("--fill-rounds", _within(1, 100), "must be in [1, 100]"),
                   ("--idle", lambda n: n is None or 1 <= n <= 100, "must be in [1, 100]"),
                   ("--url", lambda u: u is None or re.match(r"https?://[^/\s]+", u),
                    "must be an http:// or https:// address"))
    def check(a):  # --fill, --idle and --url each choose a run of its own
        modes = [f for f, on in (("--fill", a.fill), ("--idle", a.idle is not None), ("--url", a.url is not None)) if on]
        return rules(a) or (len(modes) > 1 and f"{' and '.join(modes)}: one at a time (each is its own run)")
    return check


BENCHES = {
    "kernels": ("kernels", "KDA core vs fla / transformers anchors", _kernels),
    "engine": ("engine", "the engine vs transformers generate, and the tracing overhead", _engine),
    "prefill": ("prefill", "prefill steps against earlier checkouts, with the machine's matmul rate", _prefill),
    "prefix-cache": ("prefix_cache", "the radix cache's checkpoint policies on the tiny engine", _prefix_cache),
    "checkpoints": ("checkpoints", "compressed checkpoints: bytes and drift", _checkpoints),
    "workloads": ("workloads", "cache policies x workloads x budgets at 48B sizes (simulator)", _workloads),
    "spec": ("spec", "speculative decoding, static decode and verify costs", _spec),
    "spec-mtp": ("spec_mtp", "MTP drafts against n-gram drafts on the trained K3 demo", _spec_mtp),
    "cp": ("cp", "context-parallel prefill over real ranks", _cp),
    "disagg": ("disagg", "prefill/decode disaggregation handoffs", _disagg),
    "serve": ("serve", "the HTTP server under Poisson load, by prefix cache (vs its /metrics)", _serve),
}
OUTPUT_FLAGS = ("out", "out_csv", "out_json")


def build_parser(name: str) -> tuple[argparse.ArgumentParser, object]:
    """The parser of benchmark ``name`` and its range check (a function of the namespace returning an
    error message or a false value)."""
    module, what, add = BENCHES[name]
    p = argparse.ArgumentParser(prog=f"kda-ref bench {name}", description=f"Benchmark: {what} "
                                f"(python -m kda_ref.bench.{module}).")
    return p, add(p)


def parse(name: str, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse benchmark ``name``'s arguments, check their ranges and claim its output files (exits 2
    with one message on any problem)."""
    p, check = build_parser(name)
    a = p.parse_args(argv)
    why = check(a)
    if why:
        p.error(why)
    given = [os.path.realpath(getattr(a, f)) for f in OUTPUT_FLAGS if getattr(a, f, None)]
    if len(set(given)) < len(given):  # one would overwrite the other
        p.error(f"{' and '.join('--' + f.replace('_', '-') for f in OUTPUT_FLAGS if getattr(a, f, None))}: "
                "each must name its own file")
    for flag in OUTPUT_FLAGS:
        if hasattr(a, flag):
            try:
                setattr(a, flag, claim_output(getattr(a, flag), "--" + flag.replace("_", "-")))
            except OutputError as e:
                p.error(str(e))
    return a
