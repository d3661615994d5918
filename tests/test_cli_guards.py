"""The command line refuses every bad flag while it parses, before torch is imported.

* each flag of ``generate`` / ``cp`` found refused late (after ~6 s of imports) or not at all
  (``--threads 2147483648``: a traceback; ``cp --prompt-file /dev/zero``: an unbounded read) is one
  ``error: --flag: ...`` line and exit code 2, in a fresh interpreter that never imports torch, in a
  fraction of a second;
* the ranges agree with the library's: the repeated constants (:mod:`kda_ref.utils.limits`) equal the
  library's, each engine field's ``min`` / ``max`` is where the flag's range ends, and a property test
  fuzzes the flags with wrong types and extreme values: a refused value names its flag and exits 2
  without importing torch, the library refuses it too (except the command line's own documented
  bounds), and an accepted value is one the library accepts;
* a few extreme values the library takes run a tiny generation to completion.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import io
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref import cli
from kda_ref.utils import limits

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROMPT = str(ROOT / "README.md")
# modules parsing may use: the command line and its torch-free helpers (everything else of kda_ref, and
# torch, is blocked while a command line is parsed in-process)
# (what a fresh interpreter imports for them, torch not among them: a test run alone imports them in the guard)
TORCH_FREE = {"kda_ref", "kda_ref.cli", "kda_ref.utils", "kda_ref.utils.limits", "kda_ref.utils.config_fields",
              "kda_ref.utils.outputs", "kda_ref.utils.files", "kda_ref.utils.lazy", "kda_ref.bench",
              "kda_ref.bench.args", "kda_ref.speculative", "kda_ref.speculative.config",
              "kda_ref.speculative.drafter", "kda_ref.speculative.drafters"}


def _blocked(name: str) -> bool:
    return (name == "torch" or name.startswith("torch.") or name.startswith("kda_ref.")) and name not in TORCH_FREE


class _NoImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if _blocked(name):
            raise ImportError(f"{name} imported while the command line was parsed")
        return None


@contextlib.contextmanager
def no_torch():
    """Within: importing torch or any torch-using part of kda_ref raises ``ImportError``, whether or not
    this test process imported them before (their ``sys.modules`` entries are ``None`` meanwhile)."""
    saved = {k: v for k, v in sys.modules.items() if _blocked(k)}
    for k in (*saved, "torch", "kda_ref.engine", "kda_ref.model", "kda_ref.context_parallel", "kda_ref.train"):
        sys.modules[k] = None
    finder = _NoImport()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if _blocked(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_the_guard_catches_an_import_of_torch():
    with no_torch(), pytest.raises(ImportError):
        import torch  # noqa: F401
    with no_torch(), pytest.raises(ImportError):
        from kda_ref.engine import LLM  # noqa: F401
    import torch  # noqa: F401 -- back afterwards
    from kda_ref.engine import LLM  # noqa: F401,F811


def _main(argv: list[str]) -> tuple[int, str]:
    """``cli.main(argv)`` with torch blocked: its exit code and what it printed to stderr."""
    err = io.StringIO()
    with no_torch(), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, err.getvalue()


# ---- the flags found refused late, in a fresh interpreter ----------------------------------------------------
GEN = ["generate", "hi", "--model", "random-tiny"]
LATE = [  # (argv, the flag the error names)
    (GEN + ["--threads", "2147483648"], "--threads"),
    (GEN + ["--max-tokens", "0"], "--max-tokens"),
    (GEN + ["--temperature", "nan"], "--temperature"),
    (GEN + ["--top-k", "-1"], "--top-k"),
    (GEN + ["--seed", "1e23"], "--seed"),
    (GEN + ["--max-num-seqs", "0"], "--max-num-seqs"),
    (GEN + ["--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
    (GEN + ["--memory-budget-mb", str(1 << 40)], "--memory-budget-mb"),
    (["generate", "hi", "--model", "/nonexistent"], "--model"),
    (["generate", "hi", "--model", "x" * 5000], "--model"),
    (["generate", ""], "prompts[0]"),
    (["cp", "--prompt-file", PROMPT, "--ranks", "100000"], "--ranks"),
    (["cp", "--prompt-file", PROMPT, "--timeout", "nan"], "--timeout"),
    (["cp", "--prompt-file", "/dev/zero"], "--prompt-file"),
    (["cp", "--prompt-file", "/nonexistent/p.txt"], "--prompt-file"),
    (["cp", "--prompt-file", "a\0b"], "--prompt-file"),
]
_FRESH = """
import contextlib, io, json, sys, time
from kda_ref.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err, t0 = io.StringIO(), time.perf_counter()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    out.append({"rc": rc, "err": err.getvalue(), "s": time.perf_counter() - t0, "torch": "torch" in sys.modules})
print(json.dumps(out))
"""


def test_each_late_flag_is_refused_at_once_without_torch(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a blocking open would hang the command
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * (limits.MAX_PROMPT_FILE_BYTES + 1))
    cases = LATE + [(["cp", "--prompt-file", str(fifo)], "--prompt-file"),
                    (["cp", "--prompt-file", str(big)], "--prompt-file"),
                    (["cp", "--prompt-file", str(tmp_path)], "--prompt-file")]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", _FRESH, json.dumps([a for a, _ in cases])], capture_output=True,
                         text=True, timeout=120, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    for (argv, flag), got in zip(cases, json.loads(res.stdout)):
        assert got["rc"] == 2 and got["err"].startswith(f"error: {flag}: "), (argv[:6], got)
        assert got["err"].count("\n") == 1 and "Traceback" not in got["err"], got
        assert not got["torch"], (argv[:6], "torch was imported")
        assert got["s"] < 0.5, (argv[:6], got["s"])


def test_the_installed_command_exits_2():
    """Through the interpreter's exit status, not only ``main``'s return value."""
    res = subprocess.run([sys.executable, "-m", "kda_ref.cli", "generate", "hi", "--threads", "2147483648"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr == "error: --threads: must be <= 1024, got 2147483648\n"


def test_max_tokens_past_any_context_is_refused_while_parsing_and_past_the_models_by_its_flag(capsys):
    """``--max-tokens 10**23`` was refused after the model loaded, naming ``prompts[0]``: now no context
    can hold it (refused before torch, as the library refuses it), and one the model's context cannot hold
    with a prompt is refused by the flag."""
    from kda_ref import ModelConfig, SamplingParams
    from kda_ref.engine import RequestError

    rc, err = _main([*GEN, "--max-tokens", str(10**23)])
    assert rc == 2 and err.startswith(f"error: --max-tokens: must be <= {limits.MAX_CONTEXT_TOKENS}"), err
    with pytest.raises(RequestError, match="^max_tokens: must be an int in"):
        SamplingParams(max_tokens=limits.MAX_CONTEXT_TOKENS + 1)
    with pytest.raises(ValueError, match="^max_position_embeddings: must be at most"):
        ModelConfig(max_position_embeddings=limits.MAX_CONTEXT_TOKENS + 1)
    assert cli.main(["generate", "hi", "--model", "random-tiny", "--max-tokens", "8192"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --max-tokens: 8,192 new tokens leave no room") and "8,192 tokens" in err, err


def test_a_bench_thread_count_is_bounded_too():
    from kda_ref.bench.args import parse

    for name in ("kernels", "engine"):
        with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as exit_:
            parse(name, ["--threads", "2147483648"])
        assert exit_.value.code == 2 and "--threads: must be in [1, 1024], got 2147483648" in err.getvalue()


@pytest.mark.parametrize("name,argv,names", [
    ("kernels", ["--lengths", "64", str(2**40)], "--lengths: each must be in [1, 1048576]"),
    ("engine", ["--batches", "1", "5000"], "--batches: each must be in [1, 4096]"),
    ("engine", ["--prompt-len", str(2**40)], "--prompt-len: must be in [1, 1048576]"),
    ("spec", ["--ks", "2", "17"], "--ks: every k must be in [1, 16], got [2, 17]"),
    ("spec-mtp", ["--new-tokens", str(2**40)], "--new-tokens: must be in [2, 1048576]"),
    ("serve", ["--max-num-seqs", "5000"], "--max-num-seqs: must be in [1, 4096]"),
    ("serve", ["--seed", str(2**64)], "--seed: must be a 64-bit seed"),
    ("serve", ["--rates", "2", "nan"], "--rates: every rate must be positive and finite"),
    ("workloads", ["--budgets-gib", "inf"], "--budgets-gib: each must be in (0,"),  # an OverflowError traceback in the simulator
    ("prefix-cache", ["--budgets-mb", str(10**8)], "(this machine's memory)"),  # a ValueError traceback in the engine
    ("cp", ["--lengths", str(10**13)], "--lengths: every length must be in [2, 1048576]"),  # an allocation of 80 TB
    ("disagg", ["--lengths", str(10**13)], "--lengths: every length must be in [1, 1048576]"),
    ("spec-mtp", ["--states", "bogus"], "invalid choice: 'bogus'"),  # exit 1 after the --out file was made
    # 10**8 simulated requests filled 16 GB without a word; a decode case past any context
    ("workloads", ["--requests", str(10**8)], "--requests: must be in [1, 1,000,000], got 100000000"),
    ("workloads", ["--scale", str(10**8)], "--scale: must be in [1, 1,000,000]"),
    ("prefill", ["--decode", "99999x99999"], "--decode: B at most 4096, D at most 1048576"),
    # an address urllib cannot open was a traceback; two run modes at once silently ran one of them
    ("serve", ["--url", "notaurl"], "--url: must be an http:// or https:// address"),
    ("serve", ["--url", "http://127.0.0.1:9", "--idle", "1"], "--idle and --url: one at a time"),
    ("serve", ["--fill", "--idle", "1"], "--fill and --idle: one at a time"),
    # flags a mode does not read were silently ignored; two outputs on one path overwrote each other
    ("workloads", ["--scale", "30", "--families", "few_shot"], "--families: does not apply with --scale"),
    ("workloads", ["--engine", "--budgets-gib", "1"], "--budgets-gib: does not apply with --engine"),
    ("workloads", ["--engine", "--scale", "3"], "--engine and --scale: one at a time"),
    ("prefix-cache", ["--out-csv", "same.csv", "--out-json", "same.csv"], "--out-csv and --out-json: each must name"),
], ids=["kernel-length", "batch", "prompt-len", "k", "new-tokens", "serve-seqs", "serve-seed", "serve-rate-nan",
        "sim-budget-inf", "prefix-budget", "cp-length", "disagg-length", "mtp-states", "sim-requests", "sim-scale",
        "prefill-decode", "serve-url", "serve-url-idle", "serve-fill-idle", "scale-families", "engine-budgets",
        "engine-scale", "one-path-two-outputs"])
def test_a_bench_size_past_what_the_library_takes_is_refused_while_parsing(name, argv, names):
    """A size the library would refuse only after building its inputs (or never: a 2**40-token kernel input
    is a MemoryError) ends at the library's bound, one usage line, before torch is imported."""
    from kda_ref.bench.args import MAX_K, parse
    from kda_ref.speculative.config import MAX_SPECULATIVE_TOKENS

    assert MAX_K == MAX_SPECULATIVE_TOKENS
    with no_torch(), contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as exit_:
        parse(name, argv)
    assert exit_.value.code == 2 and names in err.getvalue(), err.getvalue()


