"""Bad input files are refused where they enter, with a typed error naming the argument, before any work.

A server loads checkpoint folders and workload files that users give it. A FIFO in their place used
to block the loader forever, a link to ``/dev/urandom`` read gigabytes before a ``MemoryError`` (a size
check reads ``st_size``, 0 for both), a ``.jsonl.gz`` of 300 KB expanded to one 300 MB line before
its error, a ``null`` in ``config.json`` silently meant the default, and ``arrival_s = 1e300`` loaded.

Every test here that opens a hostile file runs the call in a forked child and waits a few seconds for
it (:func:`_refusal`): a regression fails the test and the child is killed; it does not hang the suite.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import time

import pytest
import torch

from kda_ref import LLM, SamplingParams
from kda_ref.model import ConfigError, HybridModel, ModelConfig, load_pretrained, save_pretrained
from kda_ref.model.config import MAX_CONFIG_BYTES
from kda_ref.model.weights import INDEX_FILE, MAX_INDEX_BYTES
from kda_ref.context_parallel.torchrun import read_prompt_text
from kda_ref.tokenizer import (MAX_TOKENIZER_CONFIG_BYTES, MAX_TOKENIZER_JSON_BYTES, TOKENIZER_CONFIG, TOKENIZER_JSON,
                               TokenizerFileError, load_tokenizer)
from kda_ref.trace import TraceRecorder, read_jsonl
from kda_ref.trace.jsonl import MAX_TRACE_BYTES, TraceFormatError
from kda_ref.train.recipe import MAX_RECIPE_BYTES, Recipe, RecipeFileError
from kda_ref.utils import files
from kda_ref.utils.limits import MAX_PROMPT_FILE_BYTES
from kda_ref.utils.outputs import OutputError
from kda_ref.workloads import WorkloadError, load, make, save
from kda_ref.workloads.core import MAX_ARRIVAL_S, MAX_LINE_BYTES

pytestmark = pytest.mark.timeout(30)
posix = pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"),
                           reason="FIFOs, /dev/zero and fork are POSIX")
WAIT_S = 5.0  # every refusal here takes milliseconds; a blocked or endless read takes forever


def _outcome(fn, *args) -> Exception | None:
    """The exception ``fn(*args)`` raises, or ``None`` once it returns, which must happen within
    :data:`WAIT_S` seconds. The call runs in a forked child: one still running then (blocked on a FIFO,
    reading ``/dev/zero``) is killed and the test fails, so a regression neither hangs the suite nor
    keeps reading beside it."""
    parent, child = multiprocessing.Pipe(duplex=False)

    def call():
        try:
            fn(*args)
            child.send(None)
        except BaseException as e:  # noqa: BLE001 -- handed to the test
            child.send(e)

    proc = multiprocessing.get_context("fork").Process(target=call, daemon=True)
    proc.start()
    try:
        if not parent.poll(WAIT_S):
            pytest.fail(f"{fn.__name__}{args} still ran after {WAIT_S} s: blocked, or reading without end")
        return parent.recv()
    finally:
        proc.kill()
        proc.join()


def _refusal(fn, *args) -> Exception:
    """The exception ``fn(*args)`` raises (:func:`_outcome`), which must come within a second."""
    t0 = time.perf_counter()
    error = _outcome(fn, *args)
    assert error is not None, f"{fn.__name__}{args} accepted a hostile file"
    assert time.perf_counter() - t0 < 1.0
    return error


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A saved micro model: config.json, model.safetensors, tokenizer_config.json."""
    folder = tmp_path_factory.mktemp("ckpt")
    save_pretrained(HybridModel(ModelConfig.micro(), seed=0), folder)
    return folder


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _replace_with(path, kind: str):
    """Put a FIFO, or a link to /dev/zero or /dev/urandom, where the file ``path`` was."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(f"/dev/{kind}")
    return path


HOSTILE = ["fifo", "zero", "urandom"]
WHAT = {"fifo": "a FIFO (named pipe)", "zero": "a character device", "urandom": "a character device"}


# ---- config.json -------------------------------------------------------------------------------------
@posix
@pytest.mark.parametrize("kind", HOSTILE)
def test_a_config_json_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    path = _replace_with(tmp_path / "config.json", kind)
    for arg in (path, tmp_path):  # the file, or the folder holding it
        e = _refusal(ModelConfig.from_json, arg)
        assert isinstance(e, ConfigError)
        assert str(e).startswith(f"path: {path}") and f"is {WHAT[kind]}, not a regular file" in str(e)


# ---- every reader of a user-given path -----------------------------------------------------------------
def _tokenizer_of_folder(path):
    """:func:`load_tokenizer` of the folder holding ``path`` (a ``tokenizer_config.json``)."""
    return load_tokenizer(path.parent)


def _tokenizer_json_of_folder(path):
    """:func:`load_tokenizer` of the folder holding ``path`` (a ``tokenizer.json``, no config beside it)."""
    return load_tokenizer(path.parent)


def _cp_prompt_file(path):
    """``kda_ref.context_parallel.torchrun``'s reading of ``--prompt-file``."""
    return read_prompt_text(str(path))


