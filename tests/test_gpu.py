"""What only a GPU can show (skipped without CUDA; ``scripts/gpu_check.py`` runs them on the first GPU lent):

* real CUDA graphs of the static decode and verify buckets (every ``spec_state``) replay the eager
  engine's tokens and logits, and PAD rows leave every unowned pool unit bit for bit;
* context-parallel prefill and a prefill -> decode handoff over nccl, one process per GPU, against the
  single-process answers (NCCL refuses two ranks on one device: "invalid usage", seen on one H200 on
  2026-12-04, so these need two GPUs).

On the CPU the same paths are tested against an emulation of CUDA graphs' rules
(``tests/test_static_decode.py``) and over gloo (``tests/test_context_parallel.py``,
``tests/test_disagg.py``).
"""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from kda_ref.speculative import SPEC_STATES
from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.model import HybridModel

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PROMPTS = [[256, *b"a b c a b c a b c a b".ljust(24)], [256, *b"the state of the state".ljust(30)], [256, 7, 8, 9]]
PARAMS = SamplingParams(max_tokens=24, ignore_eos=True, return_logits=True)


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.tiny(), seed=0).eval().cuda()


@pytest.mark.parametrize("spec", [None, *SPEC_STATES])
def test_captured_graphs_replay_the_eager_tokens_and_logits(model, spec):
    kw = {} if spec is None else dict(speculative="ngram", num_speculative_tokens=3, spec_state=spec)
    eager = LLM(model, **kw).generate(PROMPTS, PARAMS)
    llm = LLM(model, static_decode=True, **kw)
    graphs = llm.generate(PROMPTS, PARAMS)
    for a, b in zip(eager, graphs):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-3, rtol=0)  # [generated, vocab]
    st = llm.runner.static
    assert st.capture and st.buckets and all(b.graph is not None for b in st.buckets.values())
    assert llm.pool.is_empty()


def test_pad_rows_of_captured_buckets_leave_unowned_units(model):
    """Three requests in a bucket of four: the PAD row reads the PAD unit and writes nothing live; every
    slot and page nobody owns keeps its (planted) bits through every replay."""
    llm = LLM(model, static_decode=True)
    t = llm.pool.tensors
    g = torch.Generator(device="cuda").manual_seed(0)
    for x in (t.recurrent, t.conv, t.kv):
        x.copy_(torch.randn(x.shape, generator=g, device="cuda", dtype=x.dtype))
    before = [x.clone() for x in (t.recurrent, t.conv, t.kv)]
    ids = [llm.add_request(p, SamplingParams(max_tokens=12, ignore_eos=True)) for p in PROMPTS]
    used_slots, used_pages = set(), set()
    while llm.has_unfinished():
        for rid in ids:
            r = llm.request(rid)
            if r is None:  # finished and delivered: the engine keeps nothing of it
                continue
            if r.slot is not None:
                used_slots.add(r.slot)
            used_pages.update(r.pages)
        llm.step()
    free_slots = [s for s in range(1, t.recurrent.shape[1]) if s not in used_slots]
    free_pages = [p for p in range(1, t.kv.shape[1]) if p not in used_pages]
    assert free_slots and free_pages
    for now, old in zip((t.recurrent, t.conv), before[:2]):
        assert torch.equal(now[:, free_slots], old[:, free_slots])
    assert torch.equal(t.kv[:, free_pages], before[2][:, free_pages])


TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="nccl runs one rank per GPU: needs two")


@TWO_GPUS
def test_context_parallel_over_nccl(model):
    """Two ranks, one GPU each, against the single-process prefill."""
    from kda_ref.model import RequestCache
    from kda_ref.context_parallel import context_parallel_prefill

    prompts = [list(range(1, 150)), [5, 6, 7]]
    res = context_parallel_prefill(model, prompts, world_size=2, backend="nccl", timeout=60)
    cache = RequestCache(model.config, 2, max_tokens=256, page_size=16, device="cuda")
    b = cache.batch([len(p) for p in prompts])
    with torch.no_grad():
        want = model(torch.tensor([x for p in prompts for x in p], device="cuda"), b, cache.tensors, logits="last")
    torch.testing.assert_close(res.logits, want.cpu(), atol=1e-3, rtol=0)
    assert not multiprocessing.active_children()


@TWO_GPUS
def test_a_handoff_over_nccl_gives_the_single_engine_tokens(model):
    from kda_ref.disagg import DisaggregatedLLM

    want = LLM(model).generate(PROMPTS, PARAMS)
    with DisaggregatedLLM(model, transfer="dist", timeout=60) as d:
        got = d.generate(PROMPTS, PARAMS)
        assert d.counters["handoffs"] >= 1
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert not multiprocessing.active_children()
