"""Static-shape decode (``LLM(static_decode=True)``, :mod:`kda_ref.engine.static_decode`): buckets and
PAD rows. Static and dynamic decode give the same tokens and logits; a PAD row never touches a slot
or page no live request owns (sentinels planted in every unowned unit survive bit for bit); the
fixed-shape step traces whole under ``torch._dynamo`` (no host sync, no data-dependent shape: what
a CUDA graph needs)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.engine.graphs import EmulatedGraphs
from kda_ref.engine.static_decode import StaticDecode, capture_sizes
from kda_ref.memory import PageKind
from kda_ref.ops.pad_rows import PAD_SLOT_ID, gather_rows, scatter_rows_
from kda_ref.speculative import SPEC_STATES, rollback_strategy
from kda_ref.trace import GraphBucket, TraceRecorder, dumps_event, loads_event

# the micro model's widths with two KDA layers and one MLA layer (it has three and one): a layer mixed
# up with another still shows, and the dynamo traces below, which unroll every layer, take less time
CFG = dataclasses.replace(ModelConfig.micro(), num_hidden_layers=3, kda_layers=[1, 2], full_attn_layers=[3])
PROMPTS = [[1, 5, 9, 33, 2, 7], list(range(4, 40)), [3, 2, 1], [7] * 41, [9, 8]]
MAX_TOKENS = [12, 5, 9, 14, 3]  # requests finish at different steps: the bucket shrinks, PAD rows come and go


def _run(static: bool, prompts=PROMPTS, max_tokens=MAX_TOKENS, page_size=16, **kw):
    """Tokens of every request and the logits of every step, by step."""
    llm = LLM(CFG, seed=0, static_decode=static, page_size=page_size, **kw)
    steps = []
    run = llm.runner.run

    def recording_run(sched, *a, **k):
        out = run(sched, *a, **k)
        steps.append((out.static, out.logits.clone()))
        return out

    llm.runner.run = recording_run
    outs = llm.generate(prompts, [SamplingParams(max_tokens=m) for m in max_tokens], use_tqdm=False)
    return [o.token_ids for o in outs], steps, llm


def _record_static(llm) -> list:
    """The ``StaticStepInfo`` (None: a dynamic step) of every step ``llm`` runs from now on, in order."""
    seen, run = [], llm.runner.run

    def recording(sched, *a, **k):
        out = run(sched, *a, **k)
        seen.append(out.static)
        return out

    llm.runner.run = recording
    return seen


def _emulate_graphs(llm, compile: bool = False) -> EmulatedGraphs:
    """Give ``llm`` a static runner that captures and replays every bucket as a CUDA graph would
    (:class:`EmulatedGraphs`: the capture writes nothing, every replay overwrites the same outputs)."""
    graphs = EmulatedGraphs()
    llm.runner.static = StaticDecode(llm.model, llm.pool.tensors, llm.runner.static.sizes[-1], llm.max_model_len,
                                     compile=compile, graphs=graphs)
    return graphs


# ---- buckets --------------------------------------------------------------------------------------
def test_capture_sizes_follow_the_1_2_4_then_multiples_of_8_shape():
    assert capture_sizes(1) == (1,)
    assert capture_sizes(6) == (1, 2, 4, 6)
    assert capture_sizes(16) == (1, 2, 4, 8, 16)
    assert capture_sizes(20) == (1, 2, 4, 8, 16, 20)
    big = capture_sizes(300)
    assert big[:5] == (1, 2, 4, 8, 16) and 248 in big and 256 in big and 272 in big and big[-1] == 300
    assert list(big) == sorted(set(big))


def test_bucket_shape_rounds_rows_and_pages_up_and_refuses_what_no_bucket_holds():
    llm = LLM(CFG, seed=0, static_decode=True, page_size=16, max_num_seqs=8, max_model_len=100)
    st = llm.runner.static
    assert st.max_pages == 7  # cdiv(100, 16)
    assert st.bucket_shape(3, 0) == (4, 1)
    assert st.bucket_shape(5, 16) == (8, 2)  # 16 cached + 1 new token: 2 pages
    assert st.bucket_shape(1, 40) == (1, 4)  # 3 pages -> 4
    assert st.bucket_shape(1, 99) == (1, 7)  # capped at max_model_len's pages
    assert st.bucket_shape(9, 0) is None  # more rows than the largest bucket
    assert st.bucket_shape(1, 112) is None  # more pages than max_model_len allows


# ---- same answers ---------------------------------------------------------------------------------
def test_static_decode_gives_the_dynamic_tokens_and_logits_with_pad_rows_in_the_buckets():
    dyn_tokens, dyn_steps, _ = _run(False)
    st_tokens, st_steps, llm = _run(True)
    assert st_tokens == dyn_tokens
    assert len(st_steps) == len(dyn_steps)
    for (info, a), (none, b) in zip(st_steps, dyn_steps):
        assert none is None
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    infos = [info for info, _ in st_steps if info is not None]
    assert infos, "no step ran as a static bucket"
    assert {i.bucket for i in infos} >= {8, 4, 2}  # 5 requests, then fewer as they finish
    assert any(i.bucket > i.num_seqs for i in infos)  # PAD rows ran
    for i in infos:
        pad = i.bucket - i.num_seqs
        assert i.state_indices[i.num_seqs:] == [PAD_SLOT_ID] * pad
        assert all(s >= 1 for s in i.state_indices[:i.num_seqs])  # live rows never use the PAD unit
        assert all(row == [PAD_SLOT_ID] * i.pages for row in i.block_table[i.num_seqs:])
        assert i.context_lens[i.num_seqs:] == [0] * pad
    # buckets are reused: fewer buckets than static steps
    assert len(llm.runner.static.buckets) < len(infos)


def test_static_decode_with_sampling_matches_dynamic_for_the_same_seed():
    params = [SamplingParams(max_tokens=8, temperature=0.9, seed=s) for s in range(3)]
    outs = []
    for static in (False, True):
        llm = LLM(CFG, seed=0, static_decode=static)
        outs.append([o.token_ids for o in llm.generate(PROMPTS[:3], params, use_tqdm=False)])
    assert outs[0] == outs[1]


@pytest.mark.parametrize("prefix_cache", ["radix", "block"])
def test_static_decode_with_a_prefix_cache_matches_dynamic(prefix_cache):
    shared = list(range(10, 60))
    prompts = [shared + [1, 2], shared + [3], shared + [4, 5, 6]]
    a, _, _ = _run(False, prompts, [6, 6, 6], page_size=None, prefix_cache=prefix_cache)
    b, steps, _ = _run(True, prompts, [6, 6, 6], page_size=None, prefix_cache=prefix_cache)
    assert a == b
    assert any(info is not None for info, _ in steps)


def test_static_decode_beside_speculation_keeps_the_greedy_tokens():
    prompt = [5, 6, 7, 8] * 6
    plain = LLM(CFG, seed=0).generate([prompt], SamplingParams(max_tokens=16), use_tqdm=False)
    llm = LLM(CFG, seed=0, static_decode=True, speculative="ngram", num_speculative_tokens=3)
    spec = llm.generate([prompt], SamplingParams(max_tokens=16), use_tqdm=False)
    assert spec[0].token_ids == plain[0].token_ids


# ---- PAD rows touch nothing -----------------------------------------------------------------------
def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32) if t.dtype == torch.float32 else t


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "emulated_graph"])
def test_pad_rows_leave_every_unowned_slot_and_page_bit_for_bit(graphs):
    llm = LLM(CFG, seed=0, static_decode=True, page_size=16)
    if graphs:
        _emulate_graphs(llm)
    for p in PROMPTS[:3]:  # 3 live rows -> bucket 4: one PAD row every step
        llm.add_request(p, SamplingParams(max_tokens=30))
    while any(r.num_computed_tokens < len(r.prompt_token_ids) for r in llm.scheduler.running + list(llm.scheduler.waiting)):
        llm.step()
    pool, t = llm.pool, llm.pool.tensors
    free_slots = [i for i in range(t.num_slots) if pool.owner_of(PageKind.KDA_STATE, i) is None]
    free_pages = [i for i in range(t.num_pages) if pool.owner_of(PageKind.MLA_KV, i) is None]
    assert 0 in free_slots and 0 in free_pages  # the PAD units: PAD rows read zeros there (what they write is zeroed)
    free_slots.remove(0)
    free_pages.remove(0)
    gen = torch.Generator().manual_seed(1)
    for i in free_slots:  # NaN in some, random bits elsewhere: any read that leaks shows, any write shows
        t.recurrent[:, i] = float("nan") if i % 2 == 0 else torch.randn(t.recurrent[:, i].shape, generator=gen)
        t.conv[:, i] = float("nan") if i % 3 == 0 else torch.randn(t.conv[:, i].shape, generator=gen)
    for i in free_pages:
        t.kv[:, i] = float("nan") if i % 2 == 0 else torch.randn(t.kv[:, i].shape, generator=gen)
    before = (_bits(t.recurrent[:, free_slots]).clone(), _bits(t.conv[:, free_slots]).clone(),
              _bits(t.kv[:, free_pages]).clone())
    rec = TraceRecorder()
    llm.tracer = llm.scheduler.tracer = rec
    outs = []
    for _ in range(8):
        outs.extend(llm.step())
    assert {k[0] for k in llm.runner.static.buckets} == {4}  # 3 live rows and 1 PAD row, every step
    if graphs:
        assert all(b.graph is not None for b in llm.runner.static.buckets.values())
    after = (_bits(t.recurrent[:, free_slots]), _bits(t.conv[:, free_slots]), _bits(t.kv[:, free_pages]))
    for a, b in zip(before, after):
        assert torch.equal(a, b)
    for pool in (t.recurrent, t.conv, t.kv):
        assert not pool[:, 0].any()  # the PAD unit still holds zeros
    # and the live requests still decode the dynamic engine's tokens
    dyn = LLM(CFG, seed=0, page_size=16).generate(PROMPTS[:3], SamplingParams(max_tokens=30),
                                                                 use_tqdm=False)
    for r, d in zip(sorted(llm.scheduler.running, key=lambda r: r.req_id), dyn):
        assert r.output_token_ids == d.token_ids[:len(r.output_token_ids)]


def test_gather_rows_reads_the_zero_pad_unit_and_scatter_rows_touches_no_live_unit():
    pool = torch.randn(5, 3, 2)
    pool[2] = float("nan")  # a unit nobody in this step owns
    pool[0] = 0.0  # the PAD unit, zeroed by the static runner
    idx = torch.tensor([3, PAD_SLOT_ID, 1, PAD_SLOT_ID])
    rows = gather_rows(pool, idx)
    assert torch.equal(rows[0], pool[3]) and torch.equal(rows[2], pool[1])
    assert not rows[1].any() and not rows[3].any()
    before = pool.clone()
    new = torch.full((4, 3, 2), 7.0)
    scatter_rows_(pool, idx, new)
    assert torch.equal(pool[3], torch.full((3, 2), 7.0)) and torch.equal(pool[1], torch.full((3, 2), 7.0))
    assert not pool[0].any()  # the PAD unit still reads as zeros
    assert torch.equal(_bits(pool[[2, 4]]), _bits(before[[2, 4]]))  # NaN bits kept too


# ---- capturable ----------------------------------------------------------------------------------
# by default the decode bucket is traced whole by tests/test_static_compile.py's aot_eager engine (the engine
# compiles with fullgraph=True, and that test asserts the bucket ran compiled, PAD row included)
@pytest.mark.slow
def test_the_static_step_traces_whole_with_no_host_sync_and_matches_eager():
    """``fullgraph=True`` fails on any graph break: a ``.tolist()`` / ``.item()``, a boolean-mask index
    (data-dependent shape) or Python control flow on tensor values inside the step -- what a CUDA
    graph could not replay either."""
    llm = LLM(CFG, seed=0, static_decode=True)
    for p in PROMPTS[:3]:
        llm.add_request(p, SamplingParams(max_tokens=10))
    for _ in range(3):
        llm.step()
    st: StaticDecode = llm.runner.static
    (shape, b), = st.buckets.items()
    assert b.bs == 4 and shape[0] == 4
    model, cache = llm.model, st.cache
    disp = model.dispatcher.with_hook(None)
    saved = [x.clone() for x in (cache.recurrent, cache.conv, cache.kv)]
    with torch.no_grad():
        eager = st._step(b, disp)  # the bucket's whole step: its masks derived from the metadata, the greedy rows
        after_eager = [x.clone() for x in (cache.recurrent, cache.conv, cache.kv)]
        for live, s in zip((cache.recurrent, cache.conv, cache.kv), saved):
            live.copy_(s)
        torch._dynamo.reset()
        traced = torch.compile(lambda: st._step(b, disp), backend="eager", fullgraph=True, dynamic=False)()
    torch._dynamo.reset()
    # traced, the recurrence runs as products and sums (the form inductor fuses): equal to float rounding
    torch.testing.assert_close(traced.logits, eager.logits, rtol=0, atol=1e-5)
    assert torch.equal(traced.greedy, eager.greedy)
    for live, e in zip((cache.recurrent, cache.conv, cache.kv), after_eager):
        torch.testing.assert_close(live, e, rtol=0, atol=1e-5, equal_nan=True)


# ---- trace ----------------------------------------------------------------------------------------
def test_graph_bucket_events_name_the_bucket_and_its_pad_rows():
    rec = TraceRecorder()
    llm = LLM(CFG, seed=0, static_decode=True, tracer=rec)
    llm.generate(PROMPTS[:3], SamplingParams(max_tokens=4), use_tqdm=False)
    ev = [e for e in rec.events if isinstance(e, GraphBucket)]
    assert ev and all(e.mode == "eager" and not e.captured for e in ev)
    assert ev[0].bucket == 4 and ev[0].num_seqs == 3 and ev[0].state_indices[3] == PAD_SLOT_ID
    assert loads_event(dumps_event(ev[0])) == ev[0]
    assert ev[0].concepts == ("static.pad_rows",)
    # the kernel dispatches of a static step report the bucket's rows (what ran)
    steps = {e.step for e in ev}
    kd = [e for e in rec.events if e.kind == "kernel_dispatch" and e.step in steps]
    assert kd and all(e.num_seqs in {g.bucket for g in ev} for e in kd)


# ---- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_static_decode_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="static_decode"):
        LLM(CFG, static_decode=bad)


def test_static_decode_refuses_the_triton_backend_before_building_anything(monkeypatch):
    from kda_ref.engine import llm as llm_mod

    built = []
    monkeypatch.setattr(llm_mod, "UnifiedMemoryPool", lambda *a, **k: built.append(1))
    with pytest.raises(ValueError, match="static_decode.*torch"):
        LLM(CFG, backend="triton", static_decode=True)
    assert not built


def test_the_dispatcher_refuses_pad_rows_on_the_triton_backend():
    from kda_ref.ops.dispatcher import KDAKernelDispatcher

    d = KDAKernelDispatcher(backend="triton")
    x = torch.zeros(1, 2, 4)
    with pytest.raises(ValueError, match="pad"):
        d.decode_(x, x, x, x, torch.zeros(1, 2), state_pool=torch.zeros(2, 2, 4, 4),
                  state_indices=torch.tensor([PAD_SLOT_ID]), cu_seqlens=torch.tensor([0, 1]), pad=True)


def test_capture_needs_a_cuda_device():
    llm = LLM(CFG, seed=0)
    with pytest.raises(ValueError, match="capture"):
        StaticDecode(llm.model, llm.pool.tensors, 4, 128, capture=True)
    with pytest.raises(ValueError, match="capture=False contradicts graphs"):
        StaticDecode(llm.model, llm.pool.tensors, 4, 128, capture=False, graphs=EmulatedGraphs())


# ---- verify steps in static buckets ---------------------------------------------------------------
SPEC_PROMPTS = [[5, 6, 7, 8] * 6, [1, 2, 3] * 5, [9, 9, 4, 9, 9, 4, 9, 9]]


def _spec_run(static: bool, spec_state: str, max_tokens=16, tracer=None, draft_seed=1):
    """Draft-model speculation (a drafter that always proposes k tokens; seed 0 drafts the target's own
    tokens: every draft accepted; another seed: mostly rejected)."""
    from kda_ref.model import HybridModel

    draft = HybridModel(CFG, seed=draft_seed)
    llm = LLM(CFG, seed=0, static_decode=static, speculative="draft", draft_model=draft,
              num_speculative_tokens=3, spec_state=spec_state, tracer=tracer)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, return_logits=True)
    return llm.generate(SPEC_PROMPTS, params, use_tqdm=False), llm


@pytest.mark.parametrize("spec_state,draft_seed", [  # every registered strategy; the first by default
    pytest.param(s, 1, marks=() if i == 0 else pytest.mark.slow) for i, s in enumerate(SPEC_STATES)]
    + [pytest.param(SPEC_STATES[0], 0, marks=pytest.mark.slow)])
def test_uniform_verify_steps_run_as_static_buckets_with_the_dynamic_answer(spec_state, draft_seed):
    rec = TraceRecorder()
    static, _ = _spec_run(True, spec_state, tracer=rec, draft_seed=draft_seed)
    dynamic, _ = _spec_run(False, spec_state, draft_seed=draft_seed)
    for a, b in zip(static, dynamic):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)
    verify = [e for e in rec.events if isinstance(e, GraphBucket) and e.tokens == 4]
    assert verify, "no verify step ran as a static bucket"
    assert any(e.bucket > e.num_seqs for e in verify)  # with PAD rows verifying 4 zero tokens
    for e in verify:
        assert e.state_indices[e.num_seqs:] == [PAD_SLOT_ID] * (e.bucket - e.num_seqs)


# the strategies that keep per-token records (ReplaySSM's inputs, RecoverSSM's corrections); the first by default
RECORD_KEEPERS = [s for s in SPEC_STATES if not rollback_strategy(s).record.keeps_step_states]


@pytest.mark.parametrize("spec_state", [pytest.param(s, marks=() if i == 0 else pytest.mark.slow)
                                        for i, s in enumerate(RECORD_KEEPERS)])
def test_the_fixed_shape_commit_runs_as_a_bucket_step_that_traces_whole(spec_state):
    """A strategy that kept records, after a static verify step: its commit (ReplaySSM's fold, RecoverSSM's
    closed form) is a bucket step of the same shape (kept counts as data: ``fold`` buckets, one per (rows,
    L)), and it traces whole under ``torch._dynamo`` with ``fullgraph=True`` -- no host sync, no
    data-dependent shape -- writing the same slots as eager."""
    (outs, llm), (dynamic, _) = _spec_run(True, spec_state), _spec_run(False, spec_state)
    for a, b in zip(outs, dynamic):
        assert a.token_ids == b.token_ids
    st: StaticDecode = llm.runner.static
    folds = {k: b for k, b in st.buckets.items() if k[3] == "fold"}
    # one bucket per window length L that ran (k + 1 = 4; shorter near a request's max_tokens)
    assert folds and all(b.runs > 0 and b.tokens == k[2] for k, b in folds.items())
    b = max((b for b in folds.values() if b.tokens == 4), key=lambda b: b.bs)
    cache, disp = st.cache, llm.model.dispatcher.with_hook(None)
    saved = [x.clone() for x in (cache.recurrent, cache.conv)]
    with torch.no_grad():
        eager = st._step(b, disp)
        after = [x.clone() for x in (cache.recurrent, cache.conv)]
        for live, s in zip((cache.recurrent, cache.conv), saved):
            live.copy_(s)
        torch._dynamo.reset()
        traced = torch.compile(lambda: st._step(b, disp), backend="eager", fullgraph=True, dynamic=False)()
    torch._dynamo.reset()
    for layer, st_e in eager.step_states.items():
        torch.testing.assert_close(traced.step_states[layer].recurrent, st_e.recurrent, rtol=0, atol=1e-5)
    for live, e in zip((cache.recurrent, cache.conv), after):
        torch.testing.assert_close(live, e, rtol=0, atol=1e-5, equal_nan=True)


# every registered strategy eagerly under -m slow; by default, captured, the one whose verify writes the pools
@pytest.mark.parametrize("spec_state,graphs", [pytest.param(s, False, marks=pytest.mark.slow) for s in SPEC_STATES]
                         + [(next(s for s in SPEC_STATES if rollback_strategy(s).record.writes_slots), True)])
def test_pad_rows_of_verify_buckets_leave_unowned_units_bit_for_bit(spec_state, graphs):
    """A verify bucket's PAD rows touch no unowned unit -- with ``slots`` too, whose verify step writes a
    state per verified token into the pools (a PAD row's ``verify_slots`` are -1) -- also when the
    buckets are captured and replayed as graphs."""
    from kda_ref.model import HybridModel

    llm = LLM(CFG, seed=0, static_decode=True, speculative="draft", num_speculative_tokens=3,
              draft_model=HybridModel(CFG, seed=1), spec_state=spec_state)
    if graphs:
        _emulate_graphs(llm)
    for p in SPEC_PROMPTS:
        llm.add_request(p, SamplingParams(max_tokens=40, ignore_eos=True))
    llm.step()  # the prefill
    pool, t = llm.pool, llm.pool.tensors
    free_slots = [i for i in range(t.num_slots) if pool.owner_of(PageKind.KDA_STATE, i) is None]
    free_pages = [i for i in range(t.num_pages) if pool.owner_of(PageKind.MLA_KV, i) is None]
    free_slots.remove(0)  # the PAD units hold zeros (checked below)
    free_pages.remove(0)
    t.recurrent[:, free_slots] = float("nan")
    t.conv[:, free_slots] = float("nan")
    t.kv[:, free_pages] = float("nan")
    before = [_bits(x).clone() for x in (t.recurrent[:, free_slots], t.conv[:, free_slots])]
    ran = _record_static(llm)
    for _ in range(6):
        llm.step()
    assert any(i is not None and i.tokens == 4 and i.bucket > i.num_seqs for i in ran)
    # pages the requests took since (drafts' pages, some freed again after a rejection) were written
    # legitimately; the PAD page and the pages never handed out must still hold the planted NaN
    never = list(range(pool._free[PageKind.MLA_KV].next_fresh, t.num_pages))
    after = [_bits(x) for x in (t.recurrent[:, free_slots], t.conv[:, free_slots])]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert torch.isnan(t.kv[:, never]).all()
    assert not t.recurrent[:, 0].any() and not t.conv[:, 0].any() and not t.kv[:, 0].any()
    dynamic, _ = _spec_run(False, spec_state, max_tokens=40, draft_seed=1)
    for r in llm.scheduler.running:
        d = dynamic[r.req_id].token_ids
        assert r.output_token_ids == d[:len(r.output_token_ids)]


@pytest.mark.parametrize("spec_state", [pytest.param(s, marks=() if i == 0 else pytest.mark.slow)
                                        for i, s in enumerate(SPEC_STATES)])
def test_the_static_verify_step_traces_whole(spec_state):
    from kda_ref.model import HybridModel

    record = rollback_strategy(spec_state).record
    llm = LLM(CFG, seed=0, static_decode=True, speculative="draft", num_speculative_tokens=3,
              draft_model=HybridModel(CFG, seed=1), spec_state=spec_state)
    for p in SPEC_PROMPTS:
        llm.add_request(p, SamplingParams(max_tokens=12, ignore_eos=True))
    while not any(k[2] == 4 for k in llm.runner.static.buckets):
        llm.step()
    st: StaticDecode = llm.runner.static
    b = next(b for k, b in st.buckets.items() if k[2] == 4)
    model, cache = llm.model, st.cache
    disp = model.dispatcher.with_hook(None)
    before = [x.clone() for x in (cache.kv, cache.recurrent, cache.conv)]
    with torch.no_grad():
        eager = st._step(b, disp)
        eager_pools = [x.clone() for x in (cache.kv, cache.recurrent, cache.conv)]
        for x, saved in zip((cache.kv, cache.recurrent, cache.conv), before):
            x.copy_(saved)  # a verify writes KV rows (the drafts'), and with slots the verified states: put them back
        torch._dynamo.reset()
        traced = torch.compile(lambda: st._step(b, disp), backend="eager", fullgraph=True)()
    torch._dynamo.reset()
    torch.testing.assert_close(traced.logits, eager.logits, rtol=0, atol=1e-5)
    for x, e in zip((cache.kv, cache.recurrent, cache.conv), eager_pools):
        torch.testing.assert_close(x, e, rtol=0, atol=1e-5, equal_nan=True)  # the same pool writes
    if record.writes_slots:  # written into the slots, nothing returned
        assert not traced.step_states and not eager.step_states
        assert not torch.equal(cache.recurrent, before[1])
        return
    records = ((traced.step_states, eager.step_states) if record.keeps_step_states
               else (traced.trajectories, eager.trajectories))
    assert sorted(records[0]) == sorted(records[1]) == list(CFG.kda_layer_ids)
    for layer, tr in traced.trajectories.items():  # ReplaySSM's inputs, RecoverSSM's corrections: the same
        torch.testing.assert_close(tr.tensors(), eager.trajectories[layer].tensors(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("speculative", [False, True])
def test_a_static_step_reads_greedy_tokens_from_the_step_and_fails_only_a_non_finite_row(speculative):
    """A static step computes every row's greedy token and finiteness inside the step (``ForwardOutput.greedy``,
    one host read); the runner samples and accepts from them. A request whose state turned NaN fails with
    the same "not finite" error the per-row path gives; the other request's tokens are unchanged."""
    from kda_ref.model import HybridModel

    kw = {}
    if speculative:  # a drafter proposing the target's own tokens: every step is a uniform verify of 1 + 3
        kw = dict(speculative="draft", draft_model=HybridModel(CFG, seed=0), num_speculative_tokens=3)
    llm = LLM(CFG, seed=0, static_decode=True, **kw)
    params = SamplingParams(max_tokens=9, ignore_eos=True)
    good, bad = llm.add_request(PROMPTS[1], params), llm.add_request(PROMPTS[3], params)
    llm.step()  # both prefilled
    victim = next(r for r in llm.scheduler.running if r.req_id == bad)
    llm.pool.tensors.recurrent[:, victim.slot] = float("nan")
    seen, outs = _record_static(llm), {}
    while llm.has_unfinished():
        for o in llm.step():
            outs[o.req_id] = o
    assert seen[0] is not None and seen[0].tokens == (4 if speculative else 1)  # the poisoned step ran static
    assert outs[bad].finish_reason == "error" and "not finite" in outs[bad].error
    assert len(outs[bad].token_ids) == 1  # failed in the first step after the poisoning: only its prefill's token
    alone = LLM(CFG, seed=0).generate([PROMPTS[1]], params)[0]
    assert outs[good].token_ids == alone.token_ids and outs[good].error is None