def test_an_output_path_no_file_can_have_is_refused_by_its_flag():
    """A NUL byte (``open`` raises ``ValueError``, not ``OSError``) or more characters than any path."""
    from kda_ref.bench.args import parse

    for path in ("run\0.jsonl", "x" * 5000):
        rc, err = _main([*GEN, "--trace", path])
        assert rc == 2 and err.startswith("error: --trace: ") and err.count("\n") == 1, err
        with contextlib.redirect_stderr(io.StringIO()) as out, pytest.raises(SystemExit) as exit_:
            parse("kernels", ["--out", path])
        assert exit_.value.code == 2 and "argument --out: " in out.getvalue()


def test_a_prompt_file_longer_than_the_models_context_is_refused_before_the_ranks_start(tmp_path, monkeypatch,
                                                                                         capsys):
    from kda_ref import context_parallel as parallel

    monkeypatch.setattr(parallel, "context_parallel_prefill", lambda *a, **k: pytest.fail("the ranks started"))
    f = tmp_path / "p.txt"
    f.write_text("a" * 9000, encoding="utf-8")  # 9,001 tokens with BOS; the tiny model's context is 8,192
    assert cli.main(["cp", "--prompt-file", str(f), "--model", "random-tiny", "--backend", "threads"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --prompt-file: ") and "9,001 tokens" in err and "8,192" in err


# ---- the ranges are the library's ------------------------------------------------------------------------------
def test_the_library_checks_the_same_numbers():
    """The command line and the library read one set of ranges (kda_ref/utils/limits.py): the library's
    fields end there, and its checks refuse just past them."""
    from kda_ref import EngineConfig, SamplingParams
    from kda_ref.engine import RequestError, config

    spec = {s["name"]: s for s in config.field_specs(config.ParallelConfig)}
    assert spec["context_parallel_size"]["max"] == limits.MAX_WORLD_SIZE
    assert spec["cp_timeout"]["max"] == limits.MAX_CP_TIMEOUT_S
    seed = {s["name"]: s for s in config.field_specs(EngineConfig)}["seed"]
    assert (seed["min"], seed["max"]) == limits.SEED_RANGE
    SamplingParams(temperature=limits.MAX_TEMPERATURE, seed=limits.SEED_RANGE[1])
    with pytest.raises(RequestError, match="^temperature"):
        SamplingParams(temperature=limits.MAX_TEMPERATURE * 1.001)
    with pytest.raises(RequestError, match="^temperature"):
        SamplingParams(temperature=limits.MIN_TEMPERATURE / 2)
    with pytest.raises(ValueError, match="^cp_timeout"):
        EngineConfig.from_kwargs(cp_timeout=limits.MAX_CP_TIMEOUT_S * 2)


CP_BASE = ["cp", "--prompt-file", PROMPT, "--model", "random-tiny"]


def _engine_fields():
    """(the flag, the command line it goes on, its field's rules, the flag's unit in the field's)"""
    from kda_ref.engine import config

    specs = {s["name"]: s for cls in (config.SchedulerConfig, config.CacheConfig, config.EngineConfig,
                                      config.ParallelConfig) for s in config.field_specs(cls)}
    return [("--max-num-seqs", GEN, specs["max_num_seqs"], 1),
            ("--max-num-batched-tokens", GEN, specs["max_num_batched_tokens"], 1),
            ("--memory-budget-mb", GEN, specs["memory_budget_bytes"], 1 << 20), ("--seed", GEN, specs["seed"], 1),
            ("--ranks", CP_BASE, specs["context_parallel_size"], 1)]


@pytest.mark.parametrize("flag,base,spec,unit", _engine_fields(), ids=[f[0] for f in _engine_fields()])
def test_each_engine_flag_ends_where_its_field_does(flag, base, spec, unit):
    """The field's ``min`` (and ``max``) in the flag's unit is taken, one past it refused."""
    lo = -(-spec["min"] // unit)
    cli.parse_args([*base, f"{flag}={lo}"])
    with pytest.raises(cli.UsageError, match=f"^{flag}: "):
        cli.parse_args([*base, f"{flag}={lo - 1}"])
    if spec.get("max") is not None:
        cli.parse_args([*base, f"{flag}={spec['max'] // unit}"])
        with pytest.raises(cli.UsageError, match=f"^{flag}: "):
            cli.parse_args([*base, f"{flag}={spec['max'] // unit + 1}"])


def test_the_timeout_ends_where_its_field_does():
    from kda_ref.engine.config import ParallelConfig, field_specs

    top = next(s for s in field_specs(ParallelConfig) if s["name"] == "cp_timeout")["max"]
    assert cli.parse_args([*CP_BASE, f"--timeout={top!r}"]).timeout == top
    for bad in (top * (1 + 1e-12), 0.0, -1.0):
        with pytest.raises(cli.UsageError, match="^--timeout: "):
            cli.parse_args([*CP_BASE, f"--timeout={bad!r}"])


def _library_accepts(flag: str, value) -> bool:
    """Whether the library takes ``value`` for what ``flag`` sets (``ValueError`` -> no)."""
    from kda_ref.engine import EngineConfig, SamplingParams
    from kda_ref.engine.config import ParallelConfig

    build = {
        "--max-tokens": lambda v: SamplingParams(max_tokens=v),
        "--temperature": lambda v: SamplingParams(temperature=v),
        "--top-k": lambda v: SamplingParams(top_k=v),
        "--seed": lambda v: (SamplingParams(seed=v), EngineConfig.from_kwargs(seed=v)),
        "--max-num-seqs": lambda v: EngineConfig.from_kwargs(max_num_seqs=v),
        "--max-num-batched-tokens": lambda v: EngineConfig.from_kwargs(max_num_batched_tokens=v),
        "--memory-budget-mb": lambda v: EngineConfig.from_kwargs(memory_budget_bytes=v << 20),
        "--backend": lambda v: EngineConfig.from_kwargs(backend=v),
        "--ranks": lambda v: ParallelConfig(context_parallel_size=v),
        "--timeout": lambda v: ParallelConfig(cp_timeout=v),
    }[flag]
    try:
        build(value)
    except ValueError:
        return False
    return True


def _as_number(text: str, kind):
    try:
        return kind(text)
    except ValueError:
        return None


# flag -> (how the library reads the text, the command's own stricter bound: value -> True where only the CLI refuses)
GENERATE = {"--max-tokens": (int, None), "--temperature": (float, None), "--top-k": (int, None), "--seed": (int, None),
            "--max-num-seqs": (int, None), "--max-num-batched-tokens": (int, None), "--memory-budget-mb": (int, None),
            "--backend": (str, None), "--threads": (int, lambda v: True), "--model": (None, None)}
CP = {"--ranks": (int, None), "--timeout": (float, None), "--backend": (None, None),
      "--prompt-file": (None, None), "--model": (None, None)}
EXTREME_INTS = [0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**30]
VALUES = st.one_of(
    st.integers(-3, 3).map(str), st.integers(0, 1 << 20).map(str), st.integers().map(str),
    st.sampled_from(EXTREME_INTS).map(str), st.floats(0, 100).map(repr),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "-nan", "inf", "-inf", "1e23", "1e400", "1e-40", "1e6", "1000000.1", "0x10", " 7 ",
                     "", "-0", "1_000", "1.5", "true", "None", "torch", "triton", "gloo", "threads", "trained",
                     "random-tiny", "9" * 5000, "a\0b", "/dev/zero", "/nonexistent", "."]),
    st.text(max_size=12))


@settings(max_examples=250, deadline=None, derandomize=True)
@given(command=st.sampled_from(["generate", "cp"]), data=st.data(), text=VALUES)
def test_fuzzed_flags_are_refused_by_name_without_torch_as_the_library_would(tmp_path_factory, command, data, text):
    flags = GENERATE if command == "generate" else CP
    flag = data.draw(st.sampled_from(sorted(flags)), label="flag")
    if command == "generate":
        base = ["generate", "hi", "--model", "random-tiny"]
    else:
        prompt = tmp_path_factory.getbasetemp() / "prompt.txt"
        prompt.write_text("abc", encoding="utf-8")
        base = ["cp", "--prompt-file", str(prompt), "--model", "random-tiny"]
    argv = [*base, f"{flag}={text}"]
    try:
        with no_torch():
            a = cli.parse_args(argv)
    except cli.UsageError as e:
        assert str(e).startswith(f"{flag}: ") and not e.usage, (argv, str(e))
        rc, err = _main(argv)  # the whole command: one line, exit code 2, no torch
        assert rc == 2 and err == f"error: {e}\n"
        kind, cli_only = flags[flag]
        value = _as_number(text, kind) if kind in (int, float) else text if kind is str else None
        if value is not None and not (cli_only and cli_only(value)):
            assert not _library_accepts(flag, value), (flag, text, "the library takes what the command refuses")
        return
    kind, _ = flags[flag]
    if kind is not None:
        value = getattr(a, flag.removeprefix("--").replace("-", "_"))
        assert _library_accepts(flag, value) if flag != "--threads" else 1 <= value <= limits.MAX_THREADS, (flag, text)


@pytest.mark.parametrize("extra", [
    ["--top-k", str(10**21), "--temperature", "1e6"],
    ["--seed", str(2**64 - 1), "--temperature", "0.5"],
    ["--seed", str(-(2**63)), "--max-num-seqs", str(limits.MAX_NUM_SEQS),
     "--max-num-batched-tokens", str(limits.MAX_BATCHED_TOKENS)],
    ["--threads", "1", "--memory-budget-mb", "1", "--top-k", "0", "--temperature", "0"],
], ids=["top-k-huge", "seed-max", "seed-min-largest-budgets", "small"])
def test_extreme_values_the_library_takes_run_to_completion(extra, capsys):
    assert cli.main(["generate", "hi", "--model", "random-tiny", "--max-tokens", "2", "--threads", "1", *extra]) == 0
    out = capsys.readouterr().out
    assert "(2 tokens, length" in out or "tokens, stop" in out


def test_an_output_file_is_written_whole_or_not_at_all(tmp_path):
    """A write that failed half-way (a full disk, a size limit, Ctrl-C) left the target cut short -- over the
    previous good file. It is now written beside the target and renamed over it only once whole."""
    from kda_ref.utils.outputs import claim_output

    path = tmp_path / "result.json"
    path.write_text('{"good": 1}')
    out = claim_output(path, "--out-json")
    with pytest.raises(KeyboardInterrupt), out.open() as f:
        f.write('{"half": ')
        raise KeyboardInterrupt
    assert path.read_text() == '{"good": 1}' and sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
    with out.open() as f:
        f.write('{"new": 2}')
    assert json.loads(path.read_text()) == {"new": 2} and sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_an_output_through_a_link_replaces_the_target_and_keeps_its_mode(tmp_path):
    """Written whole through a link, the link's target gets the new bytes (the link stays a link) and its
    permission bits; replacing the link itself left the target stale and the file world-readable."""
    import os
    import stat

    from kda_ref.utils.outputs import claim_output

    target = tmp_path / "real.json"
    target.write_text("{}")
    target.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with claim_output(link, "--out-json").open() as f:
        f.write('{"new": 1}')
    assert link.is_symlink() and json.loads(target.read_text()) == {"new": 1}
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600


@pytest.mark.skipif(hasattr(__import__("os"), "geteuid") and __import__("os").geteuid() == 0,
                    reason="root writes in a read-only folder")
def test_an_output_in_a_read_only_folder_is_refused_when_claimed(tmp_path):
    """The final write renames a file made beside the target, so a writable file in a folder that is not
    writable is refused at once, not after the work."""
    from kda_ref.utils.outputs import OutputError, claim_output

    path = tmp_path / "ro" / "out.json"
    path.parent.mkdir()
    path.write_text("{}")
    path.parent.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="--out-json: cannot write"):
            claim_output(path, "--out-json")
    finally:
        path.parent.chmod(0o700)


