"""No request waits forever: the progress guarantee (``docs/architecture.md#progress``).

* a request is refused when it arrives, and an engine when it is built, if its peak (state slots,
  extra slots, the prefix cache's pinned checkpoints, KV pages) cannot fit the budget alone; the
  message names each piece;
* the smallest settings that used to stall now finish or are refused;
* a property over random configurations (every cache and checkpoint policy, eviction, retention,
  speculation method and rollback strategy, static decode, checkpoint dtype) and random workloads
  (shared prefixes, long and short prompts, aborts), with budgets drawn in states and pages around one
  request's peak: a request over it is refused where it enters, and within a step bound every queued
  request finishes (none errors), each answer equals the request run alone (with fp32 checkpoints: the
  lossy ones may flip a near tie, as they are documented to), and the pool is empty once the cache is
  flushed;
* the watchdog: a scheduler that admits nothing and frees nothing errors its requests instead of spinning.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kda_ref.speculative import SPEC_METHODS, SPEC_STATES
from kda_ref.speculative.drafters import DRAFTERS
from kda_ref import LLM, EngineConfig, ModelConfig, SamplingParams
from kda_ref.engine import RequestError
from kda_ref.engine.demand import config_demand
from kda_ref.model import ConfigError, HybridModel
from kda_ref.trace import TraceRecorder
from test_engine import reference

CFG = ModelConfig.micro()
STATE = 62976  # one micro-model KDA state: recurrent + conv windows of its 3 KDA layers


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()


@pytest.fixture(scope="module")
def draft():
    return HybridModel(CFG, seed=1).eval()


def rand(n, seed):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def drive(llm, prompts, params, max_steps, abort_at=None):
    """Queue ``prompts``, step until nothing is left or ``max_steps``; ``abort_at``: {step: request index}.
    Returns ``({request index: output}, steps)``."""
    ids = [llm.add_request(p, sp) for p, sp in zip(prompts, params)]
    index = {r: i for i, r in enumerate(ids)}
    outs, steps = {}, 0
    while llm.has_unfinished() and steps < max_steps:
        if abort_at and steps in abort_at and llm.abort(ids[abort_at[steps]]):
            outs[abort_at[steps]] = None
        for o in llm.step():
            outs[index[o.req_id]] = o
        steps += 1
    return outs, steps


# ---- the peak is counted when a request arrives and when the engine is built ------------------------------

def test_a_request_whose_peak_does_not_fit_is_refused_naming_each_piece(model):
    llm = LLM(model, prefix_cache="radix", memory_budget_bytes=150_000)
    with pytest.raises(RequestError) as e:
        llm.add_request(list(range(150)), SamplingParams(max_tokens=20))
    msg = str(e.value)
    # 1 active slot + the checkpoint its locked path pins + 170 KV pages of 160 B = 153152 B
    assert msg.startswith("prompt: this request needs 153152 B = ")
    assert "62976 B for 1 active KDA state slot" in msg and "62976 B for 1 checkpoint its path's lock pins" in msg
    assert "27200 B for 170 MLA KV pages of 1 token" in msg and "(150000 B)" in msg
    assert not llm.has_unfinished() and llm.pool.is_empty()
    # exactly at the edge: two states leave 24048 B, 150 pages of 160 B; 151 tokens are one page too many
    assert llm.add_request(list(range(140)), SamplingParams(max_tokens=10)) == 0
    with pytest.raises(RequestError):
        llm.add_request(list(range(140)), SamplingParams(max_tokens=11))


def test_an_engine_that_cannot_hold_one_request_is_refused_when_built(model, draft):
    # the sglang policy's two track slots and the pinned checkpoint: 4 states + 2 pages
    need = 4 * STATE + 2 * 160
    with pytest.raises(ConfigError, match=r"^memory_budget_bytes: 190000 B cannot hold even one request") as e:
        LLM(model, prefix_cache="radix", checkpoint_policy="sglang", memory_budget_bytes=190_000)
    assert f"needs {need} B = " in str(e.value) and "2 ping-pong track slots of checkpoint_policy='sglang'" in str(e.value)
    LLM(model, prefix_cache="radix", checkpoint_policy="sglang", memory_budget_bytes=need)  # exactly fits
    with pytest.raises(ConfigError, match="memory_budget_bytes"):
        LLM(model, prefix_cache="radix", checkpoint_policy="sglang", memory_budget_bytes=need - 1)
    # speculation's 1 + k slots and the draft model's own cache (outside the pool, reported beside)
    with pytest.raises(ConfigError) as e:
        LLM(model, prefix_cache="radix", checkpoint_policy="sglang", track_interval=128, speculative="draft",
            draft_model=draft, num_speculative_tokens=5, spec_state="slots", memory_budget_bytes=500_000)
    assert "5 extra state slots of spec_state='slots'" in str(e.value)
    assert "draft model cache is held outside the pool" in str(e.value)


def test_the_block_cache_counts_its_pending_replay_point_only_when_it_keeps_one(model):
    plain = LLM(model, prefix_cache="block").scheduler.demand(100)
    reach = LLM(model, prefix_cache="block", retention_interval=0).scheduler.demand(100)
    assert reach.bytes - plain.bytes == STATE
    assert "pending replay checkpoint" in reach.as_dict() and "pending replay checkpoint" not in plain.as_dict()
    tree = LLM(model, speculative="ngram", num_speculative_tokens=3, spec_tree_width=3).scheduler.demand(100)
    assert tree.tokens == 100 + (3 - 1) * 3 - 1  # a tree's nodes are written past the request's last token


# ---- the settings that stalled ------------------------------------------------------------------------------

def workload(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (int(torch.randint(20, 171, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


@pytest.mark.parametrize("settings_", [
    dict(prefix_cache="radix", checkpoint_policy="every_n", checkpoint_interval=64, max_checkpoints_per_path=3,
         max_num_seqs=1, memory_budget_bytes=160_000),
    dict(prefix_cache="radix", checkpoint_policy="chunk", memory_budget_bytes=160_000),
    dict(prefix_cache="radix", checkpoint_policy="sglang", memory_budget_bytes=4 * STATE + 200 * 160),
], ids=["every_n", "chunk", "sglang"])
def test_tight_budgets_with_a_prefix_cache_finish_every_request(model, settings_):
    """Budgets just above one request's peak, where the cache used to keep the memory the head needed."""
    prompts = workload()
    params = [SamplingParams(max_tokens=16, ignore_eos=True)] * len(prompts)
    llm = LLM(model, **settings_)
    outs, steps = drive(llm, prompts, params, max_steps=4000)
    assert len(outs) == len(prompts) and not llm.has_unfinished(), f"stalled after {steps} steps"
    for i, p in enumerate(prompts):
        assert outs[i].finish_reason == "length" and outs[i].token_ids == reference(model, p, 16)[0]
    llm.flush_cache()
    assert llm.pool.is_empty()