# ---- captured and replayed (CUDA graphs' rules, emulated on the CPU) ------------------------------
def _run_recording(llm, prompts, max_tokens):
    """Tokens, and every step's (static info, logits) as the runner returned them -- not copied, so a
    step output that a later graph replay overwrites shows."""
    steps, run = [], llm.runner.run

    def recording(sched, *a, **k):
        out = run(sched, *a, **k)
        steps.append((out.static, out.logits))
        return out

    llm.runner.run = recording
    outs = llm.generate(prompts, [SamplingParams(max_tokens=m) for m in max_tokens], use_tqdm=False)
    return [o.token_ids for o in outs], steps


def test_captured_buckets_replay_the_dynamic_tokens_and_logits():
    """Each bucket is captured once, in its first step, and replayed from then on. The capture's warm-up
    advanced the states it ran on, and they are put back (else the capturing step would advance them
    twice and the tokens would part from the dynamic ones); each step's logits are copied out of the
    graph's output buffers before the next replay overwrites them (compared here as the runner returned
    them, uncopied)."""
    dyn_tokens, dyn_steps, _ = _run(False)
    llm = LLM(CFG, seed=0, static_decode=True, page_size=16)
    graphs = _emulate_graphs(llm)
    tokens, steps = _run_recording(llm, PROMPTS, MAX_TOKENS)
    assert tokens == dyn_tokens
    assert len(steps) == len(dyn_steps)
    for (info, a), (_, b) in zip(steps, dyn_steps):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    infos = [i for i, _ in steps if i is not None]
    assert infos and all(i.mode == "emulated_graph" for i in infos)
    st = llm.runner.static
    assert graphs.captures == len(st.buckets) == sum(i.captured for i in infos) >= 3  # once per bucket
    for b in st.buckets.values():
        assert b.graph.replays == b.runs  # the capturing step replays too: capture itself runs nothing
    assert any(i.bucket > i.num_seqs for i in infos)


