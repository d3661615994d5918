"""The trace layer: typed events, tracers, the JSONL format, tensor summaries, and its isolation."""

import ast
import dataclasses
import io
import json
import math
import pathlib
import sys
import typing

import pytest
import torch

from kda_ref import trace as T
from kda_ref.trace import events as ev_mod
from model_viz import concepts as concept_map

TRACE_DIR = pathlib.Path(T.__file__).resolve().parent


class _Float(float):
    """A float subclass (numpy's float64 is one): checked past the plain-float fast path."""


def test_a_float_field_holds_finite_numbers_only(monkeypatch):
    """No engine event has a float field today; one that does gets the same rule as JSON values."""
    monkeypatch.setattr(ev_mod, "EVENT_TYPES", dict(ev_mod.EVENT_TYPES))  # the probe's kind is not kept (nor read)

    @ev_mod._event
    class TimedProbe(T.TraceEvent):
        kind: typing.ClassVar[str] = "timed_probe"
        step: int
        seconds: float
        limit: float | None = None
        concepts: tuple[str, ...] = ("engine.progress",)

    e = TimedProbe(step=0, seconds=2, limit=_Float(0.5))
    assert type(e.seconds) is float and type(e.limit) is float
    assert TimedProbe.from_dict(json.loads(T.dumps_event(e))) == e
    for bad in (float("nan"), float("inf"), float("-inf"), _Float("inf")):
        with pytest.raises(T.EventFieldError, match=r"TimedProbe\.seconds: expected a finite float"):
            TimedProbe(step=0, seconds=bad)
        with pytest.raises(T.EventFieldError, match=r"TimedProbe\.limit"):
            TimedProbe(step=0, seconds=1.0, limit=bad)


def _summary():
    return T.summarize_tensor(torch.arange(12.0).reshape(3, 4), max_side=2)


# One instance of every event type, written the way an engine would (tuples where lists are
# declared and vice versa, a str Enum for a phase) so that the normalisation is exercised too.
SAMPLES = {
    "request_arrived": lambda: T.RequestArrived(step=0, req_id=7, prompt_len=33, max_tokens=16),
    "request_finished": lambda: T.RequestFinished(step=9, req_id=7, reason="length", output_len=16),
    "request_aborted": lambda: T.RequestAborted(step=4, req_id=8),
    "schedule_decision": lambda: T.ScheduleDecision(
        step=3, running=(7, 8), waiting=[9], admitted=[8], prefill_chunks=[[8, 12]], decodes=[7],
        token_budget=16, tokens_scheduled=13),
    "batch_composition": lambda: T.BatchComposition(
        step=3, req_ids=[7, 8], cu_seqlens=(0, 1, 13), context_lens=[40, 0], phases=["decode", "extend"],
        state_indices=[1, 2], num_tokens=13, block_tables=[[3, 4, 5], (6,)]),
    "kernel_dispatch": lambda: T.KernelDispatch(
        step=3, layer=2, phase=_kda_phase("decode"), kernel="fused_recurrent_kda", backend="torch",
        num_seqs=1, num_tokens=1),
    "state_slot": lambda: T.StateSlotEvent(
        step=5, op="copy", slots=[4], req_ids=[9], layer=None, src_slots=(2,), page_kind="checkpoint",
        summary=_summary()),
    "conv_state_update": lambda: T.ConvStateUpdate(step=3, layer=1, slots=[1, 2], summary=_summary()),
    "kv_page": lambda: T.KVPageEvent(step=3, op="alloc", pages=[3, 4, 5], req_id=8),
    "spec_verify": lambda: T.SpecVerify(step=9, req_id=2, context_len=40, drafts=[5, 6, 7], num_accepted=1,
                                        next_token=8, kept=2, strategy="per_step", committed_row=1, rejected=2,
                                        freed_pages=[11]),
    "graph_bucket": lambda: T.GraphBucket(step=4, bucket=4, num_seqs=3, tokens=1, pages=2, mode="eager", captured=False,
                                          state_indices=[2, 5, 3, -1], context_lens=[17, 3, 9, 0],
                                          block_table=[[1, 4], [2, -1], [3, -1], [-1, -1]]),
    "preemption": lambda: T.Preemption(step=6, req_id=8, reason="kv pages exhausted", freed_pages=3,
                                       freed_slots=1),
    "pool_snapshot": lambda: T.PoolSnapshot(
        step=6, capacity_bytes={"total": 1 << 20}, used_bytes={"mla_kv": 4096, "kda_state": 65536},
        owners=T.PoolSnapshot.owners_from({_page_kind("mla_kv"): {4: 7, 3: 7}, "checkpoint": {1: "cache"}})),
    "admission_refused": lambda: T.AdmissionRefused(
        step=4, req_id=3, need_bytes=191_168, budget_bytes=190_000, free_bytes=190_000,
        parts={"active KDA state slot": 62_976, "MLA KV pages of 1 token": 128_192},
        message="memory_budget_bytes: request 3 cannot run under this configuration"),
    "engine_stall": lambda: T.EngineStall(step=90, req_ids=(3, 4), idle_steps=4113, waiting=1, running=1,
                                          used_bytes={"mla_kv": 1600, "kda_state": 62_976}, message="engine stalled"),
    "cache": lambda: T.CacheEvent(
        step=8, op="match", req_id=9, node_id=3, position=64,
        detail={"matched": 64, "kv_hit": 80, "path": (0, 3), "ratio": 0.8, "tombstone": False},
        concepts=["state.kda_recurrent"]),
}


