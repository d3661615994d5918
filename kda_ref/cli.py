"""``kda-ref``: the command line.

    kda-ref generate "The cat sat" --max-tokens 32 --trace out.jsonl
    kda-ref bench kernels --lengths 512 2048
    kda-ref bench engine --batches 1 8

``generate`` runs prompts through the engine (:class:`kda_ref.LLM`) and can record a trace for the
visualizer; ``bench`` forwards to :mod:`kda_ref.bench.kernels` / :mod:`kda_ref.bench.engine`.
"""

from __future__ import annotations

import argparse
import sys

HELP_EPILOG = """examples:
  kda-ref generate "Hello KDA" --max-tokens 32
  kda-ref generate "a" "b" --trace run.jsonl --max-num-batched-tokens 64
  kda-ref bench kernels --lengths 512 2048 --repeats 3
  kda-ref bench engine --prompt-len 1024 --batches 1 8
  kda-ref bench prefix-cache --budgets-mb 2 8
  kda-ref bench workloads --requests 1000 --out-csv docs/bench/workloads.csv
  kda-ref cp --ranks 2 --prompt-file docs/kda.md
  kda-ref train --help
"""


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


# the library's argument names -> the flag that sets them, per command
GENERATE_FLAGS = {"max_tokens": "--max-tokens", "temperature": "--temperature", "top_k": "--top-k", "seed": "--seed",
                  "backend": "--backend", "max_num_seqs": "--max-num-seqs",
                  "max_num_batched_tokens": "--max-num-batched-tokens", "memory_budget_bytes": "--memory-budget-mb",
                  "path": "--model", "model": "--model", "prompt": "prompts"}
CP_FLAGS = {"world_size": "--ranks", "timeout": "--timeout", "backend": "--backend", "path": "--model",
            "model": "--model", "token_ids": "--prompt-file"}


def _as_flag(message: str, flags: dict[str, str]) -> str:
    """An error raised by the library names the API argument (``max_tokens: must be >= 1``); on the
    command line it names the flag that set it (``--max-tokens: must be >= 1``)."""
    head, sep, rest = message.partition(": ")
    return f"{flags[head]}: {rest}" if sep and head in flags else message


def _model_error(e: Exception) -> str:
    """A model that could not be loaded or built, as ``--model: ...`` (the library says ``path: ...`` or
    names the config field)."""
    msg = str(e) if not isinstance(e, OSError) or not e.strerror else f"{e.strerror}: {e.filename}"
    return "--model: " + msg.removeprefix("path: ").removeprefix("model: ")


def _pick_model(name: str, seed: int):
    """``--model``: 'trained', 'random-tiny' or a checkpoint folder, as LLM takes it."""
    from .model import ModelConfig

    if name == "trained":
        from .train import trained_path

        return trained_path()
    return ModelConfig.tiny() if name == "random-tiny" else name


def _generate(a: argparse.Namespace) -> int:
    from .utils.outputs import OutputError, claim_output

    if a.threads < 1:
        return _fail(f"--threads: must be >= 1, got {a.threads}")
    if a.memory_budget_mb < 1:
        return _fail(f"--memory-budget-mb: must be >= 1, got {a.memory_budget_mb}")
    try:  # opened now, before the model loads and the generation runs
        trace = claim_output(a.trace, "--trace")
    except OutputError as e:
        return _fail(str(e))
    try:
        return _run_generate(a, trace)
    finally:
        if trace is not None:
            trace.release()  # nothing written (the run failed): remove the file the claim created


