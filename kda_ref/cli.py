"""``kda-ref``: the command line.

    kda-ref generate "The cat sat" --max-tokens 32 --trace out.jsonl
    kda-ref bench kernels --lengths 512 2048
    kda-ref bench engine --batches 1 8

``generate`` runs prompts through the engine (:class:`kda_ref.LLM`) and can record a trace for the visualizer;
``bench`` forwards to :mod:`kda_ref.bench.kernels` / :mod:`kda_ref.bench.engine`. Every flag is checked while
parsing, before torch, the engine or the model is imported (:mod:`kda_ref.utils.limits`, the engine's
configuration fields, ``SamplingParams``): a bad value is one line, ``error: --flag: must be ...``, exit code 2
(:func:`parse_args`). What depends on the model (a prompt longer than its
context, a budget too small for one request) is checked by the library before any work, named by its flag.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

from .utils import machine_memory_bytes
from .utils.files import read_regular
from .utils.limits import (MAX_BATCHED_TOKENS, MAX_CONTEXT_TOKENS, MAX_CP_TIMEOUT_S, MAX_NUM_SEQS,
                           MAX_PROMPT_FILE_BYTES, MAX_TEMPERATURE, MAX_THREADS, MAX_WORLD_SIZE, MIN_TEMPERATURE,
                           SEED_RANGE, path_problem)

HELP_EPILOG = """examples:
  kda-ref generate "Hello KDA" --max-tokens 32
  kda-ref generate "a" "b" --trace run.jsonl --max-num-batched-tokens 64
  kda-ref bench kernels --lengths 512 2048 --repeats 3
  kda-ref bench engine --prompt-len 1024 --batches 1 8
  kda-ref bench prefix-cache --budgets-mb 2 8
  kda-ref bench workloads --requests 1000 --out-csv docs/bench/workloads.csv
  kda-ref cp --ranks 2 --prompt-file docs/tutorials/context_parallel.md
  kda-ref serve --prefix-cache radix --port 8000
  kda-ref bench serve --rates 2 4 8
  kda-ref watch http://127.0.0.1:8000   (a kda-ref, vLLM or SGLang server's prefix cache, live)
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


# ---- the flags' checks, torch-free -------------------------------------------------------------------
class UsageError(Exception):
    """A command line that cannot run; the message names the flag first (``--max-tokens: must be ...``).
    ``usage`` is the command's usage line, shown where the message names no flag."""

    def __init__(self, message: str, usage: str = ""):
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises :class:`UsageError` instead of printing and exiting, so that
    :func:`main` answers every bad flag the same way (one line, exit code 2) and a caller of
    :func:`parse_args` gets an exception. argparse words a bad value ``argument --flag: why``; the
    message here is ``--flag: why``."""

    def error(self, message: str):
        head, sep, rest = message.partition(": ")
        named = sep and head.startswith("argument ")
        raise UsageError(f"{head.removeprefix('argument ')}: {rest}" if named else message,
                         "" if named else self.format_usage())


def _shown(text: str) -> str:
    """A value as the error shows it: its repr, cut to 60 characters (a 5,000-digit number stays readable)."""
    r = repr(text)
    return r if len(r) <= 60 else r[:57] + "..."


def _int_flag(lo: int, hi: int | None = None, range_text: str | None = None):
    """``type=`` for an int flag in ``[lo, hi]`` (no upper end when ``hi`` is None), worded as the
    library words the same range (``must be an int >= 1``); a value past one end of a closed range
    names that end (``must be <= 1024``)."""
    expect = "an int " + (range_text or (f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"))

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not an int (3.5, 1e23, a word), or more than 4,300 digits
            raise argparse.ArgumentTypeError(f"must be {expect}, got {_shown(text)}") from None
        if lo <= value and (hi is None or value <= hi):
            return value
        if hi is None or range_text:
            raise argparse.ArgumentTypeError(f"must be {expect}, got {value}")
        raise argparse.ArgumentTypeError(f"must be >= {lo}, got {value}" if value < lo else
                                         f"must be <= {hi}, got {value}")

    return parse


def _float(text: str, expect: str) -> float:
    """``text`` as a finite float, else the flag's error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {expect}, got {_shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be {expect}, got {value}")
    return value


