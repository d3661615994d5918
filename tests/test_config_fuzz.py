"""Every setting and sampling parameter, fuzzed with wrong types and extreme values: an accepted value runs
a request to completion, a refused one is a ``ValueError`` naming its argument, raised before any pool is
allocated or any request queued."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kda_ref import LLM, EngineConfig, ModelConfig, SamplingParams
from kda_ref.cache.options import CACHE_OPTION_TYPES, option_names
from kda_ref.engine import RequestError
from kda_ref.engine.config import flat_keywords
from kda_ref.model import HybridModel

CFG = ModelConfig.micro()
SPEC_KEYS = ("num_speculative_tokens", "spec_state", "spec_tree_width", "prompt_lookup_min", "prompt_lookup_max",
             "draft_model")
# a value too large for the machine is refused by design; the fuzz keeps budgets to what runs in a test
MAX_BUDGET = 1 << 26

WILD = st.one_of(
    st.integers(-2**70, 2**70), st.sampled_from([0, 1, 2, 16, 64, 2**31, 2**63, -1]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, 1e300, 0.5, 1e-12]),
    st.booleans(), st.none(), st.text(max_size=4), st.sampled_from(["radix", "block", "none", "ngram", "slots",
                                                                   "sglang", "marconi", "threads", "nccl", ""]),
    st.lists(st.integers(-3, 300), max_size=3), st.just(object()),
)


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0, chunk_size=16).eval()


def _companions(key: str) -> dict:
    """What ``key`` is an option of: the prefix cache or the speculation it needs beside it."""
    for kind, names in ((k, option_names(k)) for k in CACHE_OPTION_TYPES):
        if key in names:
            return {"prefix_cache": kind}
    if key == "draft_model":
        return {"speculative": "draft"}
    return {"speculative": "ngram"} if key in SPEC_KEYS else {}


def _named(err: Exception, kw: dict) -> bool:
    """The message starts with an argument given (``key: ...``), the cache's ``options:``, or another setting
    that the given one contradicts, naming the given one (``block_size: ... multiple of hash_unit=3``)."""
    msg = str(err)
    head = msg.split(":", 1)[0]
    return head in kw or head == "options" or (head in flat_keywords() and any(k in msg for k in kw))


def any_setting_is_refused_by_name_or_runs(model, key, value):
    if key == "memory_budget_bytes" and isinstance(value, int) and not isinstance(value, bool) and value > MAX_BUDGET:
        value = MAX_BUDGET
    kw = {**_companions(key), key: value}
    try:
        cfg = EngineConfig.from_kwargs(**kw)
        llm = LLM(model, config=cfg)
    except ValueError as e:
        assert _named(e, kw), f"{kw}: {e}"
        return
    n = min(4, llm.max_model_len - 1)  # a request every accepted max_model_len can run
    m = min(3, llm.max_model_len - n)
    out = llm.generate([[3, 4, 5, 6][:n]], SamplingParams(max_tokens=m, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == m, (kw, out.error)
    llm.flush_cache()
    assert llm.pool.is_empty()


SAMPLING = ("max_tokens", "temperature", "top_k", "seed", "stop_token_ids", "ignore_eos", "return_logits")


def any_sampling_parameter_is_refused_by_name_or_runs(model, key, value, engine_seed):
    if key == "max_tokens" and isinstance(value, int) and value > 8:
        value = 8  # a long answer is valid; the test keeps it short
    try:
        params = SamplingParams(**{key: value})
    except RequestError as e:
        assert str(e).startswith(f"{key}: "), e
        return
    llm = LLM(model, seed=engine_seed)
    out = llm.generate([[3, 4, 5, 6]], params)[0]
    assert out.finish_reason in ("length", "stop") and 1 <= len(out.token_ids) <= params.max_tokens, out.error
    assert llm.pool.is_empty()


FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SETTINGS = given(key=st.sampled_from(flat_keywords()), value=WILD)
PARAMS = given(key=st.sampled_from(SAMPLING), value=WILD, engine_seed=st.sampled_from([0, 2**45, -(2**63), 2**64 - 1]))
test_any_setting_is_refused_by_name_or_runs = settings(max_examples=60, **FUZZ)(
    SETTINGS(any_setting_is_refused_by_name_or_runs))
test_any_setting_is_refused_by_name_or_runs_wide = pytest.mark.slow(settings(max_examples=1500, **FUZZ)(
    SETTINGS(any_setting_is_refused_by_name_or_runs)))
test_any_sampling_parameter_is_refused_by_name_or_runs = settings(max_examples=60, **FUZZ)(
    PARAMS(any_sampling_parameter_is_refused_by_name_or_runs))
test_any_sampling_parameter_is_refused_by_name_or_runs_wide = pytest.mark.slow(settings(max_examples=1500, **FUZZ)(
    PARAMS(any_sampling_parameter_is_refused_by_name_or_runs)))


def test_the_extremes_named_by_users():
    """The values reported refused too late, each named now before anything is built."""
    cases = [
        (dict(chunk_size=2**20), "chunk_size"), (dict(chunk_size=2**40), "chunk_size"),
        (dict(context_parallel_size=2, cp_timeout=1e10), "cp_timeout"),
        (dict(speculative="draft", draft_model=0), "draft_model"), (dict(speculative="draft", draft_model=False),
                                                                     "draft_model"),
        (dict(speculative="draft", draft_model=""), "draft_model"), (dict(speculative="ngram", spec_state=[]), "spec_state"),
        (dict(prefix_cache="block", eviction="marconi", marconi_alpha=-1), "marconi_alpha"),
        (dict(prefix_cache="radix", checkpoint_interval="1"), "checkpoint_interval"),
        (dict(prefix_cache="radix", checkpoint_interval=math.nan), "checkpoint_interval"),
        (dict(prefix_cache="radix", checkpoint_interval=-1), "checkpoint_interval"),
        (dict(prefix_cache="radix", checkpoint_interval=[]), "checkpoint_interval"),
    ]
    for kw, name in cases:
        with pytest.raises(ValueError, match=f"^{name}: "):
            EngineConfig.from_kwargs(**kw)
    with pytest.raises(RequestError, match="^temperature: must be at most"):
        SamplingParams(temperature=2**64)


def test_a_built_model_and_the_backend_and_cp_backend_must_agree(model):
    with pytest.raises(ValueError, match="^backend: 'triton' contradicts the given model's backend 'torch'"):
        LLM(model, backend="triton")
    LLM(model, backend="torch")  # agreeing is fine; unset takes the model's
    with pytest.raises(ValueError, match="^cp_backend: 'nccl' moves CUDA tensors and the model is on the cpu"):
        LLM(model, context_parallel_size=2, cp_backend="nccl")
    with pytest.raises(ValueError, match="^tracer: expected a kda_ref.trace.Tracer"):
        LLM(model, tracer=3)


def test_large_engine_seeds_sample_and_differ(model):
    """The documented 64-bit seed range: every seed samples, and two seeds equal in their low 32 bits (which
    is all torch's CPU generator uses) still give different requests different streams."""
    params = SamplingParams(max_tokens=6, temperature=1.0)
    outs = {s: LLM(model, seed=s).generate([[3, 4, 5, 6]], params)[0].token_ids for s in (0, 2**32, 2**45, 2**64 - 1,
                                                                                         -(2**63))}
    assert len(set(map(tuple, outs.values()))) == len(outs)


def test_context_parallel_prefill_refuses_a_timeout_past_its_bound(model):
    """A deadline of 1e10 s used to overflow the timestamp inside the ranks (and abort the process)."""
    from kda_ref.context_parallel import context_parallel_prefill
    from kda_ref.utils.limits import MAX_CP_TIMEOUT_S

    with pytest.raises(ValueError, match="^timeout: must be a positive, finite number of seconds, at most"):
        context_parallel_prefill(model, [[1, 2, 3, 4]], world_size=2, backend="threads", timeout=1e10)
    res = context_parallel_prefill(model, [[1, 2, 3, 4]], world_size=2, backend="threads", timeout=MAX_CP_TIMEOUT_S)
    assert res.logits.shape[0] == 1