def test_a_request_that_re_matches_its_own_checkpoint_finishes(model):
    """One request preempted by another re-matches the checkpoint it made; with its pinned state
    counted it runs to the end (it used to prefill from that checkpoint, fail to grow, preempt itself
    and start over, 9,999 times)."""
    budget = 2 * STATE + 175 * 160
    llm = LLM(model, prefix_cache="radix", memory_budget_bytes=budget, max_num_batched_tokens=64)
    prompts = [list(range(150)), rand(40, 3)]
    outs, steps = drive(llm, prompts, [SamplingParams(max_tokens=20, ignore_eos=True)] * 2, max_steps=2000)
    assert steps < 200 and outs[0].token_ids == reference(model, prompts[0], 20)[0]
    assert outs[1].token_ids == reference(model, prompts[1], 20)[0]


# ---- the property --------------------------------------------------------------------------------------------

CACHES = st.one_of(
    st.just({}),
    st.builds(lambda p, cap: dict(prefix_cache="radix", checkpoint_policy=p, max_checkpoints_per_path=cap,
                                  **({"checkpoint_interval": 64} if p == "every_n" else {}),
                                  **({"track_interval": 64} if p == "sglang" else {})),
              st.sampled_from(["chunk", "every_n", "branch", "sglang", "sglang_no_buffer"]),
              st.sampled_from([None, 1, 2])),
    st.builds(lambda r, ev, partial, mode: dict(prefix_cache="block", retention_interval=r, eviction=ev,
                                                partial_hits=partial, mamba_cache_mode=mode, block_size=64),
              st.sampled_from([None, 0, 128]), st.sampled_from(["lru", "marconi"]), st.booleans(),
              st.sampled_from(["align", "all"])),
)
# the drafters any model can serve (the MTP drafter needs an MTP layer, which the micro model has not:
# tests/test_mtp_drafter.py runs it under preemption on the K3 layout)
TARGET_FREE_DRAFTERS = [m for m in SPEC_METHODS if not getattr(DRAFTERS[m], "needs_target", False)]
SPECS = st.one_of(
    st.just({}),
    st.builds(lambda m, s, k: dict(speculative=m, spec_state=s, num_speculative_tokens=k),
              st.sampled_from(TARGET_FREE_DRAFTERS), st.sampled_from(SPEC_STATES),
              st.integers(1, 3)),
    st.builds(lambda w: dict(speculative="ngram", spec_state="per_step", num_speculative_tokens=2, spec_tree_width=w),
              st.integers(2, 3)),
)
WORKLOADS = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 120), st.integers(1, 6)), min_size=1, max_size=6)


