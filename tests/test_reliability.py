"""A failing request never breaks the engine or another request; untrusted files never run code.

Each test reproduces one way a hostile or careless user broke the engine, the loaders, the readers,
the app's figures or the CLI, and checks the fixed behaviour: a typed error naming the argument (or
the request finishing with ``finish_reason == "error"``), every other request answering exactly as
it would alone, and every pool empty afterwards.
"""

from __future__ import annotations

import gzip
import io
import json
import pathlib
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.engine import RequestError
from kda_ref.model import CheckpointError, ConfigError, HybridModel, ModelSizeError, load_pretrained, save_pretrained
from kda_ref.trace import TraceFormatError, read_jsonl_string
from kda_ref.workloads import WorkloadError, load, make, save

CFG = ModelConfig.micro()
ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()


_SOLO: dict = {}


def solo(model, prompt, n):
    """Greedy tokens of ``prompt`` run alone through a fresh engine."""
    key = (id(model), tuple(prompt), n)
    if key not in _SOLO:
        _SOLO[key] = LLM(model).generate([prompt], SamplingParams(max_tokens=n, ignore_eos=True))[0].token_ids
    return _SOLO[key]


def drained(llm) -> bool:
    llm.flush_cache()
    return llm.pool.is_empty() and not llm.scheduler.running and not llm.scheduler.waiting


def poison_forward(llm, poisoned: set[int]):
    """A "kernel" that fails whenever a request of ``poisoned`` (request ids) is in the forward's batch."""
    real = llm.model.forward_batch

    def forward_batch(input_ids, batch, *a, **k):
        slots = set(batch.state_indices.tolist())
        if any(r.req_id in poisoned and r.slot in slots for r in llm.scheduler.running):
            raise RuntimeError("injected kernel failure")
        return real(input_ids, batch, *a, **k)
    llm.model.forward_batch = forward_batch


# ---- 1. one request's failure stays with that request ------------------------------------------------------
def test_an_underflowing_temperature_is_refused_up_front():
    with pytest.raises(RequestError, match="^temperature: 1e-40 is below 1e-05"):
        SamplingParams(temperature=1e-40)


@pytest.mark.parametrize("prefix_cache", ["none", "radix", "block"])
def test_a_sampling_failure_finishes_that_request_and_no_other(model, prefix_cache):
    bad = SamplingParams(max_tokens=4, temperature=0.5)
    object.__setattr__(bad, "temperature", 1e-40)  # past validation, as a bug in a caller could
    good = SamplingParams(max_tokens=6, ignore_eos=True)
    p1, p2, p3 = list(range(1, 80)), list(range(5, 40)), list(range(7, 70))
    llm = LLM(model, prefix_cache=prefix_cache)
    outs = llm.generate([p1, p2, p3], [good, bad, good])
    assert outs[1].finish_reason == "error" and "sampling failed" in outs[1].error and not outs[1].token_ids
    assert outs[0].token_ids == solo(model, p1, 6) and outs[2].token_ids == solo(model, p3, 6)
    assert outs[0].error is None and drained(llm)


def test_nan_weights_fail_every_request_cleanly(model):
    broken = HybridModel(CFG, seed=0).eval()
    with torch.no_grad():
        broken.lm_head.weight[0, 0] = float("nan")
    llm = LLM(broken)
    outs = llm.generate([[1, 2, 3], [4, 5, 6, 7]], SamplingParams(max_tokens=3, temperature=0.7))
    assert [o.finish_reason for o in outs] == ["error", "error"]
    assert all("not finite" in o.error for o in outs) and drained(llm)


def test_batched_greedy_sampling_matches_per_row_sampling_and_names_a_bad_row():
    """The runner samples a greedy decode batch with one argmax (``GreedyRows``): every row's token is
    what per-row ``sample`` gives (ties included: the first maximum), and only a row with a NaN / inf
    logit raises, with the same error."""
    from kda_ref.engine.sampling import GreedyRows, SamplingError, sample

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 40, generator=g)
    logits[1, [5, 9]] = logits[1].max() + 1.0  # a tie: the first index wins in both
    logits[4, 7] = float("nan")
    logits[5, 2] = float("inf")
    rows = GreedyRows(logits)
    for n in (0, 1, 2, 3):
        assert rows.token(n) == sample(logits[n], 0.0, 0, None)
    assert rows.token(1) == 5
    for n in (4, 5):
        with pytest.raises(SamplingError, match="1 of 40 logits are not finite"):
            rows.token(n)


