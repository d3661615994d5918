"""The Lab (``model_viz.scenarios.lab``): a run is the engine's own answer, its trace reads back into the
pages' views and into a valid Chrome trace, every bound is checked before an engine is built, and the
settings form offers exactly what the engine accepts."""

from __future__ import annotations

import json
import os

import pytest

from kda_ref import LLM, EngineConfig, SamplingParams
from kda_ref.trace import (BatchComposition, CacheEvent, KernelDispatch, RequestArrived, SpecVerify,
                           read_jsonl_string, to_chrome_trace)
from model_viz.figures import lab as lab_fig
from model_viz.scenarios import checkpoint_tree as ct
from model_viz.scenarios import common as cs
from model_viz.scenarios import engine_trace as et
from model_viz.scenarios import lab
from model_viz.ui import lab_form
from model_viz.i18n import in_language

GREEDY = SamplingParams(max_tokens=10, ignore_eos=True)
PROMPTS = ["The KDA state of a hybrid model", "The KDA state of a hybrid model is a matrix", "MLA pages"]
RADIX_SPEC = dict(prefix_cache="radix", checkpoint_policy="sglang", speculative="ngram", num_speculative_tokens=3,
                  max_num_batched_tokens=24)


@pytest.fixture(scope="module")
def model():
    return cs.trained_model()


@pytest.fixture(scope="module")
def radix_run(model):
    return lab.run_lab(model, PROMPTS, GREEDY, mode="sequential", **RADIX_SPEC)


def test_the_lab_drafts_with_the_k3_demos_mtp_layer_from_its_form():
    """The form offers the drafters it can build (not a draft model); the K3 demo drafts with its MTP layer
    and the Lab's answers are plain decoding's, every verify step traced; the Kimi-Linear model, which has
    no MTP layer, gets the engine's error by name."""
    spec = next(s for s in lab.form_fields()["speculative"] if s["key"] == "speculative")
    assert "mtp" in spec["choices"] and "draft" not in spec["choices"]
    values = {s["key"]: s["default"] for g in lab.form_fields().values() for s in g}
    kw = lab.engine_kwargs({**values, "speculative": "mtp", "num_speculative_tokens": 1}, "none", True)
    k3 = lab.load_model("trained_k3")
    run = lab.run_lab(k3, PROMPTS, GREEDY, mode="batch", **kw)
    assert [o.token_ids for o in run.outputs] == [o.token_ids for o in LLM(k3).generate(PROMPTS, GREEDY)]
    assert run.stats["spec_accepted_tokens"] > 0 and any(isinstance(e, SpecVerify) for e in run.trace)
    with pytest.raises((lab.LabError, ValueError), match="MTP layer"):
        lab.run_lab(lab.load_model("trained"), PROMPTS[:1], GREEDY, **kw)


def test_the_lab_returns_what_the_engine_returns(model, radix_run):
    for mode in ("batch", "sequential"):
        run = radix_run if mode == "sequential" else lab.run_lab(model, PROMPTS, GREEDY, mode=mode, **RADIX_SPEC)
        llm = LLM(model, **RADIX_SPEC)
        want = (llm.generate(PROMPTS, GREEDY) if mode == "batch" else
                [llm.generate([p], GREEDY)[0] for p in PROMPTS])
        assert [o.token_ids for o in run.outputs] == [o.token_ids for o in want]
        assert run.stats["steps"] == llm.stats()["steps"] and run.stats == {**llm.stats(), **run.stats}
    assert radix_run.stats["cached_prompt_tokens"] > 0  # the later prompts reused the first one's prefix
    assert radix_run.totals()["reused_prompt_tokens"] == radix_run.stats["cached_prompt_tokens"]
    assert any(isinstance(e, SpecVerify) for e in radix_run.trace)


