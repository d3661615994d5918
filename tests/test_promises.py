"""Promises the engine keeps even where greedy tokens would not show a break: exact token budgets with
draft trees, exact room at a page boundary, the order a failed step's requests are recomputed in, the
exact number of states a capped radix path keeps, the exact smallest pool, the Chrome trace's request
spans, the Lab's conversation bound and what the prefill/decode router calls a continuation.

Each test states its promise with exact counts, orders and boundaries (both sides of a boundary)."""

from __future__ import annotations

import pathlib

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.model import HybridModel

CFG = ModelConfig.micro()
ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()


@pytest.fixture(scope="module")
def trained():
    from kda_ref.train import load_trained

    return load_trained()


def _ids(n: int, seed: int, high: int = 256) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, (n,), generator=g).tolist()


def _record_schedules(llm) -> list:
    """Wrap ``llm.scheduler.schedule`` so that every step's decision is kept (in step order)."""
    seen, real = [], llm.scheduler.schedule

    def schedule():
        out = real()
        seen.append(out)
        return out

    llm.scheduler.schedule = schedule
    return seen


# ---- 1. a draft tree's nodes count against the step's token budget ----------------------------------------
@pytest.mark.parametrize("budget", [9, 10])
def test_a_draft_trees_nodes_count_against_the_token_budget(trained, budget):
    """Every step's forward runs at most ``max_num_batched_tokens`` tokens, a tree item counting its
    root token and every one of its draft nodes."""
    text = (ROOT / "docs" / "kda.md").read_text(encoding="utf-8")
    llm = LLM(trained, speculative="ngram", num_speculative_tokens=3, spec_tree_width=3,
              max_num_batched_tokens=budget)
    seen = _record_schedules(llm)
    for prompt in (text[:60], text[1000:1040]):  # the trained model recites: its n-grams recur
        llm.add_request(prompt, SamplingParams(max_tokens=24, ignore_eos=True))
    forward_tokens = 0
    while llm.has_unfinished():
        llm.step()
    for sched in seen:
        ran = sum(it.num_new_tokens + (len(it.tree) if it.tree is not None else 0) for it in sched.items)
        assert ran <= budget, [(it.req.req_id, it.num_new_tokens, len(it.tree or ())) for it in sched.items]
        forward_tokens += ran
    with_tree = [s for s in seen if any(it.tree is not None for it in s.items)]
    assert with_tree, "no step verified a draft tree"
    # a tree shared its step with another request: the budget left after a tree was handed on
    assert any(len(s.items) > 1 for s in with_tree)
    assert llm.stats()["forward_tokens"] == forward_tokens


# ---- 2. room for a handoff counts the page of its first decode token ---------------------------------------
def test_room_for_a_handoff_counts_the_page_of_the_first_decode_token(model):
    """``has_room_for(boundary)`` asks for the pages of ``boundary + 1`` tokens: in a pool of exactly one
    state slot and N KV pages, a boundary of ``N * page_size`` tokens is refused, one token less is
    accepted, and ``admit_prefilled`` installs that one."""
    from kda_ref.memory import PageKind, PoolExhausted
    from kda_ref.model.layer_state import BoundaryState

    sizes = LLM(model).pool.sizes
    N, ps = 3, sizes.page_size
    llm = LLM(model, memory_budget_bytes=sizes.state_bytes + N * sizes.kv_page_bytes)
    assert llm.pool.sizes == sizes and llm.pool.free_bytes == sizes.state_bytes + N * sizes.kv_page_bytes
    for evict in (False, True):
        assert not llm.has_room_for(N * ps, evict=evict)
        assert llm.has_room_for(N * ps - 1, evict=evict)
    assert llm.scheduler.memory.pages_for(N * ps) == N  # the refused one would need page N + 1

    boundary = N * ps - 1
    rid = llm.add_request(_ids(boundary, 1), SamplingParams(max_tokens=1, ignore_eos=True))
    state = BoundaryState(recurrent={la: torch.zeros(CFG.linear_num_heads, CFG.linear_head_dim, CFG.linear_head_dim)
                                     for la in CFG.kda_layer_ids},
                          conv={la: torch.zeros(3 * CFG.kda_dim, CFG.short_conv_kernel_size - 1)
                                for la in CFG.kda_layer_ids},
                          kv={la: torch.zeros(boundary, CFG.mla_latent_dim) for la in CFG.mla_layer_ids})
    llm.admit_prefilled(rid, state, first_token=7)
    req = llm.request(rid)
    assert req.num_computed_tokens == boundary and req.output_token_ids == [7] and req in llm.scheduler.running
    assert len(req.pages) == N and llm.pool.free_bytes == 0
    assert llm.abort(rid) and llm.pool.is_empty()
    # the pool itself refuses the page the refused boundary would have needed
    llm.pool.alloc(PageKind.KDA_STATE, 1, owner="test")
    llm.pool.alloc(PageKind.MLA_KV, N, owner="test")
    with pytest.raises(PoolExhausted):
        llm.pool.alloc(PageKind.MLA_KV, 1, owner="test")