def run_config(model, draft, cache, spec, static, states, kv_tokens, seqs, batched, work, aborts, dtype):
    """One random configuration and workload; the assertions of the module docstring. The budget is
    ``states`` KDA states and the KV pages of ``kv_tokens`` tokens (the units the pool counts in), so
    the draws land on the edges where one more unit would have fit. Answers are compared with the
    request run alone only for fp32 checkpoints: bf16 / int8 ones store an approximation of the state,
    which can flip a near-tie token (the compressed-checkpoints page counts how often); for them only
    progress and the pool are checked."""
    kw = dict(cache, **spec, static_decode=static, max_num_seqs=seqs, max_num_batched_tokens=batched,
              checkpoint_dtype=dtype)
    if spec.get("speculative") == "draft":
        kw["draft_model"] = draft
    try:
        EngineConfig.from_kwargs(**{k: v for k, v in kw.items() if k != "draft_model"}, memory_budget_bytes=1 << 24)
    except ValueError:
        assume(False)  # a combination the configuration refuses (e.g. a tree with static decode)
    stems = [rand(90, 500 + s) for s in range(3)]
    prompts = [stems[s][: 30 * s] + rand(n, 600 + 7 * n + s) for s, n, _ in work]
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for _, _, m in work]
    probe = LLM(model, **kw, memory_budget_bytes=1 << 24)
    sched = probe.scheduler
    # the model-free count (a disaggregated parent's) is the engine's
    n = sum(len(p) + sp.max_tokens for p, sp in zip(prompts, params)) // len(prompts)
    assert config_demand(model.config, probe.engine_config)(n).describe().split(";")[0] == \
        sched.demand(n).describe().split(";")[0]
    sizes = sched.pool.sizes
    budget = states * sizes.state_bytes + -(-kv_tokens // sizes.page_size) * sizes.kv_page_bytes
    try:
        llm = LLM(model, **kw, memory_budget_bytes=budget)
    except ConfigError:  # refused when built: then not even the smallest request fits
        assert sched.demand(2).bytes > budget
        return
    fits = [sched.demand(len(p) + sp.max_tokens).bytes <= budget for p, sp in zip(prompts, params)]
    for p, sp, ok in zip(prompts, params, fits):
        if not ok:  # refused where it enters, nothing queued
            with pytest.raises(RequestError, match="^prompt: this request needs"):
                llm.add_request(p, sp)
    prompts = [p for p, ok in zip(prompts, fits) if ok]
    params = [sp for sp, ok in zip(params, fits) if ok]
    bound = 3 * sum(len(p) + sp.max_tokens for p, sp in zip(prompts, params)) + 50
    outs, steps = drive(llm, prompts, params, bound, abort_at={s: i % len(prompts) for i, s in enumerate(aborts)}
                        if prompts else None)
    assert not llm.has_unfinished(), f"{steps} steps, {llm.scheduler.waiting=}, {llm.scheduler.running=}"
    for i, (p, sp) in enumerate(zip(prompts, params)):
        o = outs[i]
        if o is None or o.finish_reason == "abort":
            continue
        assert o.finish_reason == "length", (o.finish_reason, o.error)
        assert len(o.token_ids) == sp.max_tokens
        if dtype == "fp32":
            assert o.token_ids == reference(model, p, sp.max_tokens)[0]
    llm.flush_cache()
    assert llm.pool.is_empty(), llm.pool.used_bytes


PROPERTY = given(CACHES, SPECS, st.booleans(), st.integers(1, 9), st.integers(1, 600), st.integers(1, 4),
                 st.sampled_from([16, 48, 128]), WORKLOADS, st.lists(st.integers(0, 40), max_size=2),
                 st.sampled_from(["fp32", "fp32", "fp32", "bf16", "int8"]))
FIXTURES = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])

test_every_configuration_makes_progress = settings(max_examples=10, **FIXTURES)(PROPERTY(run_config))
test_every_configuration_makes_progress_wide = pytest.mark.slow(
    settings(max_examples=150, **FIXTURES)(PROPERTY(run_config)))


# ---- the watchdog --------------------------------------------------------------------------------------------