@pytest.mark.parametrize("prefix_cache", ["none", "radix", "block"])
def test_a_failing_forward_is_isolated_and_the_others_recomputed(model, prefix_cache):
    llm = LLM(model, prefix_cache=prefix_cache, max_num_batched_tokens=64)
    poison_forward(llm, {1})
    p_good1, p_bad, p_good2 = list(range(1, 50)), [3, 4, 5, 6], list(range(10, 90))
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    outs = llm.generate([p_good1, p_bad, p_good2], params)
    assert outs[1].finish_reason == "error" and "injected kernel failure" in outs[1].error
    assert outs[0].token_ids == solo(model, p_good1, 5) and outs[2].token_ids == solo(model, p_good2, 5)
    assert llm.stats()["forward_failures"] >= 2  # the mixed step, then the culprit alone
    assert drained(llm)
    # the engine goes on serving
    assert llm.generate([p_good2], params)[0].token_ids == solo(model, p_good2, 5)


def test_generate_is_atomic(model):
    llm = LLM(model)
    with pytest.raises(RequestError, match=r"^prompts\[2\]: prompt: token id 9999 is outside"):
        llm.generate([[1, 2], [3, 4], [5, 9999]])
    assert not llm.scheduler.waiting and llm.pool.is_empty()


# ---- 2-4. untrusted files ----------------------------------------------------------------------------------
class _Exploit:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_training_checkpoint_never_runs(tmp_path):
    from kda_ref.train.__main__ import main as train_main

    out, marker = tmp_path / "out", tmp_path / "pwned"
    out.mkdir()
    torch.save({"model": _Exploit(marker)}, out / "checkpoint.pt")
    rc = train_main(["--out", str(out), "--steps", "2", "--no-progress"])
    assert rc == 2 and not marker.exists()


def test_the_training_checkpoint_round_trips_with_weights_only(tmp_path):
    from kda_ref.train import Recipe
    from kda_ref.train.loop import load_checkpoint, train

    recipe = Recipe().replace(steps=2)
    train(recipe, checkpoint=tmp_path / "c.pt", stop_after=1, progress=False)
    st_ = load_checkpoint(tmp_path / "c.pt")
    assert st_["step"] == 1 and st_["rng"].dtype == torch.uint8


def _checkpoint(tmp_path, model) -> pathlib.Path:
    folder = tmp_path / "ckpt"
    save_pretrained(model, folder)
    return folder


@pytest.mark.parametrize("hidden,error,match", [
    (100_000, CheckpointError, r"\.weight: shape .* does not match the config"),  # fits in memory: the shapes fail
    (10**9, ModelSizeError, r"^hidden_size: 1000000000 makes the model need .* GiB"),  # refused from the numbers
])
def test_an_absurd_config_fails_fast_without_allocating(tmp_path, model, monkeypatch, hidden, error, match):
    monkeypatch.setenv("KDA_REF_MEMORY_LIMIT_BYTES", str(16 << 30))  # the same verdict on any machine
    folder = _checkpoint(tmp_path, model)
    load_pretrained(folder)  # warm: torch imports its meta-device decompositions on their first use (~1 s)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["hidden_size"] = hidden
    (folder / "config.json").write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    with pytest.raises(error, match=match):
        load_pretrained(folder)
    assert time.perf_counter() - t0 < 1.0


def test_a_consistent_but_huge_checkpoint_is_refused_before_loading(tmp_path):
    from safetensors.torch import save_file

    from kda_ref.utils import machine_memory_bytes

    big = ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=512)
    folder = tmp_path / "huge"
    folder.mkdir()
    big.save(folder / "config.json")
    have = machine_memory_bytes()
    rows = have // (4 * 256) + 1  # an embedding alone larger than the machine, as float32
    cfg = json.loads((folder / "config.json").read_text())
    cfg["vocab_size"] = rows
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file({"x": torch.zeros(1)}, str(folder / "model.safetensors"))
    with pytest.raises(ModelSizeError, match="^vocab_size: .* more than the"):  # the config's numbers, first
        load_pretrained(folder)