def test_claiming_an_output_neither_opens_nor_removes_a_fifo_left_under_the_temp_name(tmp_path):
    """The folder check makes a file of its own: a FIFO someone left under the name the final write would
    use (``temp_beside``) is not opened (it would block) and is still there after the claim."""
    import stat

    from kda_ref.utils.files import temp_beside
    from kda_ref.utils.outputs import claim_output

    path = tmp_path / "out.json"
    fifo = temp_beside(os.path.realpath(path))
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # with a reader, opening it to write would not block
    try:
        claim_output(path, "--out-json").release()
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(fifo)]  # no probe left behind


def test_a_failing_benchmark_is_one_line_and_leaves_no_empty_output(tmp_path, monkeypatch, capsys):
    """A benchmark that failed or was interrupted left the empty file its --out claimed, and Ctrl-C or a
    failed write at the end printed a traceback: one line now (exit 130 for Ctrl-C, 2 for the write)."""
    from kda_ref.bench import workloads as bench_workloads
    from kda_ref.utils.outputs import OutputError

    out = tmp_path / "w.json"
    for raised, code, said in ((KeyboardInterrupt(), 130, "kda-ref: interrupted"),
                               (OutputError("--out-json: cannot write w.json (File too large)"), 2,
                                "error: --out-json: cannot write w.json (File too large)")):
        def fail(a, raised=raised):
            raise raised

        monkeypatch.setattr(bench_workloads, "cli", fail)
        assert cli.main(["bench", "workloads", "--requests", "1", "--out-json", str(out)]) == code
        assert capsys.readouterr().err.strip().splitlines()[-1] == said and not out.exists()