# ---- 3. a failed forward's requests are recomputed oldest first -------------------------------------------
def test_a_failed_forwards_requests_are_recomputed_alone_oldest_first(model):
    """After a failed forward its requests wait at the head of the queue in the step's order (oldest
    first) ahead of those that were already waiting, and are recomputed one at a time, the oldest
    suspect first, each to its end, before anything else runs."""
    llm = LLM(model, max_num_seqs=3, max_num_batched_tokens=64)
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    rids = [llm.add_request(_ids(n, 10 + n), params) for n in (9, 13, 11, 7)]  # the fourth waits for a seat
    real, calls = llm.runner.run, []

    def run(sched, **kw):
        calls.append([it.req.req_id for it in sched.items])
        if len(calls) == 2:
            raise RuntimeError("injected forward failure")
        return real(sched, **kw)

    llm.runner.run = run
    llm.step()
    assert calls == [rids[:3]] and [r.req_id for r in llm.scheduler.waiting] == [rids[3]]
    assert llm.step() == []  # the three decode together, and the forward fails
    assert calls[1] == rids[:3]
    assert [r.req_id for r in llm.scheduler.waiting] == rids  # the failed step's, oldest first, then the rest
    assert llm.scheduler.suspects == set(rids[:3]) and not llm.scheduler.running
    finished = []
    while llm.has_unfinished():
        finished += [o.req_id for o in llm.step()]
    after = calls[2:]
    assert all(len(c) == 1 for c in after)  # each suspect alone, then the one that was waiting
    order = [c[0] for c in after]
    assert order == sorted(order) and [r for i, r in enumerate(order) if i == 0 or order[i - 1] != r] == rids
    assert finished == rids and llm.stats()["forward_failures"] == 1
    assert llm.pool.is_empty()


# ---- 4. a capped radix path keeps exactly its cap ----------------------------------------------------------
def _states_per_path(tree) -> list[list[int]]:
    """For every root-to-leaf path: the token positions of the states on it, shallowest first."""
    out = []
    for leaf in (n for n in tree.nodes() if n.is_leaf and n is not tree.root):
        path, x = [], leaf
        while x is not tree.root:
            path.append(x)
            x = x.parent
        depth, held = 0, []
        for n in reversed(path):
            depth += len(n.key)
            if n.state is not None:
                held.append(depth)
        out.append(held)
    return out


@pytest.mark.parametrize("cap", [2, 3])
def test_a_capped_radix_path_keeps_exactly_its_cap_of_states(model, cap):
    """With ``max_checkpoints_per_path=m``, a path whose prompt passed more than ``m`` checkpoint
    boundaries keeps exactly ``m`` states: the deepest ones, its leaf's included."""
    prompt = _ids(64 * 5 + 10, 40)  # five chunk boundaries, then the finished request's own state
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    uncapped = LLM(model, prefix_cache="radix", checkpoint_policy="chunk", max_num_batched_tokens=512)
    uncapped.generate([prompt], params)
    (every,) = _states_per_path(uncapped.prefix_cache.tree)
    assert every[:5] == [64, 128, 192, 256, 320] and len(every) == 6  # more than either cap
    llm = LLM(model, prefix_cache="radix", checkpoint_policy="chunk", max_checkpoints_per_path=cap,
              max_num_batched_tokens=512)
    llm.generate([prompt], params)
    assert _states_per_path(llm.prefix_cache.tree) == [every[-cap:]]