def test_a_conversation_resends_the_history_and_matches_the_engine(model):
    turns = ["Hello. The state is", " and then", " so"]
    run = lab.run_lab(model, turns, GREEDY, mode="conversation", prefix_cache="radix")
    llm, last = LLM(model, prefix_cache="radix"), None
    for i, text in enumerate(turns):
        ids = text if last is None else [*last.prompt_token_ids, *last.token_ids, *text.encode()]
        last = llm.generate([ids], GREEDY)[0]
        assert run.outputs[i].token_ids == last.token_ids
        assert run.prompts[i] == last.prompt_token_ids
    assert run.prompts[1][:len(run.prompts[0])] == run.prompts[0]  # turn 2 starts with turn 1's prompt
    assert run.stats["cached_prompt_tokens"] > 0
    assert len(run.header["tree_steps"]) == 3  # the radix tree after each turn


def test_two_configurations_agree_and_a_changed_answer_is_caught(model, radix_run):
    plain = lab.run_lab(model, PROMPTS, GREEDY, mode="sequential", max_num_batched_tokens=24)
    cmp = lab.compare(radix_run, plain, GREEDY)
    assert cmp.ok and all(cmp.same_tokens) and cmp.greedy
    differ = {r["name"] for r in cmp.rows if r["differs"]}
    assert {"reused_prompt_tokens", "config:prefix_cache", "config:speculative"} <= differ
    assert "prompt_tokens" not in differ
    broken = lab.LabRun(**{**plain.__dict__, "outputs": [plain.outputs[0].__class__(
        **{**plain.outputs[0].__dict__, "token_ids": [1, 2]}), *plain.outputs[1:]]})
    bad = lab.compare(radix_run, broken, GREEDY)
    assert not bad.ok and bad.same_tokens == [False, True, True]
    sampled = SamplingParams(max_tokens=10, temperature=0.8, seed=1)
    assert lab.compare(radix_run, broken, sampled).ok  # not required when sampling
    rows = in_language("en", lab_fig.totals_rows, [radix_run, plain])
    assert len(rows) == len(lab_fig.TOTAL_LABEL) and {"A", "B"} <= set(rows[0])


def test_the_downloaded_trace_reads_back_into_the_pages_views(radix_run):
    header, events = read_jsonl_string(radix_run.jsonl())
    assert events == radix_run.trace
    views = et.engine_steps(events)
    assert len(views) == radix_run.stats["steps"]
    assert et.layer_layout(header, events) == (radix_run.header["kda_layers"], radix_run.header["mla_layers"])
    steps = ct.read_steps(header, events)
    assert [s.req_id for s in steps] == [o.req_id for o in radix_run.outputs]
    assert steps[-1].num_states() > 0 and steps[1].reused > 0
    assert et.parse_trace(radix_run.jsonl().encode())[1] == events  # the upload boxes' reader


def test_the_chrome_trace_has_a_track_per_request_and_layer_and_steps_in_order(radix_run):
    trace = radix_run.chrome()
    evs = json.loads(json.dumps(trace))["traceEvents"]
    assert all({"name", "ph", "ts", "pid", "tid"} <= set(e) for e in evs)
    assert all(e["dur"] >= 0 for e in evs if e["ph"] == "X")
    timed = [e for e in evs if e["ph"] != "M"]
    assert [e["ts"] for e in timed] == sorted(e["ts"] for e in timed)
    steps = [e for e in timed if e["pid"] == 0 and e["tid"] == 0 and e["ph"] == "X"]
    batches = [e for e in radix_run.trace if isinstance(e, BatchComposition)]
    assert [e["name"] for e in steps] == [f"step {b.step}" for b in batches]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    rids = {e.req_id for e in radix_run.trace if isinstance(e, RequestArrived)}
    assert {names[(1, r)] for r in rids} == {f"request {r}" for r in rids}
    layers = radix_run.header["kda_layers"] + radix_run.header["mla_layers"]
    assert {k[1] for k in names if k[0] == 2} == set(layers)
    kernels = [e for e in timed if e["pid"] == 2 and e["tid"] in radix_run.header["kda_layers"]]
    assert len(kernels) == sum(isinstance(e, KernelDispatch) for e in radix_run.trace)
    n_cache = sum(isinstance(e, CacheEvent) for e in radix_run.trace)
    assert sum(e["name"].startswith("cache ") for e in timed) == n_cache > 0
    # a layer's kernels of one step stay inside that step's span
    for k in kernels:
        step = next(s for s in steps if s["ts"] <= k["ts"] < s["ts"] + s["dur"])
        assert k["ts"] + k["dur"] <= step["ts"] + step["dur"]