def _kda_phase(value):
    from kda_ref.ops.dispatcher import KDAPhase  # a str Enum: stored by its plain value

    return KDAPhase(value)


def _page_kind(value):
    class Kind(str):  # stands for an Enum key with .value, like kda_ref.memory.PageKind
        @property
        def value(self):
            return str.__str__(self)
    return Kind(value)


def _sample(kind):
    assert kind in SAMPLES, f"new event kind {kind!r}: add a sample to SAMPLES in tests/test_trace.py"
    return SAMPLES[kind]()


# ---------------------------------------------------------------------------------------------
# round trip
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(T.EVENT_TYPES))
def test_every_event_type_round_trips_through_jsonl(kind, tmp_path):
    event = _sample(kind)
    assert type(event) is T.EVENT_TYPES[kind] and event.kind == kind
    path = tmp_path / "t.jsonl"
    assert T.write_jsonl([event, event], path, metadata={"model": "tiny", "seed": 0}) == 2
    header, events = T.read_jsonl(path)
    assert header == {"schema": T.SCHEMA_NAME, "version": T.SCHEMA_VERSION, "num_events": 2,
                      "model": "tiny", "seed": 0}
    assert events == [event, event]
    assert all(type(e) is type(event) for e in events)
    # every field is plain JSON data, and exactly the declared fields are written
    line = json.loads(path.read_text(encoding="utf-8").splitlines()[1])
    assert set(line) == {"kind"} | {f.name for f in dataclasses.fields(event)}


def test_normalisation_makes_round_trips_exact():
    sd = _sample("schedule_decision")
    assert sd.running == [7, 8] and type(sd.running) is list  # tuple in, list stored
    assert sd.prefill_chunks == [(8, 12)] and type(sd.prefill_chunks[0]) is tuple  # pair stored as tuple
    assert type(sd.concepts) is tuple
    kd = _sample("kernel_dispatch")
    assert type(kd.phase) is str and kd.phase == "decode"
    bc = _sample("batch_composition")
    assert bc.block_tables == [[3, 4, 5], [6]]
    ce = _sample("cache")
    assert ce.concepts == ("state.kda_recurrent",) and ce.detail["path"] == [0, 3]
    ps = _sample("pool_snapshot")
    assert ps.owners == {"mla_kv": [(3, 7), (4, 7)], "checkpoint": [(1, "cache")]}


def test_events_do_not_alias_the_engines_lists():
    running = [1, 2]
    e = T.ScheduleDecision(step=0, running=running, waiting=[], admitted=[], prefill_chunks=[],
                           decodes=[1, 2], token_budget=8, tokens_scheduled=2)
    running.append(3)
    assert e.running == [1, 2]


def test_events_are_frozen_and_slotted():
    e = _sample("kernel_dispatch")
    with pytest.raises(AttributeError):
        e.layer = 5
    assert not hasattr(e, "__dict__")