def test_the_path_cap_keeps_the_state_of_a_fork_as_sglang_does(model):
    """The cap is SGLang's soft one (``MambaComponent._evict_excess_path_states``): after each insert the
    shallowest holders on the path to the new state go first, but a fork (a node with two children) keeps
    its state, which serves both branches. A reaches 64, 128 and its leaf; B shares A's first 128 tokens
    (the state at 128 is a hit and the node a fork) and passes 192, 256 and 320: at 256 the state at 64
    goes, at 320 the one at 192 (128 is a fork), at B's leaf the one at 256."""
    root = _ids(128, 50)
    a, b = root + _ids(5, 51), root + _ids(200, 52)
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    llm = LLM(model, prefix_cache="radix", checkpoint_policy="chunk", max_checkpoints_per_path=3,
              max_num_batched_tokens=512)
    llm.generate([a], params)
    (a_states,) = _states_per_path(llm.prefix_cache.tree)
    assert a_states[:2] == [64, 128] and len(a_states) == 3  # under the cap: all kept
    out = llm.generate([b], params)[0]
    assert out.metrics["cached_tokens"] == 128
    paths = sorted(_states_per_path(llm.prefix_cache.tree))
    assert paths == sorted([[128, a_states[2]], [128, 320, len(b) + 1]]), paths


# ---- 5. the smallest pool is exactly one state slot and one KV page ----------------------------------------
@pytest.mark.parametrize("name,config", [
    ("tiny", ModelConfig.tiny()), ("micro", ModelConfig.micro()),
    ("wider conv, more heads", ModelConfig(hidden_size=96, linear_num_heads=3, linear_head_dim=16,
                                           short_conv_kernel_size=6, num_attention_heads=3, kv_lora_rank=24,
                                           qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                                           intermediate_size=128, moe_intermediate_size=32,
                                           bos_token_id=256, eos_token_id=257, pad_token_id=258))])
@pytest.mark.parametrize("page_size", [16, 5])
def test_the_smallest_pool_is_exactly_one_state_slot_and_one_kv_page(name, config, page_size):
    """The size check's smallest pool is exactly the pool's one KDA state slot plus one KV page, so a
    limit of the weights plus that much fits and one byte less does not."""
    from kda_ref.memory import PoolAccounting, unit_sizes
    from kda_ref.model.size import ModelSizeError, check_fits, model_bytes

    sizes = unit_sizes(config, page_size)
    got = model_bytes(config, page_size=page_size)
    assert got["pool_min"] == sizes.state_bytes + sizes.kv_page_bytes
    PoolAccounting(sizes, got["pool_min"], shared_checkpoint_slots=True)  # the pool takes exactly that budget
    with pytest.raises(ValueError, match="cannot hold even one request"):
        PoolAccounting(sizes, got["pool_min"] - 1, shared_checkpoint_slots=True)
    need = got["weights"] + got["pool_min"]
    assert check_fits(config, page_size=page_size, limit_bytes=need)["pool_min"] == got["pool_min"]
    with pytest.raises(ModelSizeError, match="smallest cache pool"):
        check_fits(config, page_size=page_size, limit_bytes=need - 1)