def _run_generate(a: argparse.Namespace, trace) -> int:
    import torch

    from .engine import LLM, RequestError, SamplingParams
    from .model import CheckpointError, ConfigError
    from .trace import TraceRecorder
    from .utils.outputs import OutputError

    torch.set_num_threads(a.threads)
    tracer = TraceRecorder() if trace else None
    try:
        llm = LLM(_pick_model(a.model, a.seed), seed=a.seed, backend=a.backend, max_num_seqs=a.max_num_seqs,
                  max_num_batched_tokens=a.max_num_batched_tokens, memory_budget_bytes=a.memory_budget_mb << 20,
                  tracer=tracer)
        params = SamplingParams(max_tokens=a.max_tokens, temperature=a.temperature, top_k=a.top_k, seed=a.seed,
                                ignore_eos=a.ignore_eos)
        outs = llm.generate(list(a.prompts), params, use_tqdm=len(a.prompts) > 1)
    except (ConfigError, CheckpointError, OSError) as e:  # the model (config, weights, folder)
        return _fail(_model_error(e))
    except (RequestError, ValueError) as e:
        return _fail(_as_flag(str(e), GENERATE_FLAGS))
    for o in outs:
        print(f"[{o.req_id}] {o.text!r}  ({len(o.token_ids)} tokens, {o.finish_reason}, "
              f"ttft {o.metrics['ttft_s'] * 1000:.1f} ms)")
    if a.stats:
        for k, v in llm.stats().items():
            print(f"  {k}: {v}")
    if tracer is not None:
        try:
            with trace.open(encoding="utf-8", newline="\n") as f:
                n = tracer.write_jsonl(f, prompts=list(a.prompts), backend=a.backend)
        except OutputError as e:
            return _fail(str(e))
        print(f"wrote {n} trace events to {a.trace}")
    return 0


