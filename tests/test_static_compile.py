"""``LLM(static_decode=True, torch_compile=True)``: each static bucket's step compiled by ``torch.compile``
(inductor). The compiled engine decodes the dynamic engine's tokens (logits within float rounding),
its PAD rows still touch no unowned slot or page, the pools are written through the opaque
``kda_ref::scatter_rows_`` operator (never functionalized into a copy of a pool) and read through
``kda_ref::gather_rows`` (so a read is not moved past a later write), and bad arguments are refused
before anything is built.

Compiling costs tens of seconds per bucket on a 2-core machine (inductor builds C++ kernels; on a
fresh machine it first compiles test programs to learn the CPU's vector instructions, ~11 s): the
default run traces the operators' graph and compiles the engine's decode bucket with ``aot_eager``
(the same dynamo and AOTAutograd graphs, run by eager kernels); everything inductor builds -- the
small functions that once showed its pool bugs, the engine's decode bucket, a verify bucket -- is
compiled in the slow run."""

from __future__ import annotations

import functools
import re

import pytest
import torch
import torch.nn.functional as F

from kda_ref.speculative import SPEC_STATES, rollback_strategy
from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.engine.static_decode import cpp_compiler
from kda_ref.memory import PageKind
from kda_ref.ops.pad_rows import PAD_SLOT_ID, gather_rows, gather_rows_op, scatter_rows_, scatter_rows_op
from kda_ref.trace import GraphBucket, TraceRecorder

needs_compiler = pytest.mark.skipif(cpp_compiler() is None, reason="inductor needs a C++ compiler on the CPU")
PROMPTS = [[1, 5, 9, 33, 2, 7], list(range(4, 40)), [3, 2, 1]]  # 3 live rows -> bucket 4, one PAD row


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


# ---- the two operators ----------------------------------------------------------------------------
def test_the_operators_compute_what_the_eager_helpers_do():
    gen = torch.Generator().manual_seed(0)
    pool = torch.randn(6, 3, 2, generator=gen)
    pool[0] = 0.0
    idx = torch.tensor([4, PAD_SLOT_ID, 2])
    assert torch.equal(gather_rows_op(pool, idx), gather_rows(pool, idx))
    rows = torch.randn(3, 3, 2, generator=gen)
    a, b = pool.clone(), pool.clone()
    scatter_rows_(a, idx, rows.clone())
    scatter_rows_op(b, idx, rows)
    assert torch.equal(a, b)
    assert torch.equal(a[4], rows[0]) and torch.equal(a[2], rows[2]) and not a[0].any()
    assert torch.equal(a[[1, 3, 5]], pool[[1, 3, 5]])


