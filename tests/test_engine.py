"""The serving engine gives exactly what the model gives alone, under any batching and memory pressure."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.engine import RequestError
from kda_ref.memory import PageKind, PoolExhausted, UnifiedMemoryPool
from kda_ref.model import HybridModel, RequestCache
from kda_ref.utils import cdiv

CFG = ModelConfig.micro()


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()


_REF_CACHE: dict = {}


@torch.no_grad()
def reference(model, prompt: list[int], n: int):
    """Greedy tokens and logits of ``prompt`` run alone: one prefill, then one token at a time."""
    key = (id(model), tuple(prompt), n)
    if key in _REF_CACHE:
        return _REF_CACHE[key]
    cache = RequestCache(model.config, 1, max_tokens=len(prompt) + n)
    b = cache.batch([len(prompt)])
    logits = [model(torch.tensor(prompt), b, cache.tensors, logits="last")[0]]
    cache.advance(b)
    toks = []
    for _ in range(n):
        toks.append(int(logits[-1].argmax()))
        b = cache.batch([1])
        logits.append(model(torch.tensor(toks[-1:]), b, cache.tensors, logits="last")[0])
        cache.advance(b)
    _REF_CACHE[key] = (toks, torch.stack(logits[:n]))
    return _REF_CACHE[key]


def prompts_of(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


def check_against_reference(llm, prompts, max_tokens, outs):
    for p, o in zip(prompts, outs):
        toks, logits = reference(llm.model, p, max_tokens)
        assert o.token_ids == toks
        torch.testing.assert_close(o.logits, logits, atol=1e-4, rtol=0)


STATE = UnifiedMemoryPool(CFG, 1 << 20).sizes.state_bytes
PAGE = UnifiedMemoryPool(CFG, 1 << 20).sizes.kv_page_bytes


@pytest.mark.parametrize(
    "max_batched,max_seqs,budget,max_tokens",
    [
        (512, 16, 64 << 20, 20),  # everything at once
        (7, 16, 64 << 20, 20),  # prefill split at odd places
        (64, 2, 64 << 20, 20),  # few sequences at a time
        (48, 4, 2 * STATE + 9 * PAGE, 40),  # tight: growing requests force preemption
    ],
)
def test_generate_matches_model_alone(model, max_batched, max_seqs, budget, max_tokens):
    prompts = prompts_of([5, 70, 33, 1, 90])
    llm = LLM(model, max_num_batched_tokens=max_batched, max_num_seqs=max_seqs, memory_budget_bytes=budget)
    outs = llm.generate(prompts, SamplingParams(max_tokens=max_tokens, return_logits=True, ignore_eos=True))
    check_against_reference(llm, prompts, max_tokens, outs)
    assert llm.pool.is_empty()
    s = llm.stats()
    assert s["prompt_tokens"] == sum(map(len, prompts))
    if budget < 1 << 20:
        assert s["preemptions"] > 0  # the tight budget really preempted
        assert s["computed_prompt_tokens"] > s["prompt_tokens"]  # and recomputed
    else:
        assert s["preemptions"] == 0 and s["computed_prompt_tokens"] == s["prompt_tokens"]


def test_aborts_do_not_disturb_other_requests(model):
    prompts = prompts_of([40, 12, 60, 25], seed=1)
    llm = LLM(model, max_num_batched_tokens=32)
    params = SamplingParams(max_tokens=15, return_logits=True, ignore_eos=True)
    ids = [llm.add_request(p, params) for p in prompts]
    outs, aborted = {}, {ids[1], ids[2]}
    for step in range(200):
        if step == 3:
            assert llm.abort(ids[1])  # mid-prefill or early decode
        if step == 6:
            assert llm.abort(ids[2])
        for o in llm.step():
            outs[o.req_id] = o
        if not llm.has_unfinished():
            break
    assert set(outs) == set(ids) - aborted
    check_against_reference(llm, [prompts[0], prompts[3]], 15, [outs[ids[0]], outs[ids[3]]])
    assert not llm.abort(ids[0])  # already finished
    assert llm.pool.is_empty()


STREAMS = given(
    lengths=st.lists(st.integers(1, 80), min_size=1, max_size=6),
    max_batched=st.integers(1, 100),
    max_seqs=st.integers(1, 6),
    extra_pages=st.integers(6, 40),
    max_tokens=st.integers(1, 12),
)
FIXTURE_OK = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def random_streams(model, lengths, max_batched, max_seqs, extra_pages, max_tokens):
    """Random batches under random token, sequence and memory budgets: every request that fits gives
    the reference's tokens and logits, and the pool ends empty. Five streams in the default run, 40
    under -m slow."""
    prompts = prompts_of(lengths, seed=sum(lengths))
    budget = 2 * STATE + extra_pages * PAGE
    llm = LLM(model, max_num_batched_tokens=max_batched, max_num_seqs=max_seqs, memory_budget_bytes=budget)
    # a request that cannot fit the whole budget is rejected up front; the rest must run
    fits = [p for p in prompts if STATE + cdiv(len(p) + max_tokens, 16) * PAGE <= budget]
    outs = llm.generate(fits, SamplingParams(max_tokens=max_tokens, return_logits=True, ignore_eos=True))
    check_against_reference(llm, fits, max_tokens, outs)
    assert llm.pool.is_empty()


test_random_streams = settings(max_examples=5, **FIXTURE_OK)(STREAMS(random_streams))
test_random_streams_wide = pytest.mark.slow(settings(max_examples=40, **FIXTURE_OK)(STREAMS(random_streams)))


def test_text_prompts_and_eos(model):
    llm = LLM(model)
    out = llm.generate(["Hello KDA", "你好"], SamplingParams(max_tokens=5))
    assert all(isinstance(o.text, str) for o in out)
    assert out[0].prompt_token_ids == [CFG.bos_token_id, *"Hello KDA".encode()]  # text gets BOS first
    # stop tokens end a request early with reason "stop"
    first = out[0].token_ids[0]
    o2 = llm.generate("Hello KDA", SamplingParams(max_tokens=5, stop_token_ids=(first,)))[0]
    assert o2.token_ids == [first] and o2.finish_reason == "stop"
    # the stop token stays in the ids and out of the text, as vLLM's detokenizer leaves it out
    third = out[0].token_ids[2]
    o3 = llm.generate("Hello KDA", SamplingParams(max_tokens=5, stop_token_ids=(third,)))[0]
    ids = o3.token_ids
    assert ids[-1] == third and o3.text == llm.tokenizer.decode(ids[:-1]) != llm.tokenizer.decode(ids)


def test_sampling_is_seeded(model):
    llm = LLM(model)
    p = SamplingParams(max_tokens=8, temperature=1.0, seed=7)
    a = llm.generate([[1, 2, 3]], p)[0].token_ids
    b = llm.generate([[1, 2, 3]], p)[0].token_ids
    c = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=8, temperature=1.0, seed=8))[0].token_ids
    assert a == b and a != c


def test_bad_input_is_rejected_and_in_flight_requests_continue(model):
    llm = LLM(model, memory_budget_bytes=STATE + 12 * PAGE, max_model_len=300)
    good = llm.add_request([1, 2, 3], SamplingParams(max_tokens=4, ignore_eos=True))
    llm.step()
    cases = [
        ([], SamplingParams(), "prompt"),
        ([1, 999], SamplingParams(), "prompt"),  # token id >= vocab
        (list(range(250)) + [1] * 40, SamplingParams(max_tokens=20), "prompt"),  # over the context limit
        ([1] * 200, SamplingParams(max_tokens=50), "prompt"),  # more than the whole budget (16 pages > 12)
        ("x", "not params", "params"),
    ]
    for prompt, params, name in cases:
        with pytest.raises(RequestError, match=rf"^{name}:"):
            llm.add_request(prompt, params)
    for kw, name in (({"max_tokens": 0}, "max_tokens"), ({"temperature": -1.0}, "temperature"),
                     ({"top_k": -2}, "top_k")):
        with pytest.raises(RequestError, match=rf"^{name}:"):
            SamplingParams(**kw)
    outs = []
    while llm.has_unfinished():
        outs += llm.step()
    assert [o.req_id for o in outs] == [good] and len(outs[0].token_ids) == 4
    assert llm.pool.is_empty()


def test_a_text_too_long_for_the_model_is_refused_before_it_is_encoded(model):
    """The one length check reads a text's characters before encoding it (a token is at most
    ``tokenizer.max_token_chars`` characters: one for the byte tokenizer) and the exact count after; and
    ``max_tokens`` that fills ``max_model_len`` alone is that field's fault. Nothing is queued."""
    llm = LLM(model, max_model_len=300)

    class Counting(type(llm.tokenizer)):
        calls = 0

        def encode(self, text, *a, **kw):
            Counting.calls += 1
            return super().encode(text, *a, **kw)

    llm.checker.use_tokenizer(Counting(), None)
    with pytest.raises(RequestError, match=r"^prompt: at least 291 prompt tokens \+ max_tokens 10 exceed"):
        llm.add_request("x" * 291, SamplingParams(max_tokens=10))
    assert Counting.calls == 0  # refused by its length, not its tokens
    with pytest.raises(RequestError, match=r"^max_tokens: 300 leaves no room for a prompt"):
        llm.add_request([1], SamplingParams(max_tokens=300))
    with pytest.raises(RequestError, match=r"^prompt: 291 prompt tokens \+ max_tokens 10 exceed"):
        llm.add_request("x" * 290, SamplingParams(max_tokens=10))  # fits by characters; BOS makes it 291 tokens
    assert Counting.calls == 1 and not llm.has_unfinished()
    assert llm.add_request("x" * 289, SamplingParams(max_tokens=10)) == 0