# (reader, the error it raises, the file name it reads): every reader of a user-given path
READERS = [(ModelConfig.from_json, ConfigError, "config.json"), (load, WorkloadError, "w.jsonl"),
           (load, WorkloadError, "w.jsonl.gz"), (_tokenizer_of_folder, TokenizerFileError, TOKENIZER_CONFIG),
           (_tokenizer_json_of_folder, TokenizerFileError, TOKENIZER_JSON), (read_jsonl, TraceFormatError, "t.jsonl"),
           (Recipe.from_json, RecipeFileError, "recipe.json"),
           (_cp_prompt_file, argparse.ArgumentTypeError, "prompt.txt")]
READER_IDS = [f"{read.__name__}-{name}" for read, _, name in READERS]


@posix
@pytest.mark.parametrize("read,error,name", READERS, ids=READER_IDS)
def test_a_fifo_put_there_after_the_check_still_cannot_block(tmp_path, monkeypatch, read, error, name):
    """The race: the path is a regular file when checked, a FIFO when opened. The non-blocking open
    returns at once and the check of the open descriptor refuses it."""
    regular = tmp_path / "regular.json"
    regular.write_text("{}")
    fifo = _replace_with(tmp_path / name, "fifo")
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: real_stat(regular if str(p) == str(fifo) else p, *a, **k))
    e = _refusal(read, fifo)
    assert isinstance(e, error) and str(e) == f"path: {fifo} is a FIFO (named pipe), not a regular file"


@posix
@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("read,error,name", READERS[3:], ids=READER_IDS[3:])
def test_the_other_readers_refuse_a_file_that_is_not_regular_at_once(tmp_path, kind, read, error, name):
    """The tokenizer's files, a trace, a recipe and a ``cp`` prompt file, as config.json and workloads
    (above): a FIFO or a link to a device is named, before it is opened."""
    path = _replace_with(tmp_path / name, kind)
    e = _refusal(read, path)
    assert isinstance(e, error) and str(e).startswith(f"path: {path}"), e
    assert f"is {WHAT[kind]}, not a regular file" in str(e)


@pytest.mark.parametrize("read,error,name,limit", [
    (_tokenizer_of_folder, TokenizerFileError, TOKENIZER_CONFIG, MAX_TOKENIZER_CONFIG_BYTES),
    (_tokenizer_json_of_folder, TokenizerFileError, TOKENIZER_JSON, MAX_TOKENIZER_JSON_BYTES),
    (read_jsonl, TraceFormatError, "t.jsonl", MAX_TRACE_BYTES),
    (Recipe.from_json, RecipeFileError, "recipe.json", MAX_RECIPE_BYTES),
    (_cp_prompt_file, argparse.ArgumentTypeError, "prompt.txt", MAX_PROMPT_FILE_BYTES)], ids=READER_IDS[3:])