def test_a_tensor_in_two_shards_names_both_files(tmp_path, model):
    from safetensors.torch import save_file

    folder = _checkpoint(tmp_path, model)
    save_file({"model.embed_tokens.weight": torch.zeros(CFG.vocab_size, CFG.hidden_size)},
              str(folder / "zz-extra.safetensors"))
    with pytest.raises(CheckpointError, match=r"model.embed_tokens.weight: defined in two shards, model.safetensors "
                                              r"and zz-extra.safetensors"):
        load_pretrained(folder)


def test_a_truncated_shard_is_a_checkpoint_error(tmp_path, model):
    folder = _checkpoint(tmp_path, model)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_pretrained(folder)


# ---- 6. uploads cannot stall the app ----------------------------------------------------------------------
@pytest.mark.slow  # the page-level test below draws the same bounded timeline in the default run
def test_a_large_trace_upload_draws_a_bounded_timeline():
    from model_viz.figures import hybrid_chain as cf
    from model_viz.scenarios import engine_trace as et

    data = et.run_scenario([12] * 40, token_budget=4, max_tokens=8)
    header, events = et.parse_trace(data)
    views = et.engine_steps(events)
    assert len(views) > 100
    fig = cf.timeline_figure(views, len(views) // 2)
    bars = [d for d in fig.data if d.type == "bar"]
    assert len(bars) <= 2 * (cf.MAX_SERIES + 1)  # 40 requests -> 12 own series + "28 other requests"
    assert any("28 other requests" in d.name for d in bars)
    total = sum(sum(d.y) for d in bars)
    assert total == sum(v.batch.num_tokens for v in views)  # nothing dropped by the grouping


def test_a_tree_with_one_huge_node_lays_out_in_linear_time():
    from model_viz.figures import checkpoint_tree as ct_fig
    from model_viz.scenarios.checkpoint_tree import TreeStep

    L = 200_000
    root_child = {"parent": "root", "key": list(range(L)), "start": 0, "end": L, "state": 3, "kv_lock": 0}
    branch = {"parent": "a", "key": [1, 2, 3], "start": L, "end": L + 3, "state": 4, "kv_lock": 0}
    steps = [TreeStep(0, "r0", list(range(L)) + [9], [1], [1], 0, {"a": root_child}, []),
             TreeStep(1, "r1", list(range(L)) + [1, 2, 3], [1], [2], L, {"a": root_child, "b": branch}, [])]
    t0 = time.perf_counter()
    lay = ct_fig.layout(steps)
    assert time.perf_counter() - t0 < 5.0  # the former prefix search hashed ~L^2 / 2 tokens here
    assert lay.x_max == L + 3 and lay.pos["b"][0] == L + 3


# ---- 7. readers raise their own errors --------------------------------------------------------------------
HEADER = '{"schema": "kda-viz-trace", "version": 1}\n'


@pytest.mark.parametrize("body,match", [
    ('{"kind": "request_arrived", "step": 0, "req_id": ' + "9" * 5000 + ', "prompt_len": 1, "max_tokens": 1}',
     "bad JSON"),
    ("[" * 100_000 + "]" * 100_000, "bad JSON"),
])
def test_hostile_trace_lines_are_trace_format_errors(body, match):
    with pytest.raises(TraceFormatError, match=match):
        read_jsonl_string(HEADER + body + "\n")


def test_a_hostile_trace_header_is_a_trace_format_error():
    with pytest.raises(TraceFormatError, match="missing header"):
        read_jsonl_string("[" * 100_000 + "\n")


def test_hostile_trace_bytes_are_trace_format_errors():
    from kda_ref.trace import read_jsonl

    with pytest.raises(TraceFormatError, match="not UTF-8"):
        read_jsonl(io.BytesIO(b"\xff\xfe\x00garbage"))


@pytest.fixture
def workload_file(tmp_path):
    path = tmp_path / "w.jsonl"
    save(make("multi_turn", seed=1, vocab_size=300, num_requests=6), path)
    return path


def test_a_workload_cut_at_a_line_boundary_is_an_error(workload_file):
    lines = workload_file.read_text().splitlines(keepends=True)
    workload_file.write_text("".join(lines[:-2]))
    with pytest.raises(WorkloadError, match="announces 6 requests .* has 4"):
        load(workload_file)


@pytest.mark.parametrize("content,match", [
    (b"\xff\xfe not utf-8 at all", "cannot be read as a workload"),
    (b"this is not gzip", "cannot be read as a workload"),
    (gzip.compress(b'{"schema": "kda_ref.workloads"', mtime=0)[:-6], "cannot be read as a workload"),
])
def test_hostile_workload_files_are_workload_errors(tmp_path, content, match):
    path = tmp_path / ("w.jsonl.gz" if not content.startswith(b"\xff") else "w.jsonl")
    path.write_bytes(content)
    with pytest.raises(WorkloadError, match=match):
        load(path)


@pytest.mark.parametrize("line", ['{"a": ' + "1" * 5000 + "}", "[" * 100_000])
def test_hostile_workload_lines_are_workload_errors(tmp_path, line):
    path = tmp_path / "w.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(WorkloadError, match="line 1"):
        load(path)


def test_a_missing_workload_file_is_a_workload_error(tmp_path):
    with pytest.raises(WorkloadError, match="does not exist"):
        load(tmp_path / "nope.jsonl")


# ---- 8. validation at construction, naming the argument ----------------------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(chunk_size=7), "^chunk_size: must be a positive power of two"),
    (dict(chunk_size=0), r"^chunk_size: must be an int in \[1, 1024\]"),
    (dict(chunk_size=-1), r"^chunk_size: must be an int in \[1, 1024\]"),
    (dict(chunk_size=2**20), r"^chunk_size: must be an int in \[1, 1024\]"),
    (dict(max_model_len=0), "^max_model_len: must be an int >= 2"),
    (dict(max_model_len=1), "^max_model_len: must be an int >= 2"),
    (dict(max_model_len=-5), "^max_model_len: must be an int >= 2"),
    (dict(max_model_len=100.0), "^max_model_len: must be an int >= 2"),
    (dict(max_model_len=8193), "^max_model_len: 8193 is past the model's max_position_embeddings=8192"),
    (dict(seed=2**64), "^seed: must be an int in the 64-bit range"),
    (dict(seed=True), "^seed: must be an int"),
    (dict(max_num_seqs=True), r"^max_num_seqs: must be an int in \[1, 4096\]"),
    (dict(memory_budget_bytes=1 << 60), "^memory_budget_bytes: .* more than this machine's memory"),
    (dict(backend="triton", chunk_size=8), "^chunk_size: the Triton chunk kernel takes"),
])
def test_bad_engine_arguments(kw, match):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        LLM(CFG, **kw)
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("kw,match", [
    (dict(max_tokens=True), "^max_tokens"),
    (dict(max_tokens=3.0), "^max_tokens"),
    (dict(seed=2**70), "^seed: must be None or an int in the 64-bit range"),
    (dict(stop_token_ids="12"), "^stop_token_ids: must be a list or tuple"),
    (dict(stop_token_ids=[1, True]), "^stop_token_ids: token ids must be ints"),
    (dict(temperature=float("nan")), "^temperature: must be a finite number"),
    (dict(temperature=True), "^temperature"),
    (dict(ignore_eos=1), "^ignore_eos: must be True or False"),
])
def test_bad_sampling_parameters(kw, match):
    with pytest.raises(RequestError, match=match):
        SamplingParams(**kw)