def _temperature(text: str) -> float:
    """``--temperature``: 0 (greedy) or in ``[MIN_TEMPERATURE, MAX_TEMPERATURE]`` (``SamplingParams``)."""
    expect = f"0 (greedy) or a finite number in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]"
    value = _float(text, expect)
    if value != 0 and not MIN_TEMPERATURE <= value <= MAX_TEMPERATURE:
        raise argparse.ArgumentTypeError(f"must be {expect}, got {value!r}")
    return value


def _timeout(text: str) -> float:
    """``cp --timeout``: positive, finite and at most :data:`MAX_CP_TIMEOUT_S` (``ParallelConfig.cp_timeout``'s
    range; ``context_parallel_prefill`` itself fails past ~9.2e9 s, where the deadline overflows)."""
    expect = f"a positive, finite number of seconds, at most {MAX_CP_TIMEOUT_S:g}"
    value = _float(text, expect)
    if not 0 < value <= MAX_CP_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be {expect}, got {value!r}")
    return value


def _memory_budget_mb(text: str) -> int:
    """``--memory-budget-mb``: at least 1 MiB and at most this machine's memory (``CacheConfig``'s
    range for ``memory_budget_bytes``, in MiB)."""
    machine = machine_memory_bytes()
    if machine is None:
        return _int_flag(1)(text)
    return _int_flag(1, machine >> 20, f"in [1, {machine >> 20}] (this machine's memory in MiB)")(text)


def _usable_path(text: str) -> str:
    """``type=`` for a path flag: one the OS can look up (:func:`~kda_ref.utils.limits.path_problem`)."""
    why = path_problem(text)
    if why:
        raise argparse.ArgumentTypeError(why)
    return text


MODEL_NAMES = ("trained", "random-tiny")


def _model(text: str) -> str:
    """``--model``: 'trained', 'random-tiny', or a folder holding a ``config.json`` (its contents are the
    loader's to check, once torch is there)."""
    if text in MODEL_NAMES:
        return text
    _usable_path(text)
    try:
        if not os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"{text} is not a folder (nor 'trained' or 'random-tiny')")
        if not os.path.isfile(os.path.join(text, "config.json")):
            raise argparse.ArgumentTypeError(f"no config.json in {text}")
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read {text} ({e.strerror or type(e).__name__})") from None
    return text


@dataclass(frozen=True)
class PromptFile:
    """``cp --prompt-file``: the path and the text read from it."""

    path: str
    text: str


def read_prompt_file(path: str, max_bytes: int = MAX_PROMPT_FILE_BYTES) -> PromptFile:
    """A regular file of non-empty UTF-8 text, at most ``max_bytes``; anything else (a FIFO, a device
    such as ``/dev/zero``, a folder, a larger file) is refused before a byte more is read
    (:func:`kda_ref.utils.files.read_regular`: opened non-blocking, so that a FIFO without a writer
    cannot hang the command)."""
    _usable_path(path)
    try:
        data = read_regular(path, max_bytes, argparse.ArgumentTypeError, "a prompt file")
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read {path} ({e.strerror or type(e).__name__})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise argparse.ArgumentTypeError(f"{path} is not UTF-8 text (byte {e.start})") from None
    if not text:
        raise argparse.ArgumentTypeError(f"{path} is empty")
    return PromptFile(path, text)


def _check_prompts(prompts: list[str]) -> None:
    """``generate``'s prompts: each non-empty UTF-8 text (an argument that is not valid UTF-8 reaches
    Python as lone surrogates), worded as ``LLM.generate`` words it (``prompts[0]: prompt: empty``)."""
    for i, p in enumerate(prompts):
        if not p:
            raise UsageError(f"prompts[{i}]: prompt: empty")
        try:
            p.encode("utf-8")
        except UnicodeEncodeError as e:
            raise UsageError(f"prompts[{i}]: prompt: not valid UTF-8 (at character {e.start})") from None


def _model_error(e: Exception) -> str:
    """A model that could not be loaded or built, as ``--model: ...`` (the library says ``path: ...`` or
    names the config field)."""
    msg = str(e) if not isinstance(e, OSError) or not e.strerror else f"{e.strerror}: {e.filename}"
    return "--model: " + msg.removeprefix("path: ").removeprefix("model: ")


def _model_source(name: str):
    """``(what LLM is given, the folder or None)`` for ``--model``: a name of :data:`MODEL_NAMES` as ``kda-ref
    serve`` resolves it (:func:`kda_ref.server.models.model_source`), else the checkpoint folder itself."""
    from .server.models import model_source

    return model_source(name) if name in MODEL_NAMES else (name, name)