def _cp(a: argparse.Namespace) -> int:
    import torch

    from .model import CheckpointError, ConfigError, HybridModel, ModelConfig, RequestCache, load_pretrained
    from .parallel import ContextParallelError, CPLayout, context_parallel_prefill
    from .tokenizer import ByteTokenizer

    if a.ranks < 1:
        return _fail(f"--ranks: must be >= 1, got {a.ranks}")
    if a.timeout <= 0:
        return _fail(f"--timeout: must be positive, got {a.timeout}")
    try:
        text = open(a.prompt_file, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"--prompt-file: {e}")
    if not text:
        return _fail(f"--prompt-file: {a.prompt_file} is empty")
    try:
        if a.model == "trained":
            from .train import load_trained

            model = load_trained()
        elif a.model == "random-tiny":
            model = HybridModel(ModelConfig.tiny(), seed=0)
        else:
            model = load_pretrained(a.model)
    except (ConfigError, CheckpointError, OSError) as e:
        return _fail(_model_error(e))
    model.eval()
    bos = model.config.bos_token_id
    ids = ([bos] if bos is not None and bos < model.config.vocab_size else []) + list(ByteTokenizer().encode(text))
    try:
        res = context_parallel_prefill(model, [ids], world_size=a.ranks, backend=a.backend, timeout=a.timeout)
    except (ContextParallelError, ValueError) as e:
        return _fail(_as_flag(str(e), CP_FLAGS))
    cache = RequestCache(model.config, 1, max_tokens=len(ids), page_size=16)
    with torch.no_grad():
        single = model(torch.tensor(ids), cache.batch([len(ids)]), cache.tensors, logits="last")
    lay = CPLayout([len(ids)], a.ranks)
    print(f"{len(ids)} prompt tokens over {a.ranks} ranks ({a.backend})")
    print("rank  tokens            forward s   sent bytes")
    for r in range(a.ranks):
        lo, hi = lay.bounds(0, r)
        print(f"{r:>4}  [{lo:>6}, {hi:>6})  {res.seconds[r]:>9.3f}   {res.sent_bytes[r]:>10,}")
    print(f"max |logit - single process| = {float((res.logits - single).abs().max()):.2e}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .bench.args import BENCHES

    p = argparse.ArgumentParser(prog="kda-ref", description="Reference engine for hybrid KDA + MLA models.",
                                epilog=HELP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text for one or more prompts",
                       description="Run prompts through the continuous-batching engine (greedy by default).")
    g.add_argument("prompts", nargs="+", help="prompt texts (UTF-8, byte-level tokens)")
    g.add_argument("--max-tokens", type=int, default=32, help="new tokens per prompt (default 32)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    g.add_argument("--top-k", type=int, default=0, help="sample only from the k most likely tokens (0 = off)")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past the end-of-sequence token")
    g.add_argument("--model", default="trained",
                   help="'trained' (default: the small model trained in this repo, docs/training.md), "
                        "'random-tiny' (ModelConfig.tiny() with weights from --seed), or a Kimi-Linear "
                        "checkpoint folder (config.json + *.safetensors)")
    g.add_argument("--seed", type=int, default=0, help="weight-initialisation and sampling seed (default 0)")
    g.add_argument("--backend", choices=["torch", "triton"], default="torch",
                   help="kernels: torch references or Triton (needs a GPU or TRITON_INTERPRET=1)")
    g.add_argument("--max-num-seqs", type=int, default=16, help="most requests running at once (default 16)")
    g.add_argument("--max-num-batched-tokens", type=int, default=512,
                   help="token budget of one step; longer prompts are prefilled in chunks (default 512)")
    g.add_argument("--memory-budget-mb", type=int, default=64,
                   help="cache budget shared by KV pages and KDA states, in MiB (default 64)")
    g.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    g.add_argument("--trace", metavar="OUT.jsonl", help="record every engine event to this JSONL trace")
    g.add_argument("--stats", action="store_true", help="print the engine's counters at the end")
    g.set_defaults(func=_generate)

    b = sub.add_parser("bench", help="benchmarks (kernels | engine | prefix-cache | checkpoints | workloads | spec | "
                                     "cp | disagg); options after the name go to it",
                       description="Forward to python -m kda_ref.bench.<name>.")
    b.add_argument("which", choices=sorted(BENCHES), help="which benchmark: " + "; ".join(
        f"{k}: {v[1]}" for k, v in sorted(BENCHES.items())))
    b.add_argument("args", nargs=argparse.REMAINDER, help="options of that benchmark (see its --help)")
    b.set_defaults(func=_bench)

    c = sub.add_parser("cp", help="prefill one prompt over R ranks by prefix scan (context parallelism)",
                       description="Split a prompt over R ranks (real processes), prefill it with KCP, print each "
                                   "rank's slice, time and bytes sent, and the distance to the single-process logits.")
    c.add_argument("--ranks", type=int, default=2, help="number of ranks (default 2)")
    c.add_argument("--prompt-file", required=True, help="a UTF-8 text file: the prompt")
    c.add_argument("--model", default="trained", help="'trained' (default), 'random-tiny', or a checkpoint folder")
    c.add_argument("--backend", choices=["gloo", "threads"], default="gloo",
                   help="gloo: one process per rank (default); threads: ranks as threads of this process")
    c.add_argument("--timeout", type=float, default=120.0, help="seconds before a silent rank is an error")
    c.set_defaults(func=_cp)

    tr = sub.add_parser("train", add_help=False,
                        help="train the small hybrid model (recall + the repo's docs); options go to it",
                        description="Forward to python -m kda_ref.train (see docs/training.md).")
    tr.add_argument("args", nargs=argparse.REMAINDER, help="options of python -m kda_ref.train (see its --help)")
    tr.set_defaults(func=_train)
    return p


def _train(a: argparse.Namespace) -> int:  # reached only through build_parser() users; main() forwards earlier
    from .train.__main__ import main as train_main

    return int(train_main(a.args) or 0)


def _bench(a: argparse.Namespace) -> int:
    import importlib

    from .bench.args import BENCHES, parse

    parsed = parse(a.which, a.args)  # before the benchmark's module (and torch) is imported
    importlib.import_module(f"kda_ref.bench.{BENCHES[a.which][0]}").cli(parsed)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:  # everything after "train" belongs to it, --help included
        from .train.__main__ import main as train_main

        return int(train_main(argv[1:]) or 0)
    a = build_parser().parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