def test_the_chrome_trace_refuses_what_is_not_a_trace():
    with pytest.raises(ValueError, match="events"):
        to_chrome_trace([{"kind": "x"}])
    with pytest.raises(ValueError, match="mla_layers"):
        to_chrome_trace([], mla_layers=[-1])
    with pytest.raises(ValueError, match="step_us"):
        to_chrome_trace([], step_us=0)
    assert to_chrome_trace([])["traceEvents"]  # an empty run: the process names only


@pytest.mark.parametrize("prompts, sampling, key", [
    ([], GREEDY, "lab.err.no_prompts"),
    (["ok", "   "], GREEDY, "lab.err.empty"),
    (["x"] * (lab.LIMITS.requests + 1), GREEDY, "lab.err.too_many"),
    (["é" * lab.LIMITS.prompt_bytes], GREEDY, "lab.err.prompt_bytes"),
    ([[1] * (lab.LIMITS.prompt_tokens + 1)], GREEDY, "lab.err.prompt_tokens"),
    (["ok"], SamplingParams(max_tokens=lab.LIMITS.new_tokens + 1), "lab.err.new_tokens"),
    (["ok"], "greedy", "lab.err.sampling"),
])
def test_bad_workloads_are_refused_before_an_engine_is_built(monkeypatch, prompts, sampling, key):
    monkeypatch.setattr(lab, "LLM", lambda *a, **k: pytest.fail("an engine was built"))
    with pytest.raises(lab.LabError) as err:
        lab.run_lab(cs.tiny_model(), prompts, sampling)
    assert err.value.key == key and in_language("zh", err.value.message) != str(err.value)


def test_bad_engine_settings_and_modes_are_messages(model):
    with pytest.raises(lab.LabError, match="max_num_seqs"):
        lab.run_lab(model, ["ok"], GREEDY, max_num_seqs=0)
    with pytest.raises(lab.LabError) as err:
        lab.run_lab(model, ["ok"], GREEDY, mode="parallel")
    assert err.value.key == "lab.err.mode"
    with pytest.raises(lab.LabError) as err:
        lab.run_lab(model, ["ok"], GREEDY, config=EngineConfig(), prefix_cache="radix")
    assert err.value.key == "lab.err.config_and_args"
    with pytest.raises(lab.LabError) as err:  # a conversation that outgrows the bound
        lab.run_lab(model, ["a" * 500, "b" * 500, "c" * 500], SamplingParams(max_tokens=20, ignore_eos=True),
                    mode="conversation")
    assert err.value.key == "lab.err.turn_tokens"
    from kda_ref.model import HybridModel, ModelConfig

    big_vocab = HybridModel(ModelConfig.tiny().__class__(**{**ModelConfig.tiny().__dict__, "vocab_size": 2000}),
                            seed=0, chunk_size=cs.CHUNK)  # no byte tokenizer for it
    with pytest.raises(lab.LabError, match="tokenizer"):
        lab.run_lab(big_vocab, [[1, 2, 3], "more"], GREEDY, mode="conversation")