def _generate(a: argparse.Namespace) -> int:
    """``generate`` with its flags checked (:func:`parse_args`): claim ``--trace``, then run."""
    from .utils.outputs import OutputError, claim_output

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
    from .utils.malloc import tune_glibc_malloc
    from .utils.outputs import OutputError

    torch.set_num_threads(a.threads)
    tune_glibc_malloc()  # as kda-ref serve's engine process (kda_ref.server.engine_core)
    tracer = TraceRecorder() if trace else None
    try:
        llm = LLM(_model_source(a.model)[0], seed=a.seed, backend=a.backend, max_num_seqs=a.max_num_seqs,
                  max_num_batched_tokens=a.max_num_batched_tokens, memory_budget_bytes=a.memory_budget_mb << 20,
                  tracer=tracer)
        if a.max_tokens >= llm.max_model_len:  # with one prompt token at least: refused here, by its flag
            return _fail(f"--max-tokens: {a.max_tokens:,} new tokens leave no room for a prompt in the model's "
                         f"context of {llm.max_model_len:,} tokens")
        params = SamplingParams(max_tokens=a.max_tokens, temperature=a.temperature, top_k=a.top_k, seed=a.seed,
                                ignore_eos=a.ignore_eos)
        outs = llm.generate(list(a.prompts), params, use_tqdm=len(a.prompts) > 1)
    except (ConfigError, CheckpointError, OSError) as e:  # the model (config, weights, folder)
        return _fail(_model_error(e))
    except (RequestError, ValueError) as e:
        return _fail(_as_flag(str(e), GENERATE_FLAGS))
    for o in outs:
        ttft = "" if o.metrics.get("ttft_s") is None else f", ttft {o.metrics['ttft_s'] * 1000:.1f} ms"
        print(f"[{o.req_id}] {o.text!r}  ({len(o.token_ids)} tokens, {o.finish_reason}{ttft})")
        if o.finish_reason == "error":
            print(f"  [{o.req_id}] failed: {o.error}", file=sys.stderr)
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
    return 1 if any(o.finish_reason == "error" for o in outs) else 0