def test_a_scheduler_that_stops_moving_errors_its_requests_instead_of_spinning(model):
    """Admission broken on purpose (the pool refuses every state slot): the idle-means-admit rule fails the
    head with its numbers. A scheduler that fills no step while a request runs: the watch catches it
    within ``max_model_len`` + its margin and errors the request."""
    rec = TraceRecorder()
    llm = LLM(model, memory_budget_bytes=1 << 20, tracer=rec, max_model_len=64)
    llm.pool.can_alloc = lambda kind, n: False  # nothing can be allocated any more
    rid = llm.add_request(rand(10, 1), SamplingParams(max_tokens=4))
    outs = llm.step()  # the first step finds the pool refusing, nothing running: the head errors at once
    assert [o.req_id for o in outs] == [rid] and not llm.has_unfinished()
    assert outs[0].finish_reason == "error" and "cannot run under this configuration" in outs[0].error
    refused = rec.events_of("admission_refused")
    assert [e.req_id for e in refused] == [rid] and refused[0].budget_bytes == 1 << 20
    assert refused[0].need_bytes == sum(refused[0].parts.values())

    llm = LLM(model, memory_budget_bytes=1 << 20, tracer=(rec := TraceRecorder()), max_model_len=64)
    rid = llm.add_request(rand(10, 2), SamplingParams(max_tokens=4))
    llm.step()  # admitted and prefilled
    llm.scheduler.max_num_batched_tokens = 0  # a scheduler that fills no step: the request runs, nothing moves
    done, steps = [], 0
    while llm.has_unfinished() and steps < 200:
        done += llm.step()
        steps += 1
    assert [o.req_id for o in done] == [rid] and done[0].finish_reason == "error"
    assert 64 < steps <= 64 + 16 + 2  # max_model_len + the margin, then caught
    stall = rec.events_of("engine_stall")
    assert len(stall) == 1 and stall[0].req_ids == [rid] and "engine stalled" in stall[0].message
    llm.flush_cache()
    assert llm.pool.is_empty()


def test_a_tokenizer_or_listener_that_raises_fails_its_request_alone(model):
    """A request's share of a step's output raised (its stop string's decode, a finish listener): the
    exception left the step half done -- the next request in the batch lost its token after its state had
    advanced (a silently wrong answer) -- and a decode that always raised wedged the engine. The request
    alone now finishes with an error; the others' tokens equal a fresh engine's; nothing is left held."""
    from kda_ref import SamplingParams as SP
    from kda_ref.tokenizer import ByteTokenizer

    class Flaky(ByteTokenizer):
        calls = 0

        def decode(self, ids, *a, **k):
            Flaky.calls += 1
            if Flaky.calls == 3:
                raise RuntimeError("decode broke")
            return super().decode(ids, *a, **k)

    prompt = rand(5, 3)
    want = LLM(model).generate([prompt], SP(max_tokens=5, ignore_eos=True))[0].token_ids
    llm = LLM(model, tokenizer=Flaky())
    outs = llm.generate([prompt, prompt], [SP(max_tokens=5, ignore_eos=True, stop=["zz"]),
                                           SP(max_tokens=5, ignore_eos=True)])
    assert outs[0].finish_reason == "error" and "decode broke" in outs[0].error
    assert outs[1].token_ids == want and outs[1].finish_reason == "length"
    assert llm.pool.is_empty() and not llm.has_unfinished()

    def listener(req):
        raise ValueError("listener broke")

    llm.add_finish_listener(listener)
    (out,) = llm.generate([prompt], SP(max_tokens=2, ignore_eos=True))
    assert out.finish_reason == "error" and "listener broke" in out.error
    assert llm.pool.is_empty() and not llm.has_unfinished()
    with pytest.raises(TypeError, match="^listener: must be callable"):
        llm.add_finish_listener(5)


def test_a_none_in_stop_or_stop_token_ids_is_refused_before_any_prompt_is_queued(model):
    """``stop=[None]`` passed the check (a ``next(..., None)`` sentinel cannot see a None element) and then
    failed in the detokenizer after ``generate`` had queued the batch's first request; ``stop_token_ids=[None]``
    was accepted and did nothing. Both are refused by name, and nothing is queued."""
    with pytest.raises(RequestError, match="^stop: each must be a non-empty string"):
        SamplingParams(stop=["x", None])
    with pytest.raises(RequestError, match="^stop_token_ids: token ids must be ints >= 0, got None"):
        SamplingParams(stop_token_ids=[None])
    llm = LLM(model)
    with pytest.raises(TypeError, match="^req_id: must be an int"):  # abort(True) stopped request 1
        llm.abort(True)
    assert llm.abort(12345) is False and not llm.has_unfinished()