def test_workload_families_are_bounded_and_run(model):
    prompts = lab.family_prompts("multi_turn", 0, 3, model.config.vocab_size)
    assert len(prompts) == 3 and all(type(t) is int for p in prompts for t in p)
    assert prompts == lab.family_prompts("multi_turn", 0, 3, model.config.vocab_size)  # seeded
    with pytest.raises(lab.LabError, match="families"):
        lab.family_prompts("chat", 0, 3, 256)
    with pytest.raises(lab.LabError):
        lab.family_prompts("multi_turn", 0, lab.LIMITS.requests + 1, 256)
    with pytest.raises(lab.LabError) as err:  # a large-scale prompt is longer than the Lab's bound
        lab.family_prompts("long_document_qa", 0, 1, model.config.vocab_size, scale="large")
    assert err.value.key == "lab.err.prompt_tokens"
    with pytest.raises(lab.LabError, match="scale"):
        lab.family_prompts("multi_turn", 0, 1, 256, scale="huge")
    run = lab.run_lab(model, prompts[:2], SamplingParams(max_tokens=4, ignore_eos=True), mode="sequential",
                      prefix_cache="block")
    assert len(run.outputs) == 2 and run.header["engine"]["prefix_cache"] == "block"


def test_checkpoint_folders_only_from_allowed_folders(tmp_path):
    allowed, other = tmp_path / "models", tmp_path / "elsewhere"
    (allowed / "m").mkdir(parents=True)
    other.mkdir()
    env = {lab.MODEL_DIRS_ENV: str(allowed)}
    for path, environ, key in [(allowed / "m", {}, "lab.err.no_model_dirs"),
                               (other, env, "lab.err.not_allowed"),
                               (allowed / "m" / ".." / ".." / "elsewhere", env, "lab.err.not_allowed"),
                               (allowed / "m", env, "lab.err.unreadable")]:
        with pytest.raises(lab.LabError) as err:
            lab.check_model_folder(str(path), environ)
        assert err.value.key == key
    (allowed / "m" / "config.json").write_text("{not json")
    assert lab.check_model_folder(str(allowed / "m"), env) == (allowed / "m").resolve()
    os.environ[lab.MODEL_DIRS_ENV] = str(allowed)
    try:
        with pytest.raises(lab.LabError) as err:
            lab.load_model("folder", str(allowed / "m"))
        assert err.value.key == "lab.err.load"
    finally:
        del os.environ[lab.MODEL_DIRS_ENV]


def test_the_form_offers_exactly_what_the_engine_accepts():
    groups = lab.form_fields()
    offered = [s for g in groups.values() for s in g]
    assert {s["key"] for s in offered} <= set(lab_form.FIELD_HELP) | {s["key"] for s in offered if s["doc"]}
    assert all(s["name"] not in lab.NOT_OFFERED for s in offered)
    for s in offered:
        assert s["doc"] and ("choices" in s or s.get("kind") in ("bool", "float") or "min" in s), s  # bounded
    for cache in lab.PREFIX_CACHES:
        for spec in (False, True):
            values = {s["key"]: s["default"] for s in offered}
            kw = lab.engine_kwargs(values, cache, spec)
            EngineConfig.from_kwargs(**kw).check_model(cs.CHUNK, "torch")  # the defaults are a valid engine
            assert ("checkpoint_policy" in kw) == (cache == "radix") and ("eviction" in kw) == (cache == "block")
            assert ("num_speculative_tokens" in kw) == spec


@pytest.mark.parametrize("group", [g for g, _ in lab.FORM_GROUPS])
def test_every_documented_choice_and_bound_is_the_engines(group):
    """Each choice the form offers is accepted, and one step outside a documented int bound is refused."""
    cache = group if group in ("radix", "block") else "none"
    base = {s["key"]: s["default"] for g in lab.form_fields().values() for s in g}
    for s in lab.form_fields()[group]:
        for choice in s.get("choices", ()):
            kw = lab.engine_kwargs({**base, s["key"]: choice, **_needs(s["key"], choice)}, cache,
                                   group == "speculative")
            EngineConfig.from_kwargs(**kw).check_model(cs.CHUNK, "torch")
        if s.get("kind", "int") == "int" and "choices" not in s and not s.get("optional"):
            low = s.get("min", 1) - 1
            kw = lab.engine_kwargs({**base, s["key"]: low}, cache, group == "speculative")
            with pytest.raises(ValueError, match=s["key"]):
                EngineConfig.from_kwargs(**kw).check_model(cs.CHUNK, "torch")