def _conv_like(pool: torch.Tensor, idx: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The short conv's read-compute-write pattern on a layer's slice of a pool: the output depends on
    the gathered window, then the window slides and is written back."""
    view = pool[1]  # a layer's slice of a [layers, units, D, W-1] pool
    state = gather_rows(view, idx)  # [N, D, W-1]
    y = x * w[:, -1]
    for i in range(state.shape[-1]):
        y = y + state[:, :, i] * w[:, i]
    state = torch.cat([state[:, :, 1:], x[:, :, None]], dim=2)
    scatter_rows_(view, idx, state)
    return F.silu(y)


def test_the_traced_step_reads_and_writes_the_pool_only_through_the_operators():
    graphs = []

    def record(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    gen = torch.Generator().manual_seed(0)
    pool = torch.randn(3, 5, 4, 3, generator=gen)
    pool[:, 0] = 0.0
    idx, x, w = torch.tensor([3, 1, PAD_SLOT_ID]), torch.randn(3, 4, generator=gen), torch.randn(4, 4, generator=gen)
    expect_pool = pool.clone()
    expect = _conv_like(expect_pool, idx, x, w)
    torch._dynamo.reset()
    got = torch.compile(_conv_like, backend=record, fullgraph=True)(pool, idx, x, w)
    torch._dynamo.reset()
    assert torch.equal(got, expect) and torch.equal(pool, expect_pool)
    (graph,) = graphs
    assert "kda_ref.scatter_rows_" in graph and "kda_ref.gather_rows" in graph
    assert "index_copy" not in graph and "index_select" not in graph


@needs_compiler
@pytest.mark.slow  # compiles a whole step (~20 s without inductor's cache); the recurrences below compile small
def test_inductor_writes_the_pool_in_place_without_copying_it():
    """Functionalized, a plain ``index_copy_`` into a pool slice became a loop over the whole pool in the
    generated C++ (the ``[3, 13, 8, 3]`` pool: 936 elements, 312 per layer); the operator is one call."""
    from torch._inductor.utils import run_and_get_code

    gen = torch.Generator().manual_seed(2)
    pool = torch.randn(3, 13, 8, 3, generator=gen)
    pool[:, 0] = 0.0
    idx, x, w = torch.tensor([2, 4, 1, PAD_SLOT_ID]), torch.randn(4, 8, generator=gen), torch.randn(8, 4, generator=gen)
    torch._dynamo.reset()
    with torch.inference_mode():
        _, codes = run_and_get_code(torch.compile(_conv_like, fullgraph=True, dynamic=False), pool, idx, x, w)
    torch._dynamo.reset()
    code = "\n".join(codes)
    assert "kda_ref.scatter_rows_" in code and "kda_ref.gather_rows" in code
    loops = re.findall(r"<static_cast<int64_t>\((\d+)L\)", code)  # the generated kernels' loop bounds
    assert loops and "936" not in loops and "312" not in loops


# inductor's first compile on a fresh machine takes ~24 s: the default run checks that the traced graph
# reads and writes the pool through the operators (above), which is what keeps this order
@needs_compiler
@pytest.mark.slow
def test_inductor_reads_the_pool_before_the_write_that_follows():
    """The output reads the window gathered before the write; inductor once folded a plain
    ``index_select`` of the pool into the final kernel, scheduled after the write (wrong output)."""
    gen = torch.Generator().manual_seed(1)
    pool = torch.randn(3, 6, 8, 3, generator=gen)
    pool[:, 0] = 0.0
    idx, x, w = torch.tensor([2, 4, 1, PAD_SLOT_ID]), torch.randn(4, 8, generator=gen), torch.randn(8, 4, generator=gen)
    expect_pool = pool.clone()
    expect = _conv_like(expect_pool, idx, x, w)
    torch._dynamo.reset()
    with torch.inference_mode():
        got = torch.compile(_conv_like, fullgraph=True, dynamic=False)(pool, idx, x, w)
    torch._dynamo.reset()
    torch.testing.assert_close(got, expect, rtol=0, atol=1e-6)
    torch.testing.assert_close(pool, expect_pool, rtol=0, atol=1e-6)


# ---- the compiled form of the recurrence ----------------------------------------------------------
def _kda_inputs(N: int, L: int, H: int = 1, HV: int = 2, K: int = 8, V: int = 12, seed: int = 0):
    """Grouped value heads (HV = 2 read one query/key head) and V != K: a swapped axis would show."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (F.normalize(torch.randn(N, L, H, K, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(N, L, HV, V, generator=gen)
    g = -torch.rand(N, L, HV, K, generator=gen)  # log decay
    beta = torch.rand(N, L, HV, generator=gen)
    return q, k, v, g, beta


def test_the_compiled_verify_recurrence_matches_the_eager_one():
    """Traced, :func:`recurrent_kda_verify` runs its products-and-sums form (``_step_fused``): the same
    outputs and per-token states as the eager batched-matmul form (``aot_eager`` runs the traced graph
    without a C++ compiler)."""
    from kda_ref.ops.kda_recurrent import recurrent_kda_verify

    q, k, v, g, beta = _kda_inputs(3, 4)
    init = torch.randn(3, 2, 8, 12, generator=torch.Generator().manual_seed(1))
    o, steps = recurrent_kda_verify(q, k, v, g, beta, init.clone())
    assert o.shape == (3, 4, 2, 12) and steps.shape == (3, 4, 2, 8, 12)
    torch._dynamo.reset()
    traced = torch.compile(recurrent_kda_verify, backend="aot_eager", fullgraph=True)
    o2, steps2 = traced(q, k, v, g, beta, init.clone())
    o3, none = traced(q, k, v, g, beta, init.clone(), keep_step_states=False)  # ReplaySSM keeps no states
    torch._dynamo.reset()
    torch.testing.assert_close(o2, o, rtol=0, atol=1e-5)
    torch.testing.assert_close(steps2, steps, rtol=0, atol=1e-5)
    torch.testing.assert_close(o3, o, rtol=0, atol=1e-5)
    assert none is None


def test_the_compiled_decode_recurrence_matches_the_eager_one_with_pad_rows():
    from kda_ref.ops.kda_recurrent import recurrent_kda_decode_

    q, k, v, g, beta = (t[:, 0] for t in _kda_inputs(3, 1, seed=2))
    pool = torch.randn(6, 2, 8, 12, generator=torch.Generator().manual_seed(3))
    pool[0] = 0.0
    idx = torch.tensor([4, PAD_SLOT_ID, 2])
    eager_pool, traced_pool = pool.clone(), pool.clone()
    o = recurrent_kda_decode_(q, k, v, g, beta, eager_pool, idx, pad=True)
    torch._dynamo.reset()
    o2 = torch.compile(lambda p: recurrent_kda_decode_(q, k, v, g, beta, p, idx, pad=True), backend="aot_eager",
                       fullgraph=True)(traced_pool)
    torch._dynamo.reset()
    torch.testing.assert_close(o2, o, rtol=0, atol=1e-5)
    torch.testing.assert_close(traced_pool, eager_pool, rtol=0, atol=1e-5)
    assert not o2[1].any() and not traced_pool[0].any()  # the PAD row: zero output, the PAD unit still zero
    assert not torch.equal(traced_pool[4], pool[4])  # a live slot did advance


# ---- the compiled engine --------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def compiled_run(request):
    """One compiled engine: 3 requests (bucket 4 with a PAD row every step), sentinels planted in every
    unowned slot and page after the prefill, 12 decode steps (the bucket's first runs eagerly, the
    second compiles it). Returns the engine, its outputs, the trace and the sentinel bits before.

    Two compilers: ``aot_eager`` in the default run (dynamo's graph and AOTAutograd's functionalized
    one, run by the eager kernels: the engine's compile path and what functionalization does to the
    pools, in a few seconds) and inductor, what the engine uses, under -m slow (its C++ kernels take
    ~20 s to build on a fresh 2-core machine)."""
    if request.param == "inductor" and cpp_compiler() is None:
        pytest.skip("inductor needs a C++ compiler on the CPU")
    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as mp:  # the engine compiles its bucket while the steps run
        if request.param != "inductor":
            mp.setattr(torch, "compile", functools.partial(torch.compile, backend=request.param))
        run = _compiled_run()
    yield run
    torch._dynamo.reset()


def _compiled_run():
    rec = TraceRecorder()
    llm = LLM(ModelConfig.tiny(), seed=0, static_decode=True, torch_compile=True, page_size=16, tracer=rec)
    params = SamplingParams(max_tokens=13, ignore_eos=True, return_logits=True)
    ids = [llm.add_request(p, params) for p in PROMPTS]
    llm.step()  # the prefill
    pool, t = llm.pool, llm.pool.tensors
    free_slots = [i for i in range(1, t.num_slots) if pool.owner_of(PageKind.KDA_STATE, i) is None]
    free_pages = [i for i in range(1, t.num_pages) if pool.owner_of(PageKind.MLA_KV, i) is None]
    gen = torch.Generator().manual_seed(1)
    for i in free_slots:  # NaN in some units, random bits in others
        t.recurrent[:, i] = float("nan") if i % 2 == 0 else torch.randn(t.recurrent[:, i].shape, generator=gen)
        t.conv[:, i] = float("nan") if i % 3 == 0 else torch.randn(t.conv[:, i].shape, generator=gen)
    for i in free_pages:
        t.kv[:, i] = float("nan") if i % 2 == 0 else torch.randn(t.kv[:, i].shape, generator=gen)
    before = (free_slots, free_pages, _bits(t.recurrent[:, free_slots]).clone(), _bits(t.conv[:, free_slots]).clone(),
              _bits(t.kv[:, free_pages]).clone())
    outs = {}
    from torch._dynamo.utils import counters

    graphs_before = counters["stats"]["unique_graphs"]
    while llm.has_unfinished():
        for o in llm.step():
            outs[o.req_id] = o
    llm.graphs_compiled = counters["stats"]["unique_graphs"] - graphs_before
    return llm, [outs[i] for i in ids], rec, before


def test_compiled_static_decode_gives_the_dynamic_tokens_and_logits(compiled_run):
    _, outs, _, _ = compiled_run
    dyn = LLM(ModelConfig.tiny(), seed=0, page_size=16).generate(
        PROMPTS, SamplingParams(max_tokens=13, ignore_eos=True, return_logits=True), use_tqdm=False)
    for a, b in zip(outs, dyn):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, rtol=0, atol=1e-4)


