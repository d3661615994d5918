"""The process mode's request check (:func:`kda_ref.disagg.request_checker`): the parent of the worker
processes refuses what ``LLM.check_request`` refuses, with the same typed error and message, from the
model's configuration and the engine configuration -- the peak memory against the budget included --
with no model and no pool in the parent."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from kda_ref import LLM, EngineConfig, ModelConfig, SamplingParams
from kda_ref.disagg import DisaggregatedLLM, DisaggregationError, RequestChecker, request_checker
from kda_ref.engine import RequestError

MAX_LEN = 64
CFG = EngineConfig.from_kwargs(seed=0, max_model_len=MAX_LEN)
GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


class _Tok:
    """A tokenizer whose ``encode`` returns ``ids`` whatever the text."""

    def __init__(self, ids):
        self.ids = ids

    def encode(self, text):
        return list(self.ids)

    def decode(self, ids):
        return "".join(map(chr, ids))


@pytest.fixture(scope="module")
def engine():
    return LLM(ModelConfig.micro(), config=CFG)


def _checker(llm: LLM) -> RequestChecker:
    """The checker the process mode builds for ``llm``'s model and configuration, told its tokenizer."""
    c = request_checker(ModelConfig.micro(), CFG)
    assert not c.tokenizer_known  # "auto": the engines pick it, the workers report it
    c.use_tokenizer(llm.tokenizer, llm.tokenizer_note)
    return c


def _outcome(check, prompt, params):
    try:
        ids, text, sp = check(prompt, params)
    except RequestError as err:
        return "refused", str(err)
    return "ok", ids, text, sp


V = ModelConfig.micro().vocab_size
REQUESTS = [  # (prompt, params, what the engine says)
    ([1, 2, 3], GREEDY, "ok"),
    ((1, 2, 3), None, "ok"),
    (torch.tensor([5, 6, 7]), GREEDY, "ok"),
    (torch.tensor([5, 6, 7], dtype=torch.int32), GREEDY, "ok"),
    ("hello", GREEDY, "ok"),  # BOS first
    ("你好", GREEDY, "ok"),
    ([1] * 10, SamplingParams(max_tokens=MAX_LEN - 10), "ok"),  # exactly max_model_len
    ([V - 1, 0], GREEDY, "ok"),
    ([1, 2], "greedy", "refused"),
    ([1, 2], {"max_tokens": 3}, "refused"),
    ("", GREEDY, "refused"),
    ([], GREEDY, "refused"),
    (5, GREEDY, "refused"),
    ({1, 2}, GREEDY, "refused"),
    (b"hello", GREEDY, "refused"),
    ([1.5], GREEDY, "refused"),
    ([True, 2], GREEDY, "refused"),
    ([1, "2"], GREEDY, "refused"),
    ([-1], GREEDY, "refused"),
    ([1, V], GREEDY, "refused"),
    (torch.tensor([[1, 2]]), GREEDY, "refused"),
    (torch.tensor([1.0]), GREEDY, "refused"),
    (torch.tensor([True]), GREEDY, "refused"),
    ("\ud800", GREEDY, "refused"),  # a lone surrogate: the byte tokenizer cannot encode it
    ([1] * 10, SamplingParams(max_tokens=MAX_LEN - 9), "refused"),  # one past max_model_len
    ("x" * MAX_LEN, GREEDY, "refused"),
    ([1, None], GREEDY, "refused"),  # None is not a token id (not "no bad id found")
]


@pytest.mark.parametrize("prompt,params,want", REQUESTS)
def test_the_checker_agrees_with_the_engine_on_every_request(engine, prompt, params, want):
    expected = _outcome(engine.check_request, prompt, params)
    assert expected[0] == want
    assert _outcome(_checker(engine).check_request, prompt, params) == expected


@pytest.mark.parametrize("tokenizer,prompt", [(None, "hello"), (_Tok([1.0]), "hello"), (_Tok([True]), "hello"),
                                              (_Tok([]), "hello"), (_Tok([3, V]), "hello"), (_Tok([3, 4]), "hi")])
def test_the_checker_agrees_with_the_engine_on_the_tokenizer_given(tokenizer, prompt):
    llm = LLM(ModelConfig.micro(), config=CFG, tokenizer=tokenizer)
    checker = request_checker(ModelConfig.micro(), CFG, tokenizer)
    assert checker.tokenizer_known
    assert _outcome(checker.check_request, prompt, GREEDY) == _outcome(llm.check_request, prompt, GREEDY)


@pytest.mark.parametrize("kw", [dict(), dict(prefix_cache="radix", checkpoint_policy="sglang"),
                                dict(prefix_cache="block", retention_interval=0),
                                dict(speculative="ngram", spec_state="slots", num_speculative_tokens=3)])
