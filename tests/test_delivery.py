"""Every finished request is delivered exactly once, whichever call drives the step, and then the engine
forgets it: a server that runs for days keeps no per-request memory."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.model import HybridModel

P = SamplingParams(max_tokens=3, ignore_eos=True)


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0).eval()


def test_a_request_that_finishes_inside_another_generate_is_delivered_by_the_next_step(model):
    llm = LLM(model)
    a = llm.add_request([1, 2, 3], P)
    (b,) = llm.generate([[4, 5, 6, 7]], SamplingParams(max_tokens=8, ignore_eos=True))  # drives a to its end
    assert llm.request(a) is not None and llm.has_unfinished()  # finished, waiting for its caller
    got = llm.step()
    assert [o.req_id for o in got] == [a] and got[0].finish_reason == "length" and len(got[0].token_ids) == 3
    assert llm.request(a) is None and llm.request(b.req_id) is None  # delivered: forgotten
    assert llm.step() == [] and not llm.has_unfinished()  # exactly once


def test_in_the_other_order_a_step_loop_never_sees_generates_requests(model):
    llm = LLM(model)
    a = llm.add_request([1, 2, 3], SamplingParams(max_tokens=12, ignore_eos=True))
    llm.step()  # a admitted
    (b,) = llm.generate([[4, 5]], P)  # b is generate's alone, even though a runs in the same steps
    seen = []
    while llm.has_unfinished():
        seen += llm.step()
    assert [o.req_id for o in seen] == [a] and b.req_id != a and len(b.token_ids) == 3
    assert llm.request(a) is None


def test_an_aborted_request_is_forgotten_and_not_delivered(model):
    llm = LLM(model)
    a = llm.add_request([1, 2, 3], SamplingParams(max_tokens=10, ignore_eos=True))
    llm.step()
    assert llm.abort(a) and llm.request(a) is None and not llm.abort(a)
    assert llm.step() == [] and not llm.has_unfinished() and llm.pool.is_empty()


def _serve(llm, n: int, batch: int = 200) -> None:
    for i in range(0, n, batch):
        for k in range(batch):
            llm.add_request([1 + (i + k) % 200, 2], SamplingParams(max_tokens=1))
        while llm.has_unfinished():
            llm.step()


@pytest.mark.parametrize("requests", [pytest.param(300, id="300"), pytest.param(10_000, id="10k", marks=pytest.mark.slow)])
def test_memory_stays_flat_over_many_requests(model, requests):
    """Python heap held after serving ``requests`` short requests, measured with tracemalloc after a warm-up
    of the same traffic (dicts and the allocator reach their high-water marks there; tracing starts before it): it does not grow with
    the number served. A kept Request costs ~2 KB: 300 of them would be ~600 KB."""
    llm = LLM(model, max_num_seqs=64, max_num_batched_tokens=512, prefix_cache="radix")
    tracemalloc.start()  # before the warm-up: what it allocates and later frees is traced both ways
    try:
        _serve(llm, 300)
        llm.flush_cache()
        gc.collect()
        before = tracemalloc.take_snapshot()
        _serve(llm, requests)
        llm.flush_cache()
        gc.collect()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 32 * 1024, f"{grown} B kept after {requests} requests"
    assert llm.request(300 + requests - 1) is None and llm.pool.is_empty()