def test_the_help_names_every_benchmark_and_says_speculation_is_off_by_default():
    """``kda-ref --help`` lists the benchmarks from their table (``prefill`` was missing from a hand-kept
    list), and ``kda-ref serve --help`` gives no drafter as the default: speculation runs only with
    ``--speculative``, whose companions' defaults hold only then."""
    from kda_ref.bench.args import BENCHES
    from kda_ref.server import flags

    top = " ".join(cli.build_parser().format_help().split())
    listed = top.split("benchmarks (", 1)[1].split(")", 1)[0]
    assert [b.strip() for b in listed.split("|")] == list(BENCHES)
    serve = " ".join(flags.build_parser().format_help().split())
    drafter = serve.split("--speculative {ngram,draft,mtp} ", 1)[1].split(" --", 1)[0]
    assert drafter.endswith("(default: off)") and "'ngram'" not in drafter
    assert "(default 3; with --speculative)" in serve  # --num-speculative-tokens
    assert "(default 256)" in serve or "default 256" in serve  # engine flags outside SpecConfig: unchanged
    assert flags.engine_kwargs(flags.build_parser().parse_args([])) == {}  # no flag given: nothing passed on


def test_a_request_that_fails_is_reported_by_generate_not_a_traceback(monkeypatch, capsys):
    """A request the engine ends with ``finish_reason="error"`` (here: every forward raises) has no TTFT: the
    command printed its line from ``ttft_s * 1000`` and died with a TypeError. It prints the request's error
    and exits 1."""
    from kda_ref.model import HybridModel

    def broken(self, *a, **k):
        raise RuntimeError("a kernel with no driver")

    monkeypatch.setattr(HybridModel, "forward_batch", broken)
    assert cli.main(["generate", "hi", "--model", "random-tiny", "--max-tokens", "2", "--threads", "1"]) == 1
    out, err = capsys.readouterr()
    assert "(0 tokens, error)" in out and "ttft" not in out
    assert "[0] failed: " in err and "a kernel with no driver" in err