def test_the_bucket_runs_eagerly_once_then_compiles_then_runs_compiled(compiled_run):
    llm, _, rec, _ = compiled_run
    ev = [e for e in rec.events if isinstance(e, GraphBucket)]
    assert [e.mode for e in ev[:3]] == ["eager", "compiled", "compiled"]
    assert [e.captured for e in ev[:3]] == [False, True, False]
    assert all(e.mode == "compiled" and not e.captured for e in ev[2:])
    assert len(ev) == 12 and all(e.bucket == 4 and e.num_seqs == 3 for e in ev)
    (b,) = llm.runner.static.buckets.values()
    assert b.compiled is not None and b.compile_s > 0 and b.runs == 12
    assert llm.graphs_compiled == 1  # one graph, reused by the ten steps after it: no recompilation
    # a compiled step calls no Python hook: its kernel dispatches are the ones recorded eagerly, re-emitted
    per_step = {}
    for e in rec.events:
        if e.kind == "kernel_dispatch" and e.step in {g.step for g in ev}:
            per_step.setdefault(e.step, []).append((e.layer, e.kernel, e.num_seqs))
    first = per_step[ev[0].step]
    assert first and all(per_step[g.step] == first for g in ev)


def test_compiled_pad_rows_leave_every_unowned_unit_bit_for_bit(compiled_run):
    llm, _, _, (free_slots, free_pages, rec0, conv0, kv0) = compiled_run
    t = llm.pool.tensors
    assert torch.equal(_bits(t.recurrent[:, free_slots]), rec0)
    assert torch.equal(_bits(t.conv[:, free_slots]), conv0)
    # pages the requests took after the prefill were written legitimately; the rest keep their bits
    never = [i for i in free_pages if i >= llm.pool._free[PageKind.MLA_KV].next_fresh]
    assert never and torch.equal(_bits(t.kv[:, never]), kv0[:, [free_pages.index(i) for i in never]])
    for pool in (t.recurrent, t.conv, t.kv):
        assert not pool[:, 0].any()  # the PAD unit still reads as zeros


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("spec_state", SPEC_STATES)
def test_a_compiled_verify_bucket_keeps_the_greedy_tokens(spec_state):
    """Compiled verify buckets: ``per_step`` returns the per-token states, ``slots`` writes them into the
    requests' slots inside the compiled step (through ``kda_ref::scatter_rows_``), ``replay`` returns the
    records, which a compiled fold bucket folds into the slots."""
    from kda_ref.model import HybridModel

    prompts = [[5, 6, 7, 8] * 6, [1, 2, 3] * 5, [9, 9, 4, 9, 9, 4, 9, 9]]
    params = SamplingParams(max_tokens=16, ignore_eos=True, return_logits=True)

    torch._dynamo.reset()
    rec = TraceRecorder()
    llm = LLM(ModelConfig.tiny(), seed=0, speculative="draft", num_speculative_tokens=3, spec_state=spec_state,
              draft_model=HybridModel(ModelConfig.tiny(), seed=1), static_decode=True, torch_compile=True, tracer=rec)
    compiled = llm.generate(prompts, params, use_tqdm=False)
    folds = [b for key, b in llm.runner.static.buckets.items() if key[3] == "fold"]
    assert bool(folds) == (not rollback_strategy(spec_state).record.keeps_step_states) and all(b.compiled is not None for b in folds)
    torch._dynamo.reset()
    plain = LLM(ModelConfig.tiny(), seed=0).generate(prompts, params, use_tqdm=False)
    for a, b in zip(compiled, plain):
        assert a.token_ids == b.token_ids
    assert any(isinstance(e, GraphBucket) and e.tokens == 4 and e.mode == "compiled" for e in rec.events)