# ---- 6. a request's Chrome-trace span covers exactly its steps ---------------------------------------------
def test_each_request_span_runs_from_its_arrival_step_to_the_end_of_its_finishing_step(model):
    """In the Chrome trace a request's span starts at the step it arrived in and ends with the step it
    finished in (the exporter's own step spans give the times), and each step it ran in lies inside it."""
    from kda_ref.trace import RequestArrived, RequestFinished, TraceRecorder, to_chrome_trace

    rec = TraceRecorder()
    llm = LLM(model, tracer=rec, max_num_batched_tokens=32)
    llm.add_request(_ids(40, 60), SamplingParams(max_tokens=3, ignore_eos=True))
    llm.add_request(_ids(9, 61), SamplingParams(max_tokens=6, ignore_eos=True))
    llm.step()
    llm.step()
    llm.add_request(_ids(12, 62), SamplingParams(max_tokens=2, ignore_eos=True))  # arrives mid-run
    while llm.has_unfinished():
        llm.step()
    arrived = {e.req_id: e.step for e in rec.events if isinstance(e, RequestArrived)}
    ended = {e.req_id: e.step for e in rec.events if isinstance(e, RequestFinished)}
    assert sorted(arrived) == sorted(ended) == [0, 1, 2] and arrived[2] == 2
    assert len(set(ended.values())) > 1

    events = to_chrome_trace(rec.events, kda_layers=list(CFG.kda_layer_ids),
                             mla_layers=list(CFG.mla_layer_ids))["traceEvents"]
    steps = {int(e["name"].split()[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
             if e["ph"] == "X" and e["pid"] == 0 and e["tid"] == 0}
    step_us = steps[2][0] - steps[1][0]
    assert all(steps[s] == (s * step_us, (s + 1) * step_us) for s in steps)  # the exporter's step -> time

    def window(step: int) -> tuple[int, int]:
        return steps.get(step, (step * step_us, (step + 1) * step_us))  # step 0: before the first forward

    lives = {e["tid"]: (e["ts"], e["ts"] + e["dur"]) for e in events
             if e["ph"] == "X" and e["pid"] == 1 and e["name"].startswith("request ")}
    assert sorted(lives) == [0, 1, 2]
    for rid, (t0, t1) in lives.items():
        assert (t0, t1) == (window(arrived[rid])[0], steps[ended[rid]][1]), rid
        ran = [(e["ts"], e["ts"] + e["dur"]) for e in events
               if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == rid and not e["name"].startswith("request ")]
        assert ran and all(t0 <= a and b <= t1 for a, b in ran), rid
        assert max(b for _, b in ran) == t1  # its last step is its finishing step


# ---- 7. the Lab's conversation bound -------------------------------------------------------------------------
def test_a_conversation_turn_exactly_at_the_prompt_bound_runs_and_one_token_more_is_refused(model):
    """A conversation's grown prompt (previous prompt, its answer, the new turn) of exactly
    ``prompt_tokens`` runs; one token more is a ``LabError`` naming the bound."""
    from model_viz.scenarios.lab import LabError, Limits, check_prompts, run_lab, sampling_params

    first, turn, new = _ids(20, 70), _ids(5, 71), 3
    sampling = sampling_params(max_tokens=new)
    grown = len(first) + new + len(turn)
    run = run_lab(model, [first, turn], sampling, mode="conversation", limits=Limits(prompt_tokens=grown))
    assert [len(p) for p in run.prompts] == [len(first), grown]
    assert run.prompts[1] == first + list(run.outputs[0].token_ids) + turn
    with pytest.raises(LabError) as err:
        run_lab(model, [first, turn], sampling, mode="conversation", limits=Limits(prompt_tokens=grown - 1))
    assert err.value.key == "lab.err.turn_tokens" and err.value.fmt["n"] == grown
    assert err.value.fmt["max"] == grown - 1 and err.value.fmt["i"] == 2
    # a typed token-id prompt has the same bound: exactly at it is taken, one token more is refused
    assert check_prompts([first], Limits(prompt_tokens=len(first))) == [first]
    with pytest.raises(LabError, match="20"):
        check_prompts([first], Limits(prompt_tokens=len(first) - 1))


# ---- 8. the PD router's continuation ---------------------------------------------------------------------------
def test_a_prompt_identical_to_a_held_sequence_is_not_a_continuation():
    """The router sends a prompt straight to a decode instance only when it strictly extends a token
    sequence whose state that instance holds; the very same sequence, or a shorter one, is a new prompt."""
    from kda_ref.disagg.router import Router

    r = Router(num_prefill=1, num_decode=2, decode_caches_states=True)
    held = [5, 6, 7, 8]
    r.hold(1, held)
    assert r.continued_on(held) is None
    assert r.continued_on(held[:3]) is None
    assert r.continued_on(held + [9]) == 1
    assert r.continued_on([5, 6, 7, 9, 10]) is None
    assert r.pick(list(held)) == (0, 0)  # a new prompt: prefilled, the least-loaded decode instance
    assert r.pick(held + [9]) == (None, 1)  # a continuation: straight to the instance holding the state
    assert r.prefill_load == [1] and r.decode_load == [1, 1]
    assert Router(1, 1, decode_caches_states=False).continued_on(held + [9]) is None


def test_a_disaggregated_engine_prefills_a_repeated_prompt_and_routes_its_extension_to_decode():
    """Sent again as it is, a prompt whose boundary state the decode side received is prefilled anew;
    the finished conversation (prompt and answer) extended by a token goes to that decode side; both
    answer as one engine does."""
    from kda_ref.disagg import DisaggregatedLLM

    params = SamplingParams(max_tokens=2, ignore_eos=True)
    d = DisaggregatedLLM(CFG, seed=0, prefix_cache="radix")
    prompt = _ids(30, 80)
    first = d.generate([prompt], params)[0]
    again = d.generate([prompt], params)[0]
    assert d.counters["routed_to_decode"] == 0 and d.counters["handoffs"] == 2
    longer_prompt = prompt + list(first.token_ids) + [3]
    longer = d.generate([longer_prompt], params)[0]
    assert d.counters["routed_to_decode"] == 1 and d.counters["handoffs"] == 2
    single = LLM(CFG, seed=0).generate([prompt, longer_prompt], params)
    assert [first.token_ids, again.token_ids, longer.token_ids] == [single[0].token_ids] * 2 + [single[1].token_ids]