def test_engine_construction_errors(model):
    with pytest.raises(ValueError, match="^memory_budget_bytes:"):
        LLM(model, memory_budget_bytes=STATE)  # not even one state + one page
    with pytest.raises(ValueError, match="^prefix_cache:"):
        LLM(model, prefix_cache="lru-magic")
    with pytest.raises(ValueError, match="^max_num_seqs:"):
        LLM(model, max_num_seqs=0)


def test_pool_accounting_and_errors():
    pool = UnifiedMemoryPool(CFG, 2 * STATE + 4 * PAGE)
    s = pool.alloc(PageKind.KDA_STATE, 2, owner=1)
    assert 0 not in s  # slot 0 is PAD
    with pytest.raises(PoolExhausted):
        pool.alloc(PageKind.MLA_KV, 5, owner=1)
    before = dict(pool.used_bytes)
    with pytest.raises(PoolExhausted):
        pool.alloc(PageKind.KDA_STATE, 1, owner=2)
    assert pool.used_bytes == before
    pages = pool.alloc(PageKind.MLA_KV, 4, owner=1)
    assert pool.free_bytes == 0 and pool.ownership()["mla_kv"] == {p: 1 for p in pages}
    pool.tensors.recurrent[:, s[0]] = 3.0
    dst = s[1]
    pool.copy_state(s[0], dst)
    assert torch.equal(pool.tensors.recurrent[:, dst], pool.tensors.recurrent[:, s[0]])
    with pytest.raises(ValueError, match="^ids:"):
        pool.free(PageKind.MLA_KV, [pages[0], pages[0]])
    pool.free(PageKind.MLA_KV, pages)
    with pytest.raises(ValueError, match="^ids:"):
        pool.free(PageKind.MLA_KV, pages)  # double free
    with pytest.raises(ValueError, match="^ids: duplicates"):  # it moved one owner, then raised a KeyError
        pool.retag(PageKind.KDA_STATE, [s[0], s[0]], "cache")
    assert pool.ownership()["kda_state"] == {i: 1 for i in s}  # nothing moved
    pool.free(PageKind.KDA_STATE, s)
    assert pool.is_empty() and pool.peak_total_bytes == pool.budget_bytes
    # a freshly allocated slot is zeroed even if its previous owner left data behind
    (again,) = pool.alloc(PageKind.KDA_STATE, 1, owner=3)
    assert pool.tensors.recurrent[:, again].abs().sum() == 0