def test_triton_on_the_cpu_without_the_interpreter_is_refused_by_its_flag(monkeypatch, capsys):
    """``--backend triton`` with the model on the CPU needs Triton's interpreter; without it every request
    failed in its first forward ("0 active drivers"). Refused before anything runs, by the flag, as the
    library refuses ``backend``."""
    from kda_ref import LLM, ModelConfig

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert cli.main(["generate", "hi", "--model", "random-tiny", "--backend", "triton", "--threads", "1"]) == 2
    assert capsys.readouterr().err.startswith("error: --backend: 'triton' runs its kernels on a GPU")
    with pytest.raises(ValueError, match="^backend: 'triton'"):
        LLM(ModelConfig.micro(), backend="triton")


def test_the_help_s_context_parallel_example_runs(monkeypatch, capsys):
    """``kda-ref --help``'s ``cp`` example named a 45k-token file, past the model's 8,192-token context: it
    could only fail. The example's file is read and prefilled (ranks as threads, the same math) from the
    repository root, where the help's paths start."""
    line = next(x for x in cli.HELP_EPILOG.splitlines() if x.strip().startswith("kda-ref cp "))
    monkeypatch.chdir(pathlib.Path(__file__).parents[1])
    assert cli.main([*line.split()[1:], "--backend", "threads"]) == 0
    assert "max |logit - single process|" in capsys.readouterr().out