@pytest.mark.parametrize("spec_state", [pytest.param(s, marks=() if rollback_strategy(s).record.writes_slots else
                                                     pytest.mark.slow) for s in SPEC_STATES])
def test_captured_verify_buckets_keep_the_dynamic_answer(spec_state):
    """Verify buckets captured and replayed: the per-token states (``per_step``), the slots written inside
    the step (``slots``: the capture's warm-up wrote them too and they are put back) or the trajectory
    (``replay``) come out of the graph's buffers and give the dynamic engine's tokens and logits."""
    from kda_ref.model import HybridModel

    dynamic, _ = _spec_run(False, spec_state)
    llm = LLM(CFG, seed=0, static_decode=True, speculative="draft", num_speculative_tokens=3,
              draft_model=HybridModel(CFG, seed=1), spec_state=spec_state)
    _emulate_graphs(llm)
    ran = _record_static(llm)
    params = SamplingParams(max_tokens=16, ignore_eos=True, return_logits=True)
    outs = llm.generate(SPEC_PROMPTS, params, use_tqdm=False)
    for a, b in zip(outs, dynamic):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)
    verify = [i for i in ran if i is not None and i.tokens == 4]
    assert verify and all(i.mode == "emulated_graph" for i in verify)
    buckets = llm.runner.static.buckets
    assert sum(i.captured for i in verify) == sum(1 for k in buckets if k[2] == 4 and k[3] != "fold")
    # ReplaySSM's fold is a bucket step of the same shape, captured and replayed too
    folds = [b for k, b in buckets.items() if k[3] == "fold"]
    assert bool(folds) == (not rollback_strategy(spec_state).record.keeps_step_states) and all(b.graph is not None and b.runs > 0 for b in folds)