@pytest.mark.parametrize("prompt,match", [
    (None, "^prompt: must be a str or a list of int token ids, got NoneType"),
    (1.5, "^prompt: must be a str or a list of int token ids, got float"),
    ((i for i in range(3)), "^prompt: must be a str or a list of int token ids, got generator"),
    ([1, True, 3], "^prompt: token ids must be ints, got bool True"),
    ([1, 2.0], "^prompt: token ids must be ints, got float"),
    ("bad \ud800 surrogate", "^prompt: the text cannot be encoded"),
    (torch.tensor([1.0, 2.0]), "^prompt: a tensor prompt must be 1-D integer token ids"),
])
def test_bad_prompts_are_request_errors(model, prompt, match):
    llm = LLM(model)
    with pytest.raises(RequestError, match=match):
        llm.add_request(prompt)
    assert not llm.scheduler.waiting


@pytest.mark.parametrize("field,value,match", [
    ("hidden_size", "256", "^hidden_size: must be an int, got str"),
    ("rms_norm_eps", 0, "^rms_norm_eps: must be a finite number > 0"),
    ("rms_norm_eps", -1e-6, "^rms_norm_eps: must be a finite number > 0"),
    ("tie_word_embeddings", "yes", "^tie_word_embeddings: must be true or false"),
    ("kda_layers", [1, "2", 3], "^kda_layers: must be a list of ints"),
])
def test_config_fields_of_the_wrong_type(field, value, match):
    d = CFG.to_dict()
    if field == "kda_layers":
        d["linear_attn_config"]["kda_layers"] = value
    else:
        d[field] = value
    with pytest.raises(ConfigError, match=match):
        ModelConfig.from_dict(d)