def test_thread_ranks_out_of_time_end_the_command_cleanly(tmp_path):
    """``cp --backend threads`` past its ``--timeout``: the error named no flag, printed "0 s" for 0.01 and the
    program then aborted (exit 134, "terminate called without an active exception": it exited with the rank
    threads still inside torch). The ranks now stop at their next collective first; exit 2, one line."""
    f = tmp_path / "p.txt"
    f.write_text("kda " * 750)
    res = subprocess.run([sys.executable, "-m", "kda_ref.cli", "cp", "--prompt-file", str(f), "--ranks", "2",
                          "--backend", "threads", "--timeout", "0.01", "--model", "random-tiny"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.count("\n") == 1 and "within 0.01 s" in res.stderr and "--timeout 0.01 s" in res.stderr


@pytest.mark.parametrize("delay", [1.5, 2.5])
def test_ctrl_c_during_cp_is_one_line_from_every_process(tmp_path, delay):
    """A terminal's Ctrl-C reaches the whole process group: the ranks and their forkserver printed
    ``KeyboardInterrupt`` tracebacks, and a rank caught half started read arguments its exited parent had
    freed (``FileNotFoundError``). Wherever the signal lands -- loading, starting the ranks, waiting on them --
    the command says one line and exits 130, and no rank is left."""
    import signal

    f = tmp_path / "p.txt"
    f.write_text("kda " * 750)
    proc = subprocess.Popen([sys.executable, "-m", "kda_ref.cli", "cp", "--prompt-file", str(f), "--ranks", "2",
                             "--model", "random-tiny"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) in ((130, "kda-ref: interrupted\n"), (0, "")), err[-3000:]
    deadline = time.monotonic() + 10  # the group empties: ranks, forkserver and resource tracker exit
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(proc.pid)


def _group_alive(pgid: int) -> list[str]:
    """The processes of group ``pgid`` still running (zombies nobody reaps, as in a container, are gone)."""
    alive = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
            alive.append(stat.parent.name)
    return alive


@pytest.mark.parametrize("argv,says", [
    # sizes the flags allow but the model's 8,192-token context does not: a RequestError traceback
    (["spec", "--new-tokens", "9000", "--ks", "3", "--repeats", "1", "--tree-widths", "--lookup-mins"],
     "error: bench spec: a request its flags ask for is refused by the engine: prompts[0]: max_tokens: 9000"),
    # nothing listens there: a URLError traceback
    (["serve", "--url", "http://127.0.0.1:9", "--num-requests", "2"], "error: --url: cannot reach http://127.0.0.1:9"),
], ids=["past-the-context", "nothing-at-the-url"])
def test_a_bench_the_engine_or_the_network_refuses_ends_in_one_line(argv, says, capsys):
    assert cli.main(["bench", *argv]) == 2
    lines = [x for x in capsys.readouterr().err.replace("\r", "\n").splitlines() if x.startswith("error")]
    assert len(lines) == 1 and lines[0].startswith(says), lines  # (progress bars share stderr)


@pytest.mark.parametrize("module,argv,code,says", [
    # serve had no __main__ block: it did nothing and exited 0
    ("serve", ["--rates", "0"], 2, "--rates: every rate must be positive"),
    # spec_commit ran its benchmark whatever its arguments, --help included
    ("spec_commit", ["--help"], 0, ""),
    ("spec_commit", ["--bogus"], 2, "unrecognized arguments: --bogus"),
])
def test_each_benchmark_module_runs_as_the_docs_call_it(module, argv, code, says):
    """``python -m kda_ref.bench.<name>`` is how docs/benchmarks.md runs them: the same parsing, checks and
    output handling as ``kda-ref bench <name>``."""
    res = subprocess.run([sys.executable, "-m", f"kda_ref.bench.{module}", *argv], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == code and says in res.stderr, res.stderr[-2000:]
    if module == "spec_commit" and code == 0:
        assert res.stdout.startswith("usage: python -m kda_ref.bench.spec_commit")


def test_an_interrupted_benchmark_module_leaves_no_output_file(tmp_path):
    """``python -m kda_ref.bench.kernels --out F`` stopped by Ctrl-C left an empty ``F`` and a traceback;
    ``kda-ref bench`` releases what it claimed. Both run the same way now."""
    import signal

    out = tmp_path / "new.json"
    proc = subprocess.Popen([sys.executable, "-m", "kda_ref.bench.kernels", "--lengths", "8192", "--no-anchors",
                             "--repeats", "50", "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline:  # claimed: the benchmark is past its parsing
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.rstrip().endswith("kda-ref: interrupted"), err[-2000:]
    assert not out.exists()