def test_the_other_readers_refuse_a_file_larger_than_their_limit(tmp_path, read, error, name, limit):
    path = tmp_path / name
    with open(path, "wb") as f:
        f.truncate(limit + 1)  # sparse: nothing written
    with pytest.raises(error, match=rf"^path: {path} is larger than {limit:,} bytes"):
        read(path)


def test_the_trace_limit_takes_every_upload_the_app_takes():
    from model_viz.scenarios.engine_trace import MAX_UPLOAD_BYTES

    assert MAX_TRACE_BYTES >= MAX_UPLOAD_BYTES


# ---- config.json, read_regular -----------------------------------------------------------------------------
def test_a_config_json_larger_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b" " * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match=rf"^path: {path} is larger than {MAX_CONFIG_BYTES:,} bytes"):
        ModelConfig.from_json(path)


@pytest.mark.parametrize("given", ["x" * 5000, "x" * 300, "bad\0name", "missing", "empty"],
                         ids=["over-path-max", "over-name-max", "nul", "missing", "no-config"])
@pytest.mark.parametrize("arg", ["model", "draft_model"])
def test_a_model_path_that_is_no_checkpoint_is_refused_naming_its_argument(tmp_path, given, arg):
    """A name over 255 bytes made ``is_dir`` raise an untyped ``OSError``, and a ``draft_model`` that was
    no checkpoint was refused as ``path``: each is a ``ConfigError`` naming the argument, before any read."""
    from kda_ref import LLM

    (tmp_path / "empty").mkdir()
    path = str(tmp_path / given) if given in ("missing", "empty") else given
    kw = {"model": path} if arg == "model" else {"speculative": "draft", "draft_model": path}
    with pytest.raises(ConfigError) as e:
        LLM(**kw)
    assert str(e.value).startswith(f"{arg}: "), e.value