# ---- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_torch_compile_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="torch_compile"):
        LLM(ModelConfig.tiny(), static_decode=True, torch_compile=bad)


def _no_pool(monkeypatch) -> list:
    from kda_ref.engine import llm as llm_mod

    built = []
    monkeypatch.setattr(llm_mod, "UnifiedMemoryPool", lambda *a, **k: built.append(1))
    return built


def test_torch_compile_needs_static_decode(monkeypatch):
    built = _no_pool(monkeypatch)
    with pytest.raises(ValueError, match="torch_compile.*static_decode=True"):
        LLM(ModelConfig.tiny(), torch_compile=True)
    assert not built


def test_torch_compile_without_a_cpp_compiler_is_refused_before_anything_is_built(monkeypatch):
    from kda_ref.engine import static_decode as sd_mod

    built = _no_pool(monkeypatch)
    monkeypatch.setattr(sd_mod, "cpp_compiler", lambda: None)
    with pytest.raises(ValueError, match="torch_compile.*C\\+\\+ compiler"):
        LLM(ModelConfig.tiny(), static_decode=True, torch_compile=True)
    assert not built


def test_cpp_compiler_is_the_one_inductor_would_call(monkeypatch):
    import shutil

    from torch._inductor import config

    from kda_ref.engine import static_decode as sd

    monkeypatch.setattr(shutil, "which", lambda name: f"/opt/{name}" if name == "my-cxx" else None)
    with config.patch({"cpp.cxx": (None, "my-cxx")}):  # config.patch restores inductor's config object
        assert sd.cpp_compiler() == "/opt/my-cxx"
    with config.patch({"cpp.cxx": (None, "g++")}):  # g++ is what inductor tries; another compiler is no help
        assert sd.cpp_compiler() is None