def test_the_peak_memory_is_checked_from_the_configuration_as_the_engine_checks_it(kw):
    """Over the budget but within every other limit: refused by both with the same message (the prefix
    cache's pinned checkpoints and the speculative slots counted from the configuration alone)."""
    cfg = EngineConfig.from_kwargs(seed=0, memory_budget_bytes=1 << 20, **kw)
    llm = LLM(ModelConfig.micro(), config=cfg)
    checker = request_checker(ModelConfig.micro(), cfg)
    checker.use_tokenizer(llm.tokenizer, llm.tokenizer_note)
    for n in (20, 2000, 8000):
        params = SamplingParams(max_tokens=n)
        assert _outcome(checker.check_request, [1] * 20, params) == _outcome(llm.check_request, [1] * 20, params)
    assert _outcome(checker.check_request, [1] * 20, SamplingParams(max_tokens=8000))[0] == "refused"


@pytest.mark.parametrize("model,kw", [
    (5, {}),
    ("/nonexistent/checkpoint", {}),
    (ModelConfig.kimi_linear_48b(), {}),  # larger than this machine: refused from its numbers, nothing built
    (ModelConfig.micro(), dict(prefix_cache="radix", checkpoint_policy="every_n", checkpoint_interval=100)),
    (ModelConfig.micro(), dict(static_decode=True, backend="triton")),
    (ModelConfig.micro(), dict(tokenizer=object())),
])
def test_the_process_mode_refuses_a_bad_argument_as_the_engine_does_without_building_one(model, kw):
    with pytest.raises(Exception) as want:
        LLM(model, **kw)
    with pytest.raises(type(want.value)) as got:
        DisaggregatedLLM(model, transfer="dist", **kw)
    assert str(got.value) == str(want.value)


def test_a_built_models_chunk_size_is_checked_against_the_configuration():
    model = LLM(ModelConfig.micro()).model
    with pytest.raises(ValueError) as want:
        LLM(model, chunk_size=32)
    with pytest.raises(ValueError) as got:
        DisaggregatedLLM(model, transfer="dist", chunk_size=32)
    assert str(got.value) == str(want.value)


def test_a_budget_that_holds_no_request_fails_the_workers_start():
    """The engines' own arithmetic: their build refuses it, and the start names it."""
    d = DisaggregatedLLM(ModelConfig.micro(), transfer="dist", timeout=10, memory_budget_bytes=1000)
    with pytest.raises(DisaggregationError, match="memory_budget_bytes"):
        d.start()
    d.close()
    assert not multiprocessing.active_children()


def test_the_parent_refuses_a_request_over_the_budget_without_an_engine(monkeypatch):
    """The parent builds no model and no pool (both forbidden here once the reference ran); a bad request
    -- a token outside the vocabulary, a peak over the budget -- is refused before a worker starts, with
    the engine's message; a text prompt starts them for their tokenizer; the others run as one engine
    gives them."""
    from kda_ref.memory import UnifiedMemoryPool
    from kda_ref.model import HybridModel

    kw = dict(seed=0, memory_budget_bytes=1 << 20)
    single = LLM(ModelConfig.micro(), **kw)
    ids = torch.randint(0, 256, (30,), generator=torch.Generator().manual_seed(3)).tolist()
    big = SamplingParams(max_tokens=8000)
    want = single.generate(["hello", ids], GREEDY, use_tqdm=False)
    with pytest.raises(RequestError) as refusal:
        single.check_request(ids, big)

    def no_engine_here(*a, **k):
        raise AssertionError("the parent built a model or a pool")

    monkeypatch.setattr(HybridModel, "__init__", no_engine_here)  # this process only: the workers fork from
    monkeypatch.setattr(UnifiedMemoryPool, "__init__", no_engine_here)  # a server that imported them unpatched
    with DisaggregatedLLM(ModelConfig.micro(), transfer="dist", timeout=30, **kw) as d:
        assert isinstance(d.checker, RequestChecker) and d.prefills == d.decodes == []
        with pytest.raises(RequestError, match="outside the vocabulary"):
            d.add_request([V], GREEDY)
        with pytest.raises(RequestError) as over:
            d.add_request(ids, big)
        assert str(over.value) == str(refusal.value)
        assert d._cluster is None  # refused in this process, nothing started
        got = d.generate(["hello", ids], [GREEDY, GREEDY])
        assert [o.token_ids for o in got] == [w.token_ids for w in want] and got[0].text == want[0].text
        assert d.counters["handoffs"] == 2 and d.router.prefill_load == [0] and d.router.decode_load == [0]
    assert d.worker_pools_empty == {0: True, 1: True}
    assert not multiprocessing.active_children()