@pytest.mark.triton
@pytest.mark.slow  # the Triton model path in the default run: test_dispatcher.py
def test_generate_on_the_triton_backend_matches(model):
    tri = HybridModel(CFG, seed=0, backend="triton").eval()
    prompts = prompts_of([9, 20], seed=3)
    llm = LLM(tri, max_num_batched_tokens=16)
    outs = llm.generate(prompts, SamplingParams(max_tokens=4, return_logits=True, ignore_eos=True))
    for p, o in zip(prompts, outs):
        toks, logits = reference(model, p, 4)
        assert o.token_ids == toks
        torch.testing.assert_close(o.logits, logits, atol=1e-4, rtol=0)


def test_a_step_that_preempts_admits_nothing(model):
    """An older request grows into the room of a younger one, which is preempted; admitted again in the same
    step into the room it just gave up, it recomputed its first chunk and was preempted again at the next
    growth, step after step (34 preemptions, 1,398 prompt tokens computed for 220). As vLLM's scheduler
    does, a step that preempted admits nothing new; the answers stay the reference's."""
    from kda_ref.memory import UnifiedMemoryPool
    from kda_ref.trace import TraceRecorder

    sizes = UnifiedMemoryPool(CFG, 1 << 20).sizes
    rec = TraceRecorder()
    llm = LLM(model, memory_budget_bytes=2 * sizes.state_bytes + 12 * sizes.kv_page_bytes,
              max_num_batched_tokens=32, tracer=rec)
    prompts = prompts_of([120, 100], seed=3)
    llm.add_request(prompts[0], SamplingParams(max_tokens=40, ignore_eos=True))
    for _ in range(4):
        llm.step()
    llm.add_request(prompts[1], SamplingParams(max_tokens=4, ignore_eos=True))
    outs = []
    while llm.has_unfinished():
        outs += llm.step()
    preempted = {(e.step, e.req_id) for e in rec.events if getattr(e, "kind", "") == "preemption"}
    admitted = {(e.step, r) for e in rec.events if getattr(e, "op", None) == "alloc"
                and getattr(e, "page_kind", "") == "kda_state" for r in e.req_ids}
    assert preempted and not preempted & admitted, sorted(preempted & admitted)
    assert llm.stats()["computed_prompt_tokens"] < 1000
    for out, prompt, n in zip(sorted(outs, key=lambda o: o.req_id), prompts, (40, 4)):
        assert out.token_ids == reference(model, prompt, n)[0]