def test_a_bucket_whose_compilation_fails_runs_eagerly_with_a_warning(monkeypatch, caplog):
    from kda_ref.engine import static_decode as sd

    def broken_compile(fn, **kw):
        def run():
            raise torch._inductor.exc.InvalidCxxCompiler()  # what inductor raises without a usable compiler
        return run

    from kda_ref.engine import static_decode as sd_mod

    monkeypatch.setattr(sd_mod, "cpp_compiler", lambda: "/usr/bin/true")  # whatever this machine has
    monkeypatch.setattr(sd.torch, "compile", broken_compile)
    rec = TraceRecorder()
    llm = LLM(ModelConfig.tiny(), seed=0, static_decode=True, torch_compile=True, page_size=16, tracer=rec)
    with caplog.at_level("WARNING", logger="kda_ref"):
        outs = llm.generate(PROMPTS, SamplingParams(max_tokens=6, ignore_eos=True), use_tqdm=False)
    dyn = LLM(ModelConfig.tiny(), seed=0, page_size=16).generate(PROMPTS, SamplingParams(max_tokens=6, ignore_eos=True),
                                                                 use_tqdm=False)
    assert [o.token_ids for o in outs] == [o.token_ids for o in dyn]
    (b,) = llm.runner.static.buckets.values()
    assert b.compile_failed and b.compiled is None and b.runs == 5
    assert any("failed; it runs eagerly" in r.getMessage() and "InvalidCxxCompiler" in r.getMessage()
               for r in caplog.records)
    assert [e.mode for e in rec.events if isinstance(e, GraphBucket)] == ["eager"] * 5


def test_an_error_while_the_compiled_step_runs_is_not_taken_for_a_compile_failure(monkeypatch):
    """Only compiler errors fall back to eager: an error raised while the graph runs may come after some
    pools were written, and running the step again eagerly would apply it twice."""
    from kda_ref.engine import static_decode as sd
    sd_mod = sd

    def failing_compile(fn, **kw):
        def run():
            raise RuntimeError("a kernel failed mid-step")
        return run

    monkeypatch.setattr(sd_mod, "cpp_compiler", lambda: "/usr/bin/true")
    llm = LLM(ModelConfig.tiny(), seed=0, static_decode=True, torch_compile=True, page_size=16)
    for p in PROMPTS:
        llm.add_request(p, SamplingParams(max_tokens=6, ignore_eos=True))
    llm.step()  # the prefill
    llm.step()  # the bucket's eager first run
    (b,) = llm.runner.static.buckets.values()
    monkeypatch.setattr(sd.torch, "compile", failing_compile)
    with pytest.raises(RuntimeError, match="mid-step"):
        llm.runner.static._compile(b, llm.model.dispatcher)
    assert not b.compile_failed and b.compiled is None


def test_the_compile_options_survive_compiling(compiled_run):
    """``torch.compile`` pops ``guard_filter_fn`` from the options it is given: a bucket compiles with a
    copy, so every later bucket skips the module guards too."""
    from kda_ref.engine.static_decode import COMPILE_OPTIONS

    assert compiled_run[0].runner.static.buckets  # a bucket compiled in this process
    assert "guard_filter_fn" in COMPILE_OPTIONS and COMPILE_OPTIONS["size_asserts"] is False