def _cp(a: argparse.Namespace) -> int:
    """``cp`` with its flags checked and its prompt file read (:func:`parse_args`): load the model, check
    the prompt against its context, prefill over the ranks and compare with one process."""
    import torch

    from .model import CheckpointError, ConfigError, HybridModel, RequestCache, load_pretrained
    from .context_parallel import ContextParallelError, CPLayout, context_parallel_prefill
    from .context_parallel.launch import wait_for_thread_ranks
    from .tokenizer import ByteTokenizer

    try:
        source, folder = _model_source(a.model)
        model = load_pretrained(folder) if folder is not None else HybridModel(source, seed=0)
    except (ConfigError, CheckpointError, OSError) as e:
        return _fail(_model_error(e))
    model.eval()
    bos = model.config.bos_token_id
    ids = ([bos] if bos is not None and bos < model.config.vocab_size else []) + \
        list(ByteTokenizer().encode(a.prompt_file.text))
    limit = model.config.max_position_embeddings
    if len(ids) > limit:  # the model's context, known now: before any rank starts
        return _fail(f"--prompt-file: {a.prompt_file.path} is {len(ids):,} tokens (its bytes and BOS), more than "
                     f"the model's context (max_position_embeddings={limit:,})")
    try:
        res = context_parallel_prefill(model, [ids], world_size=a.ranks, backend=a.backend, timeout=a.timeout)
    except ContextParallelError as e:  # a rank died, raised or ran out of time: which flag bounds it
        wait_for_thread_ranks(30.0)  # thread ranks stop at their next collective; exiting before that aborts
        return _fail(f"{e} (--ranks {a.ranks}, --backend {a.backend}, --timeout {a.timeout:g} s)")
    except ValueError as e:
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
    """The command line's parser; every ``type=`` checks its flag's range (torch-free), and an error
    raises :class:`UsageError`."""
    from .bench.args import BENCHES

    p = _Parser(prog="kda-ref", description="Reference engine for hybrid KDA + MLA models.",
                epilog=HELP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    _add_generate(sub)

    b = sub.add_parser("bench", help=f"benchmarks ({' | '.join(BENCHES)}); options after the name go to it",
                       description="Forward to python -m kda_ref.bench.<name>.")
    b.add_argument("which", choices=sorted(BENCHES), help="which benchmark: " + "; ".join(
        f"{k}: {v[1]}" for k, v in sorted(BENCHES.items())))
    b.add_argument("args", nargs=argparse.REMAINDER, help="options of that benchmark (see its --help)")
    b.set_defaults(func=_bench)

    _add_cp(sub)

    # listed for --help only: main() hands everything after these names to their own parsers
    for name, what, target in FORWARDED:
        f = sub.add_parser(name, add_help=False, help=f"{what}; options go to it",
                           description=f"Forward to {target} (see kda-ref {name} --help).")
        f.add_argument("args", nargs=argparse.REMAINDER, help=f"options of kda-ref {name} (see its --help)")
    return p


FORWARDED = (  # (command, what it does, where its options go): main() forwards them before parse_args
    ("serve", "serve a model over OpenAI's HTTP API (docs/serving.md)", "kda_ref.server.serve"),
    ("watch", "follow a kda-ref, vLLM or SGLang server's KV events and metrics, or replay a capture "
              "(docs/serving.md)", "kda_ref.kv_events.watch"),
    ("train", "train the small hybrid model (recall + the repo's docs)", "python -m kda_ref.train"),
)


def _add_generate(sub) -> None:
    """The ``generate`` subcommand's flags (:func:`build_parser`)."""
    g = sub.add_parser("generate", help="generate text for one or more prompts",
                       description="Run prompts through the continuous-batching engine (greedy by default).")
    g.add_argument("prompts", nargs="+", help="prompt texts (UTF-8, byte-level tokens)")
    g.add_argument("--max-tokens", type=_int_flag(1, MAX_CONTEXT_TOKENS), default=32, help="new tokens per prompt (default 32)")
    g.add_argument("--temperature", type=_temperature, default=0.0,
                   help=f"0 = greedy (default); in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}] samples")
    g.add_argument("--top-k", type=_int_flag(0), default=0,
                   help="sample only from the k most likely tokens (0 = off)")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past the end-of-sequence token")
    g.add_argument("--model", type=_model, default="trained",
                   help="'trained' (default: the small model trained in this repo, docs/training.md), "
                        "'random-tiny' (ModelConfig.tiny() with weights from --seed), or a Kimi-Linear "
                        "checkpoint folder (config.json + *.safetensors)")
    g.add_argument("--seed", type=_int_flag(*SEED_RANGE, "in the 64-bit range"), default=0,
                   help="weight-initialisation and sampling seed (default 0)")
    g.add_argument("--backend", choices=["torch", "triton"], default="torch",
                   help="kernels: torch references or Triton (needs a GPU or TRITON_INTERPRET=1)")
    g.add_argument("--max-num-seqs", type=_int_flag(1, MAX_NUM_SEQS), default=16,
                   help="most requests running at once (default 16)")
    g.add_argument("--max-num-batched-tokens", type=_int_flag(1, MAX_BATCHED_TOKENS), default=512,
                   help="token budget of one step; longer prompts are prefilled in chunks (default 512)")
    g.add_argument("--memory-budget-mb", type=_memory_budget_mb, default=64,
                   help="cache budget shared by KV pages and KDA states, in MiB (default 64)")
    g.add_argument("--threads", type=_int_flag(1, MAX_THREADS), default=2,
                   help=f"torch intra-op threads (default 2, at most {MAX_THREADS})")
    g.add_argument("--trace", metavar="OUT.jsonl", type=_usable_path,
                   help="record every engine event to this JSONL trace")
    g.add_argument("--stats", action="store_true", help="print the engine's counters at the end")
    g.set_defaults(func=_generate)


def _add_cp(sub) -> None:
    """The ``cp`` subcommand's flags (:func:`build_parser`)."""
    c = sub.add_parser("cp", help="prefill one prompt over R ranks by prefix scan (context parallelism)",
                       description="Split a prompt over R ranks (real processes), prefill it with KCP, print each "
                                   "rank's slice, time and bytes sent, and the distance to the single-process logits.")
    c.add_argument("--ranks", type=_int_flag(1, MAX_WORLD_SIZE), default=2,
                   help=f"number of ranks (default 2, at most {MAX_WORLD_SIZE})")
    c.add_argument("--prompt-file", type=read_prompt_file, required=True,
                   help=f"a regular file of UTF-8 text, at most {MAX_PROMPT_FILE_BYTES:,} bytes: the prompt")
    c.add_argument("--model", type=_model, default="trained",
                   help="'trained' (default), 'random-tiny', or a checkpoint folder")
    c.add_argument("--backend", choices=["gloo", "threads"], default="gloo",
                   help="gloo: one process per rank (default); threads: ranks as threads of this process")
    c.add_argument("--timeout", type=_timeout, default=120.0,
                   help=f"seconds before a silent rank is an error (default 120, at most {MAX_CP_TIMEOUT_S:g})")
    c.set_defaults(func=_cp)


def _bench(a: argparse.Namespace) -> int:
    from .bench.entry import main as bench_main

    return bench_main(a.which, a.args)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The namespace of a command line whose every flag is in range, or :class:`UsageError` naming the
    first bad one. Imports nothing that imports torch (``--help`` still prints and exits)."""
    a = build_parser().parse_args(argv)
    if a.command == "generate":
        _check_prompts(a.prompts)
    return a


# what kda-ref serve imports beyond the core install: the "serve" extra of pyproject.toml (module names)
SERVE_EXTRA = ("starlette", "uvicorn", "prometheus_client", "jinja2", "zmq", "msgspec")
WATCH_NEEDS = ("zmq", "msgspec", "prometheus_client")  # kda-ref watch: no torch at all


def _missing_extra(command: str, modules: tuple[str, ...]) -> int | None:
    """A one-line failure (exit 1) when this Python cannot import some of ``modules`` of the ``serve`` extra
    (found without importing them), else None."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return _fail(f"kda-ref {command} needs the serve extra ({', '.join(missing)} not installed): "
                 f"pip install -e '.[serve]' in a checkout, or pip install 'kda-viz[serve]'")