def test_registry_is_complete_and_consistent():
    subclasses = {c for c in vars(ev_mod).values() if isinstance(c, type) and issubclass(c, T.TraceEvent)
                  and c is not T.TraceEvent}
    assert subclasses == set(T.EVENT_TYPES.values())
    for kind, cls in T.EVENT_TYPES.items():
        assert cls.kind == kind and cls.__doc__ and "SGLang" in cls.__doc__ and "vLLM" in cls.__doc__
        assert cls.__name__ in T.__all__


# ---------------------------------------------------------------------------------------------
# construction errors
# ---------------------------------------------------------------------------------------------

def _kd(**kw):
    base = dict(step=0, layer=0, phase="extend", kernel="chunk_kda", backend="torch", num_seqs=1, num_tokens=5)
    base.update(kw)
    return T.KernelDispatch(**base)


@pytest.mark.parametrize("field, value, needle", [
    ("layer", torch.tensor(3), "tolist"),
    ("layer", 3.0, "expected int"),
    ("layer", True, "expected int"),
    ("phase", "prefill", "one of"),
    ("kernel", None, "expected str"),
    ("num_tokens", "5", "expected int"),
])
def test_bad_fields_fail_at_construction_naming_the_field(field, value, needle):
    with pytest.raises(T.EventFieldError) as e:
        _kd(**{field: value})
    assert f"KernelDispatch.{field}" in str(e.value) and needle in str(e.value)
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("make, needle", [
    (lambda: T.BatchComposition(step=0, req_ids=[1, 2], cu_seqlens=[0, 3], context_lens=[0, 0],
                                phases=["extend", "extend"], state_indices=[1, 2], num_tokens=3), "cu_seqlens"),
    (lambda: T.BatchComposition(step=0, req_ids=[1], cu_seqlens=[0, 3], context_lens=[0], phases=["extend"],
                                state_indices=[1], num_tokens=4), "num_tokens"),
    (lambda: T.BatchComposition(step=0, req_ids=[1], cu_seqlens=[0, 3], context_lens=[0, 0], phases=["extend"],
                                state_indices=[1], num_tokens=3), "context_lens"),
    (lambda: T.StateSlotEvent(step=0, op="copy", slots=[3], req_ids=[]), "src_slots"),
    (lambda: T.StateSlotEvent(step=0, op="write", slots=[3], req_ids=[], src_slots=[1]), "src_slots"),
    (lambda: T.StateSlotEvent(step=0, op="alloc", slots=[3, 4], req_ids=[1]), "req_ids"),
    (lambda: T.StateSlotEvent(step=0, op="move", slots=[3], req_ids=[1]), "StateSlotEvent.op"),
    (lambda: T.ScheduleDecision(step=0, running=[1], waiting=[], admitted=[], prefill_chunks=[(1, 4)],
                                decodes=[], token_budget=8, tokens_scheduled=5), "tokens_scheduled"),
    (lambda: T.ScheduleDecision(step=0, running=[1], waiting=[], admitted=[], prefill_chunks=[(1, 4, 0)],
                                decodes=[], token_budget=8, tokens_scheduled=4), "prefill_chunks[0]"),
    (lambda: T.CacheEvent(step=0, op="match", req_id=None, node_id=None, position=None, detail={},
                          concepts=()), "concepts"),
    (lambda: T.CacheEvent(step=0, op="match", req_id=None, node_id=None, position=None, detail={},
                          concepts=("Not An Id",)), "concepts"),
    (lambda: T.CacheEvent(step=0, op="match", req_id=None, node_id=None, position=None,
                          detail={"t": torch.zeros(2)}, concepts=("state.conv",)), "detail['t']"),
    (lambda: T.CacheEvent(step=0, op="match", req_id=None, node_id=None, position=None,
                          detail={1: 2}, concepts=("state.conv",)), "keys must be str"),
    # plain JSON has no NaN or infinity: a float anywhere in a JSON field must be finite
    (lambda: T.CacheEvent(step=0, op="match", req_id=None, node_id=None, position=None,
                          detail={"hit_rate": float("nan")}, concepts=("state.conv",)), "detail['hit_rate']"),
    (lambda: T.CacheEvent(step=0, op="match", req_id=None, node_id=None, position=None,
                          detail={"ms": [1.5, float("-inf")]}, concepts=("state.conv",)), "detail['ms']"),
    (lambda: T.CacheEvent(step=0, op="match", req_id=None, node_id=None, position=None,
                          detail={"x": _Float("inf")}, concepts=("state.conv",)), "finite"),
    (lambda: T.PoolSnapshot(step=0, capacity_bytes={"total": 1.5}, used_bytes={}, owners={}),
     "capacity_bytes['total']"),
    # a (unit, owner) pair past the fast path for plain ones: a float, a bool, a tensor, a third element
    (lambda: T.PoolSnapshot(step=0, capacity_bytes={}, used_bytes={}, owners={"mla_kv": [(1, 7), (2, 2.5)]}),
     "owners['mla_kv'][1]"),
    (lambda: T.PoolSnapshot(step=0, capacity_bytes={}, used_bytes={}, owners={"mla_kv": [(1, True)]}),
     "owners['mla_kv'][0]"),
    (lambda: T.PoolSnapshot(step=0, capacity_bytes={}, used_bytes={}, owners={"mla_kv": [(torch.tensor(1), 7)]}),
     "owners['mla_kv'][0]"),
    (lambda: T.PoolSnapshot(step=0, capacity_bytes={}, used_bytes={}, owners={"mla_kv": [(1, 7, 0)]}),
     "owners['mla_kv'][0]"),
    (lambda: T.BatchComposition(step=0, req_ids=[1], cu_seqlens=[0, 1], context_lens=[40], phases=["decode"],
                                state_indices=[1], num_tokens=1, block_tables=[list(range(17))], num_pages=[40]),
     "block_tables"),
    (lambda: T.BatchComposition(step=0, req_ids=[1], cu_seqlens=[0, 1], context_lens=[40], phases=["decode"],
                                state_indices=[1], num_tokens=1, block_tables=[[1, 2]], num_pages=[1]),
     "block_tables"),
    (lambda: T.BatchComposition(step=0, req_ids=[1], cu_seqlens=[0, 1], context_lens=[40], phases=["decode"],
                                state_indices=[1], num_tokens=1, num_pages=[1]), "num_pages"),
])
def test_inconsistent_events_are_rejected(make, needle):
    with pytest.raises(T.EventFieldError) as e:
        make()
    assert needle in str(e.value), str(e.value)