def _needs(key: str, choice) -> dict:
    """The companion settings a choice needs to be valid on its own."""
    if (key, choice) == ("checkpoint_policy", "every_n"):
        return {"checkpoint_interval": cs.CHUNK}
    if (key, choice) == ("replay_granularity", "unit"):
        return {"partial_hits": True}
    if (key, choice) == ("mamba_cache_mode", "all"):
        return {"block_size": 64}
    return {}


def test_split_prompts_on_separator_lines():
    assert lab.split_prompts("a\nb\n---\nc\n ---\n\n---\n") == ["a\nb", "c"]
    assert lab.split_prompts("  \n") == []


def test_two_kernels_of_one_layer_in_one_step_share_its_slot_without_overlap(model):
    """mixed_batch="split" runs a mixed step's decodes and prefill chunks as two kernels per KDA layer:
    on a layer's track they sit side by side inside the step, never on top of each other."""
    run = lab.run_lab(model, ["a short one", "a much longer prompt that is still prefilling"], GREEDY,
                      mode="batch", mixed_batch="split", max_num_batched_tokens=8)
    two = {(e.step, e.layer) for e in run.trace if isinstance(e, KernelDispatch)
           if sum(1 for d in run.trace if isinstance(d, KernelDispatch) and (d.step, d.layer) == (e.step, e.layer)) == 2}
    assert two  # the scenario has split steps
    spans = sorted((e["tid"], e["ts"], e["ts"] + e["dur"]) for e in run.chrome()["traceEvents"]
                   if e["pid"] == 2 and e["ph"] == "X")
    for (tid_a, _, end_a), (tid_b, start_b, _) in zip(spans, spans[1:]):
        assert tid_a != tid_b or end_a <= start_b  # one layer's spans never overlap
    by_time = sorted((start, end) for _, start, end in spans)
    for (_, end_a), (start_b, _) in zip(by_time, by_time[1:]):
        assert end_a <= start_b  # the layers run one after the other: no two kernels at the same time


def test_a_block_cache_run_records_the_table_after_each_turn(model):
    long = "The KDA state of a hybrid model is a fixed-size matrix per head, " * 2
    run = lab.run_lab(model, [long, long + "again"], GREEDY, mode="sequential", prefix_cache="block",
                      block_size=32, hash_unit=16)
    header, _ = read_jsonl_string(run.jsonl())
    steps = lab_fig.block_steps(header)
    assert [s["req_id"] for s in steps] == [o.req_id for o in run.outputs] and "tree_steps" not in header
    ends = [u["end"] for u in steps[-1]["units"]]
    assert ends == list(range(16, 16 * len(ends) + 1, 16)) and len(ends) == len(run.prompts[1] + run.outputs[1].token_ids) // 16
    assert all(u["kv"] for u in steps[0]["units"])  # the first request's full units stay cached
    assert run.stats["cached_prompt_tokens"] > 0  # the second reused the first's blocks
    kept = [u["end"] for s in steps for u in s["units"] if u["state"] is not None]
    assert kept and all(e % 32 == 0 for e in kept)  # states only at block boundaries (partial_hits off)
    fig = in_language("zh", lab_fig.block_figure, steps[-1])
    assert len(fig.data) == 2 and "块" in fig.layout.title.text
    assert lab_fig.block_steps({"block_steps": [{"units": "x"}]}) == []  # malformed: not drawn