def _watch(argv: list[str]) -> int:
    """``kda-ref watch``: its own parser (:mod:`kda_ref.kv_events.watch`), no torch."""
    failed = _missing_extra("watch", WATCH_NEEDS)
    if failed is not None:
        return failed
    from .kv_events.watch import main as watch_main

    return watch_main(argv)


def _launch_worker_forkserver() -> None:
    """Start the worker processes' forkserver before this process imports torch, so the two imports (seconds
    each) overlap: the engine process of ``kda-ref serve`` forks from it (:mod:`kda_ref.utils.procs`). On the
    2-core machine the server answered 3.0 s after its start with the forkserver launched once torch had
    loaded here, and 1.9-2.0 s with it launched first (four starts each, 2026-12-07)."""
    from .utils.procs import quiet_forkserver, worker_context

    quiet_forkserver(worker_context("gloo"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:  # its flags are EngineConfig's, read by its own parser (it imports torch)
        failed = _missing_extra("serve", SERVE_EXTRA)  # one line, before anything heavy is imported
        if failed is not None:
            return failed
        from .utils import STOPPED_WHILE_STARTING, deferred_stop_signals, interrupt_on_stop_signals

        from .server.flags import parse as parse_serve

        flags = parse_serve(argv[1:])  # --help and a bad flag answer here, before torch (exit 0 / 2, one line)
        interrupt_on_stop_signals()  # a signal while torch and the server import stops here, exit 0
        try:
            if not flags.engine_in_process:
                _launch_worker_forkserver()
            with deferred_stop_signals():
                from .server.serve import main as serve_main
        except KeyboardInterrupt:
            print(STOPPED_WHILE_STARTING, file=sys.stderr)
            return 0
        return serve_main(argv[1:])
    if argv[:1] == ["watch"]:  # a client of a server: its own parser, torch never imported
        return _watch(argv[1:])
    if argv[:1] == ["train"]:  # everything after "train" belongs to it, --help included
        from .train.__main__ import main as train_main

        return _interruptible(lambda: int(train_main(argv[1:]) or 0))
    try:
        a = parse_args(argv)
    except UsageError as e:
        if e.usage:  # not about one flag's value (a missing argument, an unknown one): show the usage too
            print(e.usage, end="", file=sys.stderr)
        return _fail(str(e))
    return _interruptible(lambda: a.func(a))


def _interruptible(run) -> int:
    """``run()``'s exit code; Ctrl-C is one line and exit 130 (the shell's code for SIGINT), not a traceback:
    what a command was writing is left whole or untouched (:mod:`kda_ref.utils.outputs`)."""
    try:
        return run()
    except KeyboardInterrupt:
        print("kda-ref: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