def test_a_replayed_step_re_emits_the_kernel_dispatches_recorded_at_capture():
    """A replay runs no Python, so the trace's kernel dispatches of a captured step are the ones recorded
    when it was captured, re-emitted: the same events, step by step, as the uncaptured static engine's."""
    def dispatches(graphs: bool):
        rec = TraceRecorder()
        llm = LLM(CFG, seed=0, static_decode=True, page_size=16, tracer=rec)
        if graphs:
            _emulate_graphs(llm)
        llm.generate(PROMPTS[:3], [SamplingParams(max_tokens=m) for m in MAX_TOKENS[:3]], use_tqdm=False)
        modes = {e.mode for e in rec.events if isinstance(e, GraphBucket)}
        return [(e.step, e.layer, e.phase, e.kernel, e.num_seqs, e.num_tokens)
                for e in rec.events if e.kind == "kernel_dispatch"], modes

    eager, eager_modes = dispatches(False)
    replayed, modes = dispatches(True)
    assert eager_modes == {"eager"} and modes == {"emulated_graph"}
    assert replayed == eager and len(eager) > 0


@pytest.mark.slow
def test_a_compiled_step_is_what_the_graph_captures():
    """``compile=True`` with capture: the warm-up records the dispatches, a second warm-up compiles the
    step (both put back), the graph captures the compiled step."""
    dyn_tokens, _, _ = _run(False, PROMPTS[:2], MAX_TOKENS[:2])
    llm = LLM(CFG, seed=0, static_decode=True, page_size=16)
    _emulate_graphs(llm, compile=True)
    tokens, _ = _run_recording(llm, PROMPTS[:2], MAX_TOKENS[:2])
    assert tokens == dyn_tokens
    buckets = llm.runner.static.buckets.values()
    assert buckets and all(b.compiled is not None and b.graph.step is b.compiled for b in buckets)