def test_a_request_over_the_budget_is_refused_with_its_numbers(model):
    """A budget that holds the engine but not this request: the Lab's message is the engine's, naming the
    request's peak by part against the budget, and nothing runs."""
    from kda_ref.memory import unit_sizes

    sizes = unit_sizes(model.config, 1)
    budget = 2 * sizes.state_bytes + 40 * sizes.kv_page_bytes  # one state, its pinned checkpoint, 40 tokens
    with pytest.raises(lab.LabError) as err:
        lab.run_lab(model, ["x" * 60], GREEDY, prefix_cache="radix", memory_budget_bytes=budget)
    msg = in_language("en", err.value.message)
    assert err.value.key == "lab.err.engine" and "at its peak" in msg and f"({budget} B)" in msg
    assert "1 checkpoint its path's lock pins" in msg and "MLA KV pages of 1 token" in msg
    with pytest.raises(lab.LabError) as err:  # SGLang's tracking cannot run at all in that budget
        lab.run_lab(model, ["x"], GREEDY, prefix_cache="radix", checkpoint_policy="sglang", memory_budget_bytes=budget)
    assert "cannot hold even one request" in in_language("en", err.value.message)


def test_an_errored_request_shows_its_numbers_in_the_lab_and_the_pool_events():
    """The engine's refusal and stall events, as a trace carries them, become the Lab's warning lines and
    the pool view's step events, with the numbers."""
    from kda_ref.trace import AdmissionRefused, EngineStall

    refused = AdmissionRefused(step=3, req_id=2, need_bytes=300_000, budget_bytes=200_000, free_bytes=150_000,
                               parts={"active KDA state slot": 62_976, "MLA KV pages of 1 token": 237_024},
                               message="memory_budget_bytes: request 2 cannot run")
    stall = EngineStall(step=9, req_ids=[4, 5], idle_steps=4112, waiting=1, running=1, used_bytes={"mla_kv": 10},
                        message="engine stalled: no request advanced")
    lines = lab_fig.refusals([refused, stall])
    assert lines[0].startswith("step 3, r2: 300,000 B at its peak (active KDA state slot 62,976 B, MLA KV pages of")
    assert "> budget 200,000 B" in lines[0] and lines[1].startswith("step 9, r4, r5: engine stalled")
    from model_viz.figures import pool_map as pm_fig

    view = et.StepView(step=3, batch=None, refused=[refused, stall])
    ev = in_language("en", pm_fig.step_events, view)
    assert ev == ["r2 **refused**: it needs 293.0 KiB at its peak; the budget is 195.3 KiB (146.5 KiB free with "
                  "nothing else running): finished with an error",
                  "r4, r5 **stalled**: no progress for 4112 steps, finished with an error"]
    assert all("KiB" in x or "4112" in x for x in in_language("zh", pm_fig.step_events, view))


def test_a_new_documented_setting_appears_in_the_form_with_nothing_else_edited():
    """The form is derived from the configuration's parts: every documented field is offered unless named in
    NOT_OFFERED with its reason, so a field added to a part appears (its English documentation as help)."""
    from kda_ref.engine.config import SchedulerConfig, field_specs

    offered = {s["name"] for s in lab.form_fields()["scheduler"]}
    assert offered == {s["name"] for s in field_specs(SchedulerConfig)} - set(lab.NOT_OFFERED)
    kinds = [g for g, _ in lab.FORM_GROUPS if g in lab.PREFIX_CACHES]
    assert kinds == ["radix", "block"]  # one group per prefix cache with options, named after its kind


def test_a_cache_line_leaves_out_unset_fields():
    """The Live and Lab pages' cache lines: the engine's fields as they are, an unset one (None) left out."""
    ev = CacheEvent(step=3, op="match", req_id=8, position=29, node_id=None,
                    detail={"kv_len": 29, "state_len": 0, "branching_len": None}, concepts=("sglang.radix.match",))
    (line,) = in_language("en", lab_fig.cache_lines, [ev], 3)
    assert "kv_len=29" in line and "state_len=0" in line and "branching_len" not in line and "None" not in line