# ---------------------------------------------------------------------------------------------
# malformed files
# ---------------------------------------------------------------------------------------------

def _good_lines():
    buf = io.StringIO()
    T.write_jsonl([_sample("kernel_dispatch"), _sample("batch_composition"), _sample("kv_page")], buf)
    return buf.getvalue().splitlines()


def _replace(lineno, fn):
    def mutate(lines):
        obj = json.loads(lines[lineno - 1])
        fn(obj)
        lines[lineno - 1] = json.dumps(obj)
        return lines
    return mutate


def _set(line, key, value):
    return _replace(line, lambda o: o.__setitem__(key, value))


def _del(line, key):
    return _replace(line, lambda o: o.pop(key))


MALFORMED = {
    "empty file": (lambda lines: [], 1, ["missing header", "empty"]),
    "no header": (lambda lines: lines[1:], 1, ["missing header", "kernel_dispatch"]),
    "header not JSON": (lambda lines: ["schema: kda"] + lines[1:], 1, ["missing header", "not JSON"]),
    "foreign schema": (_set(1, "schema", "other-trace"), 1, ["unknown schema", "'schema'"]),
    "newer version": (_set(1, "version", T.SCHEMA_VERSION + 1), 1, ["version", "not supported"]),
    "version 0": (_set(1, "version", 0), 1, ["version 0", "not supported"]),
    "version not int": (_set(1, "version", "1"), 1, ["'version'"]),
    "bad JSON": (lambda lines: lines[:2] + ['{"kind": "batch_composition", "step": 3,'] + lines[3:], 3,
                 ["bad JSON"]),
    "not an object": (lambda lines: lines[:3] + ["[1, 2, 3]"], 4, ["JSON object"]),
    "no kind": (_del(2, "kind"), 2, ["'kind'"]),
    "unknown kind": (_set(2, "kind", "teleport"), 2, ["unknown event kind", "'teleport'"]),
    "missing field": (_del(2, "layer"), 2, ["KernelDispatch.layer", "missing"]),
    "extra field": (_set(3, "colour", "red"), 3, ["BatchComposition.colour", "unexpected"]),
    "wrong type": (_set(2, "layer", "2"), 2, ["KernelDispatch.layer", "expected int"]),
    "wrong element type": (_set(4, "pages", [3, 4.5]), 4, ["KVPageEvent.pages[1]", "expected int"]),
    "bad literal": (_set(4, "op", "steal"), 4, ["KVPageEvent.op"]),
    "inconsistent values": (_set(3, "num_tokens", 99), 3, ["BatchComposition.num_tokens"]),
    "NaN in the header": (_set(1, "note", float("nan")), 1, ["missing header", "NaN is not plain JSON"]),
    "infinity in an event": (_set(2, "layer", float("inf")), 2, ["bad JSON", "Infinity is not plain JSON"]),
    "a number past a float's range": (lambda lines: [lines[0][:-1] + ', "note": 1e400}'] + lines[1:], 1,
                                      ["missing header", "1e400 is out of a float's range"]),
    "truncated": (lambda lines: lines[:3], 3, ["announces 3 events", "'num_events'"]),
    "second header": (lambda lines: lines + [lines[0]], 5, ["second header"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_raise_a_located_error(case, tmp_path):
    mutate, line, needles = MALFORMED[case]
    lines = mutate(_good_lines())
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    with pytest.raises(T.TraceFormatError) as e:
        T.read_jsonl(path)
    msg = str(e.value)
    assert msg.startswith(f"line {line}:"), msg
    assert e.value.line == line
    for needle in needles:
        assert needle in msg, msg
    assert isinstance(e.value, ValueError)


def test_reader_reads_every_older_version(tmp_path):
    """A trace written before a field was added reads, the field at its default (version 1: a draft tree's
    segment held its root alone, and no BatchComposition named own forwards)."""
    lines = _set(1, "version", 1)(_good_lines())
    header, events = T.read_jsonl_string("\n".join(lines))
    assert header["version"] == 1 and len(events) == 3
    assert all(e.own_forwards is None for e in events if e.kind == "batch_composition")


def test_reader_accepts_text_and_binary_files_and_blank_lines():
    text = "\n".join(_good_lines()) + "\n\n"
    h1, e1 = T.read_jsonl(io.StringIO(text))
    h2, e2 = T.read_jsonl(io.BytesIO(text.encode("utf-8")))
    h3, e3 = T.read_jsonl_string(text.replace("\n", "\r\n"))
    assert h1 == h2 == h3 and e1 == e2 == e3 and len(e1) == 3
    with pytest.raises(T.TraceFormatError, match="UTF-8"):
        T.read_jsonl(io.BytesIO(b"\xff\xfe\x00"))


def test_writer_rejects_reserved_metadata_and_non_events():
    with pytest.raises(ValueError, match="reserved"):
        T.write_jsonl([], io.StringIO(), metadata={"version": 3})
    with pytest.raises(ValueError, match="JSON"):
        T.write_jsonl([], io.StringIO(), metadata={"t": torch.zeros(1)})
    with pytest.raises(ValueError, match="JSON"):
        T.write_jsonl([], io.StringIO(), metadata={"loss": float("nan")})
    with pytest.raises(TypeError, match="not a TraceEvent"):
        T.write_jsonl([{"kind": "kernel_dispatch"}], io.StringIO())


# ---------------------------------------------------------------------------------------------
# tracers
# ---------------------------------------------------------------------------------------------

def test_null_tracer_records_nothing():
    assert T.NULL_TRACER.enabled is False and T.NULL_TRACER.summaries is False
    assert isinstance(T.NULL_TRACER, T.NullTracer) and isinstance(T.NULL_TRACER, T.Tracer)
    assert T.NULL_TRACER.emit(_sample("kernel_dispatch")) is None
    assert not hasattr(T.NULL_TRACER, "__dict__")  # no place to keep anything
    assert not any(isinstance(getattr(T.NULL_TRACER, a, None), list) for a in dir(T.NULL_TRACER))

    built = []

    def engine_step(tracer):
        if tracer.enabled:
            built.append(1)
            tracer.emit(_sample("request_aborted"))

    engine_step(T.NULL_TRACER)
    assert built == []  # the guarded event was never even built
    rec = T.TraceRecorder()
    engine_step(rec)
    assert built == [1] and len(rec) == 1


def test_recorder_keeps_filters_and_groups_events():
    rec = T.TraceRecorder()
    assert rec.enabled and not rec.summaries
    for kind in sorted(SAMPLES):
        rec.emit(_sample(kind))
    assert len(rec) == len(SAMPLES) and list(rec) == rec.events
    assert rec.events_of("kernel_dispatch") == [_sample("kernel_dispatch")]
    assert rec.events_of(T.KVPageEvent) == [_sample("kv_page")]
    assert {e.kind for e in rec.filter(step=3)} == {"schedule_decision", "batch_composition", "kernel_dispatch",
                                                   "conv_state_update", "kv_page"}
    assert {e.step for e in rec.filter(step=range(5, 7))} == {5, 6}
    mem = rec.filter(concept="memory")  # prefix at a dot boundary
    assert {e.kind for e in mem} == {"state_slot", "kv_page", "pool_snapshot"}
    assert rec.filter(concept="memor") == []
    assert [e.kind for e in rec.filter(concept="state.kda_recurrent")] == ["cache", "state_slot"]
    assert rec.filter(step=3, kind="kv_page", concept="state.mla_kv") == [_sample("kv_page")]
    groups = rec.by_step()
    assert list(groups) == sorted(groups) and sum(map(len, groups.values())) == len(rec)
    with pytest.raises(KeyError, match="unknown event kind"):
        rec.events_of("kernel_dispatches")
    with pytest.raises(TypeError, match="TraceEvent"):
        rec.emit({"kind": "kernel_dispatch"})
    rec.enabled = False  # pausing is per instance
    assert T.TraceRecorder().enabled
    rec.clear()
    assert len(rec) == 0


def test_recorder_max_events_error_and_drop(tmp_path):
    rec = T.TraceRecorder(max_events=2)
    rec.emit(_sample("request_arrived"))
    rec.emit(_sample("request_aborted"))
    with pytest.raises(T.TraceOverflow, match="max_events=2"):
        rec.emit(_sample("kernel_dispatch"))
    assert len(rec) == 2
    drop = T.TraceRecorder(max_events=2, on_full="drop")
    for kind in ("request_arrived", "request_aborted", "kernel_dispatch", "kv_page"):
        drop.emit(_sample(kind))
    assert [e.kind for e in drop] == ["request_arrived", "request_aborted"] and drop.dropped == 2
    path = tmp_path / "d.jsonl"
    drop.write_jsonl(path, scenario="overflow")
    header, events = T.read_jsonl(path)
    assert header["dropped"] == 2 and header["scenario"] == "overflow" and events == drop.events
    for bad in (dict(max_events=0), dict(max_events=1.5), dict(on_full="wrap")):
        with pytest.raises(ValueError):
            T.TraceRecorder(**bad)


# ---------------------------------------------------------------------------------------------
# tensor summaries
# ---------------------------------------------------------------------------------------------

def test_summarize_tensor_block_averages_a_known_tensor():
    x = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    s = T.summarize_tensor(x, max_side=2)
    assert s["shape"] == [6, 4] and s["dtype"] == "float32" and s["numel"] == 24
    assert s["row_edges"] == [0, 3, 6] and s["col_edges"] == [0, 2, 4]
    # block (0, 0) = rows 0-2, cols 0-1: 0 1 4 5 8 9
    assert s["heatmap"] == [[4.5, 6.5], [16.5, 18.5]]
    assert s["min"] == 0.0 and s["max"] == 23.0 and s["mean"] == 11.5 and s["nonfinite"] == 0
    assert s["norm"] == pytest.approx(math.sqrt(sum(i * i for i in range(24))))


def test_summarize_tensor_uneven_blocks_and_shapes():
    x = torch.arange(25, dtype=torch.float64).reshape(5, 5)
    s = T.summarize_tensor(x, max_side=2)
    assert s["row_edges"] == [0, 2, 5] and s["col_edges"] == [0, 2, 5]
    for i, (r0, r1) in enumerate(zip(s["row_edges"], s["row_edges"][1:])):
        for j, (c0, c1) in enumerate(zip(s["col_edges"], s["col_edges"][1:])):
            assert s["heatmap"][i][j] == pytest.approx(x[r0:r1, c0:c1].mean().item())
    small = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    assert T.summarize_tensor(small, max_side=16)["heatmap"] == small.double().tolist()  # whole, exact
    state = torch.ones(2, 3, 4)  # [HV, K, V] -> 6 x 4
    assert T.summarize_tensor(state)["heatmap"] == [[1.0] * 4] * 6
    assert T.summarize_tensor(torch.tensor([1.0, 3.0]))["heatmap"] == [[1.0, 3.0]]
    assert T.summarize_tensor(torch.tensor(2.0))["heatmap"] == [[2.0]]
    empty = T.summarize_tensor(torch.zeros(0, 4))
    assert empty["heatmap"] == [] and empty["min"] is None and empty["norm"] == 0.0
    with pytest.raises(ValueError, match="max_side"):
        T.summarize_tensor(x, max_side=0)


def test_summarize_tensor_keeps_nan_in_its_block_and_fits_in_events():
    x = torch.zeros(4, 4)
    x[0, 0] = float("nan")
    x[3, 3] = float("inf")
    s = T.summarize_tensor(x, max_side=2)
    assert s["heatmap"] == [[None, 0.0], [0.0, None]]  # each non-finite value spoils its own block only
    assert s["nonfinite"] == 2 and s["min"] == 0.0 and s["max"] == 0.0 and s["norm"] is None and s["mean"] is None
    e = T.StateSlotEvent(step=1, op="write", slots=[2], req_ids=[5], layer=0, summary=s)
    line = T.dumps_event(e)
    assert "NaN" not in line and "Infinity" not in line and T.loads_event(line) == e  # plain JSON, reads back equal
    big = T.summarize_tensor(torch.randn(300, 70), max_side=16)
    assert len(big["heatmap"]) == 16 and all(len(r) == 16 for r in big["heatmap"])
    e = T.StateSlotEvent(step=1, op="write", slots=[2], req_ids=[5], layer=0, summary=big)
    assert T.loads_event(T.dumps_event(e)) == e
    json.dumps(big, allow_nan=False)  # plain JSON


# ---------------------------------------------------------------------------------------------
# concepts and layering
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(T.EVENT_TYPES))
def test_every_concept_id_of_every_event_is_in_the_concept_map(kind):
    cls = T.EVENT_TYPES[kind]
    defaults = T.event_concepts(cls)
    if cls is T.CacheEvent:
        assert defaults == ()  # the caller names them; checked per instance below
    else:
        assert defaults, f"{cls.__name__} names no concept"
    used = set(defaults) | set(_sample(kind).concepts)
    missing = used - set(concept_map.CONCEPTS)
    assert not missing, f"{cls.__name__} uses concept ids absent from model_viz.concepts: {missing}"


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):  # also imports inside functions
        if isinstance(node, ast.Import):
            for a in node.names:
                yield 0, a.name
        elif isinstance(node, ast.ImportFrom):
            yield node.level, node.module or ""


def test_trace_depends_on_nothing_above_it():
    files = sorted(TRACE_DIR.glob("*.py"))
    assert {p.name for p in files} >= {"__init__.py", "events.py", "recorder.py", "jsonl.py"}
    allowed_third_party = {"torch"}
    for path in files:
        for level, module in _imports(path):
            where = f"{path.name}: import {'.' * level}{module}"
            if level >= 1:  # kda_ref.utils depends on nothing: it is not above the trace
                assert level == 1 or (level == 2 and module.split(".")[0] == "utils"), \
                    f"{where} reaches outside kda_ref.trace"
                continue
            top = module.split(".")[0]
            if top == "kda_ref":
                assert module.split(".")[1:2] in (["trace"], ["utils"]), where
                continue
            assert top != "model_viz", where
            assert top in sys.stdlib_module_names or top in allowed_third_party, where


def test_the_import_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import json\nfrom ..engine import scheduler\n\ndef f():\n    import model_viz.concepts\n")
    assert list(_imports(bad)) == [(0, "json"), (2, "engine"), (0, "model_viz.concepts")]