def test_read_regular_reads_at_most_the_limit_plus_one_byte(tmp_path, monkeypatch):
    """A file whose ``st_size`` understates it (one growing while it is read) is still cut off."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    real_fstat = os.fstat

    def small_fstat(fd):
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, *st[1:6], 0, *st[7:]))  # st_size = 0

    monkeypatch.setattr(os, "fstat", small_fstat)
    assert files.read_regular(path, 100, ConfigError, "a test file") == b"x" * 100
    with pytest.raises(ConfigError, match="^path: .* is larger than 99 bytes, the most a test file may hold"):
        files.read_regular(path, 99, ConfigError, "a test file")


# ---- the weights ---------------------------------------------------------------------------------------
@posix
@pytest.mark.parametrize("kind", HOSTILE)
def test_a_model_safetensors_that_is_not_a_regular_file_is_refused_at_once(checkpoint, tmp_path, kind):
    folder = _copy(checkpoint, tmp_path / "m")
    shard = _replace_with(folder / "model.safetensors", kind)
    for load_it in (load_pretrained, LLM):
        e = _refusal(load_it, str(folder))
        assert isinstance(e, ConfigError) and str(e).startswith(f"path: {shard}"), e
        assert f"is {WHAT[kind]}, not a regular file" in str(e)


@posix
@pytest.mark.parametrize("kind", HOSTILE)
def test_an_index_or_a_shard_it_names_that_is_not_a_regular_file_is_refused(checkpoint, tmp_path, kind):
    folder = _copy(checkpoint, tmp_path / "m")
    (folder / "model.safetensors").rename(folder / "part-1.safetensors")
    index = folder / INDEX_FILE
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "part-1.safetensors"}}))
    shard = _replace_with(folder / "part-1.safetensors", kind)
    e = _refusal(load_pretrained, folder)
    assert isinstance(e, ConfigError) and str(e).startswith(f"path: {shard}"), e
    _replace_with(index, kind)
    e = _refusal(load_pretrained, folder)
    assert isinstance(e, ConfigError) and str(e).startswith(f"path: {index}"), e


def test_an_index_larger_than_the_limit_is_refused(checkpoint, tmp_path):
    folder = _copy(checkpoint, tmp_path / "m")
    with open(folder / INDEX_FILE, "wb") as f:
        f.truncate(MAX_INDEX_BYTES + 1)  # sparse: no 64 MB written
    with pytest.raises(ConfigError, match=rf"^path: .*{INDEX_FILE} is larger than {MAX_INDEX_BYTES:,} bytes"):
        load_pretrained(folder)


@posix
def test_a_shard_that_becomes_a_fifo_after_its_check_is_refused(checkpoint, tmp_path, monkeypatch):
    """The race in front of safetensors: the shard is a regular file when checked, a FIFO when opened.
    The loader opens it itself (non-blocking) and refuses it; safetensors never opens it by name."""
    folder = _copy(checkpoint, tmp_path / "m")
    regular = tmp_path / "regular.safetensors"
    (folder / "model.safetensors").rename(regular)
    fifo = _replace_with(folder / "model.safetensors", "fifo")
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: real_stat(regular if str(p) == str(fifo) else p, *a, **k))
    e = _refusal(load_pretrained, folder)
    assert isinstance(e, ConfigError) and str(e) == f"path: {fifo} is a FIFO (named pipe), not a regular file"


@posix
@pytest.mark.parametrize("reader", ["safe_open", "load_file"])
def test_a_shard_replaced_by_a_fifo_once_opened_still_loads(checkpoint, tmp_path, monkeypatch, reader):
    """The race the check alone left open: someone puts a FIFO in the shard's place after the loader
    checked it, while safetensors opens it (for its header, or for its data), and puts the file back
    after. safetensors is given the file the loader opened (``/dev/fd/N``), not the name: it reads the
    checked file, never the FIFO (which would block it: no writer ever comes)."""
    import kda_ref.model.weights as w

    folder = _copy(checkpoint, tmp_path / "m")
    shard, aside = folder / "model.safetensors", tmp_path / "aside.safetensors"
    real = getattr(w, reader)

    def open_while_a_fifo_is_there(name, *a, **k):
        shard.rename(aside)
        os.mkfifo(shard)
        try:
            return real(name, *a, **k)
        finally:
            shard.unlink()
            aside.rename(shard)

    monkeypatch.setattr(w, reader, open_while_a_fifo_is_there)

    def loads(folder):
        model = load_pretrained(folder)
        want = HybridModel(ModelConfig.micro(), seed=0).state_dict()
        assert all(torch.equal(v, want[k]) for k, v in model.state_dict().items())

    assert _outcome(loads, folder) is None


@posix
@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("name", [TOKENIZER_CONFIG, TOKENIZER_JSON])
def test_a_tokenizer_file_that_is_not_a_regular_file_refuses_the_checkpoint(checkpoint, tmp_path, kind, name):
    """Like every other file of the folder: a :class:`ConfigError` naming ``path`` from ``load_pretrained``
    (and ``LLM``), not a model without a tokenizer."""
    folder = _copy(checkpoint, tmp_path / "m")
    if name == TOKENIZER_JSON:
        (folder / TOKENIZER_CONFIG).unlink()  # the byte tokenizer's marker would be used without reading it
    path = _replace_with(folder / name, kind)
    for load_it in (load_pretrained, LLM):
        e = _refusal(load_it, str(folder))
        assert isinstance(e, ConfigError) and str(e).startswith(f"path: {path}"), e
        assert f"is {WHAT[kind]}, not a regular file" in str(e)


def test_a_checkpoint_still_loads_through_the_checked_files(checkpoint):
    model = load_pretrained(checkpoint)
    want = HybridModel(ModelConfig.micro(), seed=0).state_dict()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, want[k], rtol=0, atol=0, msg=k)


# ---- null and eos_token_id in config.json ----------------------------------------------------------------
def _config(**changes) -> dict:
    d = ModelConfig.micro().to_dict()
    d.update(changes)
    return d


@pytest.mark.parametrize("key", ["rms_norm_eps", "routed_scaling_factor", "hidden_size", "vocab_size", "kda_layers",
                                 "tie_word_embeddings", "hidden_act", "moe_renormalize"])
def test_a_null_for_a_field_that_cannot_be_none_is_named(key, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_config(**{key: None})))
    with pytest.raises(ConfigError, match=rf"^{key}: must not be null"):
        ModelConfig.from_json(tmp_path)


def test_a_null_is_named_as_the_file_wrote_it():
    d = _config()
    d["num_local_experts"] = None  # transformers' alias of num_experts
    del d["num_experts"]
    with pytest.raises(ConfigError, match="^num_local_experts: must not be null"):
        ModelConfig.from_dict(d)
    d = _config()
    d["linear_attn_config"] = dict(d["linear_attn_config"], num_heads=None)
    with pytest.raises(ConfigError, match=r"^linear_attn_config\.num_heads: must not be null"):
        ModelConfig.from_dict(d)
    with pytest.raises(ConfigError, match="^linear_attn_config: must be a JSON object, got list"):
        ModelConfig.from_dict(_config(linear_attn_config=[1, 2]))


@pytest.mark.parametrize("key", ["bos_token_id", "eos_token_id", "pad_token_id", "q_lora_rank"])
def test_a_null_is_kept_where_the_field_allows_none(key):
    assert getattr(ModelConfig.from_dict(_config(**{key: None})), key) is None


def test_eos_token_id_lists(tmp_path):
    with pytest.raises(ConfigError, match="^eos_token_id: must be an int, a non-empty list of ints, or null"):
        ModelConfig.from_dict(_config(eos_token_id=[]))
    (tmp_path / "config.json").write_text(json.dumps(_config(eos_token_id=[5, 6])))
    cfg = ModelConfig.from_json(tmp_path)
    assert cfg.eos_token_id == [5, 6] and cfg.eos_token_ids == (5, 6)
    assert ModelConfig.from_dict(_config(eos_token_id=None)).eos_token_ids == ()
    with pytest.raises(ConfigError, match="^eos_token_id: must be None or lie in"):
        ModelConfig.from_dict(_config(eos_token_id=[5, 10**6]))


def test_a_greedy_request_stops_at_either_eos_id():
    prompt = [256, 5, 17, 99, 3, 64]

    def run(eos, ignore_eos=False):
        cfg = ModelConfig.from_dict(_config(eos_token_id=eos))
        model = HybridModel(cfg, seed=3).eval()
        params = SamplingParams(max_tokens=8, ignore_eos=ignore_eos)
        return LLM(model, prefix_cache="none").generate([prompt], params)[0]

    free = run(None, ignore_eos=True).token_ids  # what the model emits with no stop id
    other = next(i for i in range(256) if i not in free)  # an id it never emits
    later = next(i for i, t in enumerate(free) if t != free[0])  # the first step emitting another token
    out = run([other, free[0]])  # the second id of the list stops the first step
    assert out.finish_reason == "stop" and len(out.token_ids) == 1, (free, out)
    out = run([free[later], other])  # the first id of the list stops a later step
    assert out.finish_reason == "stop" and len(out.token_ids) == later + 1, (free, out)
    assert run([other, free[0]], ignore_eos=True).finish_reason == "length"


# ---- workloads -----------------------------------------------------------------------------------------
@pytest.fixture
def workload_lines(tmp_path):
    path = tmp_path / "w.jsonl"
    save(make("multi_turn", seed=0, num_requests=4), path)
    return path.read_text().splitlines()


@posix
@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("name", ["w.jsonl", "w.jsonl.gz"])
def test_a_workload_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind, name):
    path = _replace_with(tmp_path / name, kind)
    e = _refusal(load, path)
    assert isinstance(e, WorkloadError) and str(e).startswith(f"path: {path}"), e
    assert f"is {WHAT[kind]}, not a regular file" in str(e)


def test_a_gz_that_expands_to_one_huge_line_is_refused_after_the_limit(tmp_path, workload_lines):
    path = tmp_path / "bomb.jsonl.gz"
    huge = b'{"req_id": 0, "pad": "' + b"x" * MAX_LINE_BYTES + b'"}\n'  # 32 MB: ~33 KB compressed
    path.write_bytes(gzip.compress(workload_lines[0].encode() + b"\n" + huge, compresslevel=1))
    assert path.stat().st_size < 200_000
    t0 = time.perf_counter()
    with pytest.raises(WorkloadError, match=rf"^line 2: longer than {MAX_LINE_BYTES:,} bytes, .*bomb\.jsonl\.gz"):
        load(path)
    assert time.perf_counter() - t0 < 2.0


def test_a_line_at_the_limit_is_read(tmp_path, workload_lines):
    """The limit counts the newline: a line of exactly MAX_LINE_BYTES bytes gets to the JSON checks."""
    path = tmp_path / "w.jsonl"
    pad = MAX_LINE_BYTES - len('{"pad": ""}\n')
    path.write_text("\n".join([workload_lines[0], '{"pad": "' + "x" * pad + '"}']) + "\n")
    with pytest.raises(WorkloadError, match=r"^line 2: missing field\(s\)"):
        load(path)


@pytest.mark.parametrize("value", ["1e13", "1e300", "Infinity", "NaN", "-1", str(MAX_ARRIVAL_S + 1), "1" + "0" * 400])
def test_an_arrival_past_the_bound_is_refused(tmp_path, workload_lines, value):
    head, first, *rest = workload_lines
    req = json.loads(first)
    line = json.dumps(req).replace(f'"arrival_s": {json.dumps(req["arrival_s"])}', f'"arrival_s": {value}')
    assert value in line
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join([head, line, *rest]) + "\n")
    with pytest.raises(WorkloadError, match=r"^line 2: field 'arrival_s' must be a finite number in \[0, 1e\+12\]"):
        load(path)


def test_an_arrival_at_the_bound_loads(tmp_path, workload_lines):
    head, *reqs = (json.loads(x) for x in workload_lines)
    reqs[-1]["arrival_s"] = MAX_ARRIVAL_S
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in [head, *reqs]))
    assert load(path).requests[-1].arrival_s == MAX_ARRIVAL_S


@pytest.mark.parametrize("kw", [dict(rate_per_s=1e-300), dict(think_time_s=1e300), dict(rate_per_s=5e-324)])
def test_a_generator_that_would_arrive_past_the_bound_is_refused(kw):
    with pytest.raises(WorkloadError, match=r"^arrival_s: a request would arrive at .* past the 1e\+12 s"):
        make("multi_turn", seed=0, **kw)


def test_lines_past_the_announced_count_are_refused_when_reached(tmp_path, workload_lines):
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(workload_lines + ["not even json"]) + "\n")
    with pytest.raises(WorkloadError, match=r"^line 6: the header announces 4 requests .* has more"):
        load(path)


# ---- writers ---------------------------------------------------------------------------------------------
def _write_config(path):
    ModelConfig.micro().save(path)


def _write_workload(path):
    save(make("multi_turn", seed=0, num_requests=4), path)


def _write_trace(path):
    TraceRecorder().write_jsonl(path)


# (writer, the error it raises, the file name it writes)
WRITERS = [(_write_config, ConfigError, "config.json"), (_write_workload, WorkloadError, "w.jsonl"),
           (_write_workload, WorkloadError, "w.jsonl.gz"), (_write_trace, OutputError, "t.jsonl")]
WRITER_IDS = [f"{write.__name__}-{name}" for write, _, name in WRITERS]


@posix
@pytest.mark.parametrize("kind", ["fifo", "null", "zero"])
@pytest.mark.parametrize("write,error,name", WRITERS, ids=WRITER_IDS)
def test_a_writer_refuses_a_target_that_is_not_a_regular_file(tmp_path, kind, write, error, name):
    """``open(path, "w")`` on a FIFO blocks until a reader comes; on a device it writes into it. A target
    that exists and is not a regular file is named before it is opened."""
    path = _replace_with(tmp_path / name, kind)
    e = _refusal(write, path)
    what = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    assert isinstance(e, error) and str(e).startswith(f"path: {path}") and f"is {what}, not a regular file" in str(e)


@posix
@pytest.mark.parametrize("reader", [False, True])
@pytest.mark.parametrize("write,error,name", WRITERS, ids=WRITER_IDS)
def test_a_fifo_put_there_after_a_writers_check_still_cannot_block(tmp_path, monkeypatch, write, error, name, reader):
    """The race, writing: the target is a regular file when checked, a FIFO when opened. Without a reader
    the non-blocking open fails at once; with one it opens, and the check of the open descriptor refuses
    it before a byte is written. The workload and trace writers never open the target (they rename a
    finished file over it), so the FIFO is replaced: no block, nothing written into it."""
    regular = tmp_path / "regular"
    regular.write_text("{}")
    fifo = _replace_with(tmp_path / name, "fifo")
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: real_stat(regular if str(p) == str(fifo) else p, *a, **k))
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if reader else None
    try:
        if write in (_write_workload, _write_trace):  # a file beside the target, renamed over it: never opened
            t0 = time.perf_counter()
            write(fifo)
            assert time.perf_counter() - t0 < 1.0 and fifo.is_file()
            assert len(load(fifo).requests) == 4 if write is _write_workload else read_jsonl(fifo)[1] == []
            assert fd is None or os.read(fd, 1) == b""  # the FIFO was replaced, nothing written into it
            return
        e = _refusal(write, fifo)
        assert isinstance(e, error) and str(e).startswith(f"path: {fifo}") and "not a regular file" in str(e), e
        if reader:
            assert str(e) == f"path: {fifo} is a FIFO (named pipe), not a regular file"
            assert os.read(fd, 1) == b""  # nothing was written into it
    finally:
        if fd is not None:
            os.close(fd)


@pytest.mark.parametrize("write,error,name", WRITERS, ids=WRITER_IDS)
def test_a_writer_replaces_a_longer_regular_file_whole(tmp_path, write, error, name):
    """The target is truncated once it is known to be a regular file: nothing of a longer old file stays."""
    path = tmp_path / name
    path.write_bytes(b"x" * 1_000_000)
    write(path)
    assert 0 < path.stat().st_size < 1_000_000 and b"x" * 100 not in path.read_bytes()


@posix
@pytest.mark.parametrize("name", ["config.json", "model.safetensors", TOKENIZER_CONFIG])
def test_save_pretrained_refuses_a_target_file_that_is_not_regular(tmp_path, name):
    folder = tmp_path / "out"
    folder.mkdir()
    path = _replace_with(folder / name, "fifo")
    e = _refusal(save_pretrained, HybridModel(ModelConfig.micro(), seed=0), folder)
    assert isinstance(e, ConfigError) and str(e) == f"path: {path} is a FIFO (named pipe), not a regular file"


@posix
def test_a_cp_prompt_file_that_is_not_regular_stops_torchrun_before_torch_distributed(tmp_path):
    """``python -m kda_ref.context_parallel.torchrun --prompt-file FIFO``: argparse's error (exit 2) naming the
    flag, before a model is built or a process group joined."""
    from kda_ref.context_parallel.torchrun import main

    fifo = _replace_with(tmp_path / "prompt.txt", "fifo")
    e = _refusal(main, ["--prompt-file", str(fifo)])
    assert isinstance(e, SystemExit) and e.code == 2
