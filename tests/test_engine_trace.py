"""The engine's trace: what it records is consistent with what the engine did, and round-trips."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.cli import main as cli_main
from kda_ref.model import HybridModel
from kda_ref.trace import NULL_TRACER, TraceRecorder, read_jsonl

CFG = ModelConfig.tiny()


@pytest.fixture(scope="module")
def traced_run():
    rec = TraceRecorder()
    model = HybridModel(CFG, seed=0).eval()
    state, page = 224256, 5120
    llm = LLM(model, tracer=rec, max_num_batched_tokens=32, memory_budget_bytes=2 * state + 9 * page)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (70, 60, 5)]
    outs = llm.generate(prompts, SamplingParams(max_tokens=40, ignore_eos=True))
    return rec, llm, outs


def test_pages_and_slots_balance(traced_run):
    """Every unit the trace frees it allocated before (and did not free since), every unit it allocates is free
    in it, and at the end nothing is held: a reader replaying alloc / free sees the pool the engine had."""
    rec, llm, _ = traced_run
    held: dict[str, set] = {"page": set(), "slot": set()}
    for e in rec.events:
        if e.kind == "kv_page" or (e.kind == "state_slot" and e.op in ("alloc", "free")):
            kind, units = ("page", e.pages) if e.kind == "kv_page" else ("slot", e.slots)
            if e.op == "alloc":
                assert not held[kind] & set(units), (e.step, kind, units, "allocated while held")
                held[kind].update(units)
            else:
                assert set(units) <= held[kind], (e.step, kind, units, "freed but not held")
                held[kind].difference_update(units)
    assert held == {"page": set(), "slot": set()}
    assert llm.pool.is_empty()
    assert sum(e.kind == "preemption" for e in rec.events) == llm.stats()["preemptions"] > 0


def test_dispatch_matches_batch_phases(traced_run):
    """mixed_batch="chunk" (the default): a step with any extend runs one chunk_kda call over every
    sequence in each KDA layer; an all-decode step one fused_recurrent_kda call."""
    rec, llm, _ = traced_run
    batches = {e.step: e for e in rec.events_of("batch_composition")}
    for e in rec.events_of("kernel_dispatch"):
        b = batches[e.step]
        has_extend = "extend" in b.phases
        assert e.layer in CFG.kda_layer_ids and e.num_seqs == len(b.phases) and e.num_tokens == b.num_tokens
        assert (e.phase, e.kernel) == (("extend", "chunk_kda") if has_extend else ("decode", "fused_recurrent_kda"))
    for step, b in batches.items():  # each KDA layer once per step
        got = [e for e in rec.events_of("kernel_dispatch") if e.step == step]
        assert len(got) == len(CFG.kda_layer_ids)


def test_split_dispatches_once_per_phase():
    rec = TraceRecorder()
    llm = LLM(HybridModel(CFG, seed=0).eval(), tracer=rec, max_num_batched_tokens=32, mixed_batch="split")
    llm.generate([list(range(3, 8)), list(range(1, 71))], SamplingParams(max_tokens=6, ignore_eos=True))
    batches = {e.step: e for e in rec.events_of("batch_composition")}
    for e in rec.events_of("kernel_dispatch"):
        b = batches[e.step]
        assert e.num_seqs == sum(p == e.phase for p in b.phases)
        assert e.kernel == ("chunk_kda" if e.phase == "extend" else "fused_recurrent_kda")
    assert any(len(set(b.phases)) == 2 for b in batches.values())
    for step, b in batches.items():
        got = [e for e in rec.events_of("kernel_dispatch") if e.step == step]
        assert len(got) == len(CFG.kda_layer_ids) * len(set(b.phases))


def test_schedule_respects_the_token_budget(traced_run):
    rec, _, outs = traced_run
    for e in rec.events_of("schedule_decision"):
        assert e.tokens_scheduled <= e.token_budget == 32
    finished = {e.req_id: e.output_len for e in rec.events_of("request_finished")}
    assert finished == {o.req_id: len(o.token_ids) for o in outs}


def test_engine_trace_round_trips(traced_run, tmp_path):
    rec, _, _ = traced_run
    path = tmp_path / "run.jsonl"
    rec.write_jsonl(path)
    header, events = read_jsonl(path)
    assert header["num_events"] == len(rec.events) and events == list(rec.events)
    # the engine described itself: the pages read the layer layout and the pool's sizes from the header
    assert header["kda_layers"] == list(CFG.kda_layer_ids) and header["mla_layers"] == list(CFG.mla_layer_ids)
    assert header["state_bytes"] == 224256 and "engines" not in header


def test_engines_sharing_a_recorder_are_counted_in_the_header(tmp_path):
    """A local disaggregation's prefill and decode engines write one recorder, each numbering its own steps
    and requests: the header says how many engines emitted there, so a page can say its steps mix them."""
    rec = TraceRecorder()
    model = HybridModel(CFG, seed=0).eval()
    LLM(model, tracer=rec), LLM(model, tracer=rec)
    rec.write_jsonl(tmp_path / "two.jsonl")
    header, _ = read_jsonl(tmp_path / "two.jsonl")
    assert header["engines"] == 2 and header["mla_layers"] == list(CFG.mla_layer_ids)


def test_a_local_disaggregation_writes_each_engines_trace_apart(tmp_path):
    """Each engine of a local disaggregation emits through its part of the recorder: the parent keeps every
    event in order (its header counts the engines, the pages warn), and a part's JSONL is one engine's trace --
    its own header, one batch a step, no warning -- which every step-through view draws."""
    from kda_ref.disagg import DisaggregatedLLM
    from model_viz.figures import step_views
    from model_viz.scenarios.engine_trace import header_notes

    rec = TraceRecorder()
    dllm = DisaggregatedLLM(HybridModel(CFG, seed=0).eval(), transfer="local", tracer=rec)
    dllm.generate([[1, 2, 3, 4, 5, 6, 7, 8, 9], [9, 8, 7, 6, 5]], SamplingParams(max_tokens=4, ignore_eos=True))
    assert sorted(rec.parts) == ["decode0", "prefill0"]
    parts = [rec.part(n) for n in ("prefill0", "decode0")]
    assert sum(len(p.events) for p in parts) == len(rec.events) and all(p.events for p in parts)
    rec.write_jsonl(tmp_path / "both.jsonl")
    header, _ = read_jsonl(tmp_path / "both.jsonl")
    assert header["engines"] == 2 and ("common.trace.engines", {"n": 2}) in header_notes(header)
    for p in parts:
        p.write_jsonl(tmp_path / f"{p.name}.jsonl")
        header, events = read_jsonl(tmp_path / f"{p.name}.jsonl")
        assert "engines" not in header and header_notes(header) == []
        steps = [e.step for e in events if e.kind == "batch_composition"]
        assert steps == sorted(set(steps))  # one engine's steps: each once
        tv = step_views.TraceViews(header, events)
        assert tv.views and all(tv.at(i).batch.data for i in range(len(tv.views)))
    rec.enabled = False
    assert not parts[0].enabled  # pausing the recorder pauses its parts
    rec.clear()
    assert not parts[0].events and not parts[1].events  # and clearing it clears them
    rec.enabled, parts[0].enabled = True, False
    assert not parts[0].enabled and parts[1].enabled  # a part pauses on its own


def test_null_tracer_is_the_default_and_records_nothing():
    llm = LLM(CFG)
    assert llm.tracer is NULL_TRACER and llm.runner.on_dispatch is None and llm.model.dispatcher.on_dispatch is None
    llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2))


def test_cli_generate_writes_a_trace(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert cli_main(["generate", "Hello", "KDA", "--max-tokens", "3", "--trace", str(out), "--threads", "1"]) == 0
    header, events = read_jsonl(out)
    assert header["prompts"] == ["Hello", "KDA"]
    assert header["mla_layers"] == [3] and header["kda_layers"] == [0, 1, 2]  # the trained model's layout
    assert sum(e.kind == "request_finished" for e in events) == 2
    assert "wrote" in capsys.readouterr().out


def test_cli_errors_and_help(capsys):
    assert cli_main(["generate", "", "--threads", "1"]) == 2
    assert "prompt: empty" in capsys.readouterr().err
    res = subprocess.run([sys.executable, "-m", "kda_ref.cli", "generate", "--help"], capture_output=True, text=True)
    assert res.returncode == 0
    for opt in ("--max-tokens", "--trace", "--memory-budget-mb", "--max-num-batched-tokens", "--backend"):
        assert opt in res.stdout


def test_cli_train_and_bench_forward_their_help():
    for cmd in (["train", "--help"], ["bench", "prefix-cache", "--help"], ["bench", "checkpoints", "--help"]):
        res = subprocess.run([sys.executable, "-m", "kda_ref.cli", *cmd], capture_output=True, text=True)
        assert res.returncode == 0 and "usage" in res.stdout.lower(), (cmd, res.stderr)
        assert "kda-ref train" not in res.stdout  # the option list is the forwarded command's own