@pytest.mark.parametrize("text", ['{"a": ' + "1" * 5000 + "}", "[" * 100_000, "\xff"])
def test_hostile_config_files_are_config_errors(tmp_path, text):
    (tmp_path / "config.json").write_bytes(text.encode("latin-1") if text == "\xff" else text.encode())
    with pytest.raises(ConfigError, match="not a valid JSON config"):
        ModelConfig.from_json(tmp_path)


# ---- 9. the CLI ends in "error:" lines and exit code 2 ------------------------------------------------------
@pytest.mark.parametrize("args,match", [
    (["--threads", "0"], "--threads: must be >= 1"),
    (["--memory-budget-mb", str(1 << 40)], "--memory-budget-mb: "),
    (["--temperature", "1e-40"], "temperature"),
    (["--trace", "/proc/nope/run.jsonl"], "--trace"),
])
def test_cli_errors_are_clean(args, match, capsys):
    from kda_ref.cli import main

    t0 = time.perf_counter()
    rc = main(["generate", "hi", "--model", "random-tiny", "--max-tokens", "2", *args])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and match in err and "Traceback" not in err
    assert time.perf_counter() - t0 < 5.0  # checked before any generation


def test_cli_truncated_checkpoint_is_clean(tmp_path, model, capsys):
    from kda_ref.cli import main

    folder = _checkpoint(tmp_path, model)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:100])
    rc = main(["generate", "hi", "--model", str(folder)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: --model: model.safetensors: not a readable safetensors file")


# ---- a property: random streams with invalid requests, aborts and injected failures -------------------------
ACTIONS = st.lists(st.one_of(
    # prompt length, max_tokens, and the failure injected into this request (none, its kernel, its sampling)
    st.tuples(st.just("add"), st.integers(2, 40), st.integers(1, 6), st.sampled_from(["ok", "kernel", "sampling"])),
    st.tuples(st.just("bad"), st.sampled_from(["empty", "vocab", "type"]), st.just(0), st.just("ok")),
    st.tuples(st.just("abort"), st.integers(0, 30), st.just(0), st.just("ok")),
    st.tuples(st.just("step"), st.integers(1, 4), st.just(0), st.just("ok")),
), min_size=3, max_size=18)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(actions=ACTIONS, prefix_cache=st.sampled_from(["none", "radix", "block"]), seed=st.integers(0, 1000))
def test_random_streams_with_failures(model, actions, prefix_cache, seed):
    llm = LLM(model, prefix_cache=prefix_cache, max_num_batched_tokens=48, memory_budget_bytes=3 << 20)
    kernel_poisoned: set[int] = set()
    poison_forward(llm, kernel_poisoned)
    g = torch.Generator().manual_seed(seed)
    prompts, done, aborted = {}, {}, set()
    for kind, a, b, failure in actions:
        if kind == "add":
            p = torch.randint(0, 256, (a,), generator=g).tolist()
            params = SamplingParams(max_tokens=b, ignore_eos=True)
            if failure == "sampling":
                params = SamplingParams(max_tokens=b, temperature=0.5)
                object.__setattr__(params, "temperature", 1e-40)
            rid = llm.add_request(p, params)
            if failure == "kernel":
                kernel_poisoned.add(rid)
            prompts[rid] = (p, b, failure)
        elif kind == "bad":
            bad = {"empty": [], "vocab": [CFG.vocab_size + 1], "type": [1.5]}[a]
            with pytest.raises(RequestError):
                llm.add_request(bad)
        elif kind == "abort":
            if prompts and llm.abort(sorted(prompts)[a % len(prompts)]):
                aborted.add(sorted(prompts)[a % len(prompts)])
        else:
            for _ in range(a):
                done.update({o.req_id: o for o in llm.step()})
    while llm.has_unfinished():
        done.update({o.req_id: o for o in llm.step()})
    for rid, (p, n, failure) in prompts.items():
        if rid in aborted:
            continue
        out = done[rid]
        if failure != "ok":
            assert out.finish_reason == "error", (rid, out.finish_reason)
        else:
            assert out.finish_reason == "length" and out.token_ids == solo(model, p, n), rid
    assert drained(llm)


def test_the_chain_page_with_a_large_upload_parses_once_and_draws_a_bounded_timeline():
    from apptest_util import new_app
    from model_viz.figures import hybrid_chain as cf
    from model_viz.scenarios import engine_trace as et

    data = et.run_scenario([12] * (cf.MAX_SERIES + 4), token_budget=64, max_tokens=4).encode()  # more requests than series
    at = new_app(str(ROOT / "app.py"), 120).run()
    at.switch_page("app_pages/hybrid_chain.py").run()
    at.file_uploader(key="hybrid_chain_upload").upload("big.jsonl", data, "application/json").run()
    assert not at.exception and not at.error
    timeline = json.loads(at.get("plotly_chart")[2].proto.spec)
    assert sum(d["type"] == "bar" for d in timeline["data"]) <= 2 * (cf.MAX_SERIES + 1)
    calls = {"n": 0}
    real = et.parse_trace

    def counting(d):
        calls["n"] += 1
        return real(d)
    et.parse_trace = counting
    try:
        at.button(key="hybrid_chain_next").click().run()  # a new step: the trace is not parsed again
        at.button(key="hybrid_chain_next").click().run()
    finally:
        et.parse_trace = real
    assert not at.exception and calls["n"] == 0


@pytest.mark.parametrize("args,match", [(["--threads", "99999999999"], "--threads: must be in [1, 1024]"),
                                        (["--seed", str(10**23)], "--seed: must be in [")])
def test_train_refuses_an_out_of_range_count_by_its_flag_before_anything(tmp_path, args, match, capsys):
    """They passed the check and ended, after the corpus was read and the output folder made, in an
    ``Overflow when unpacking long`` that named no flag."""
    from kda_ref.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", "--out", str(tmp_path / "run"), "--steps", "1", *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and match in err and not (tmp_path / "run").exists()


def test_a_trace_line_with_a_key_given_twice_is_refused_and_unwritable_text_leaves_no_file(tmp_path):
    """A repeated key was read as its last value (``"step": "oops", ..., "step": 4`` became step 4), and a
    lone surrogate in the metadata was a bare UnicodeEncodeError after the file had been created empty."""
    import io

    from kda_ref.trace import TraceFormatError, TraceRecorder, read_jsonl

    text = ('{"schema": "kda-viz-trace", "version": 1, "num_events": 1}\n'
            '{"kind": "request_finished", "step": "oops", "req_id": 0, "reason": "stop", "output_len": 1, '
            '"concepts": ["engine.continuous_batching"], "step": 4}\n')
    with pytest.raises(TraceFormatError, match="line 2: .*the key 'step' is given twice"):
        read_jsonl(io.StringIO(text))
    header_twice = '{"schema": "kda-viz-trace", "version": 1, "num_events": 5, "num_events": 0}\n'
    with pytest.raises(TraceFormatError, match="line 1: .*the key 'num_events' is given twice"):
        read_jsonl(io.StringIO(header_twice))  # the header too
    with pytest.raises(ValueError, match="^write_jsonl: .*UTF-8 cannot encode"):
        TraceRecorder().write_jsonl(tmp_path / "t.jsonl", metadata={"note": "\ud800"})
    assert not (tmp_path / "t.jsonl").exists()
