"""Speculative decoding changes nothing but the speed: the engine with drafts gives plain greedy
decoding's tokens (and logits), keeps the target distribution when sampling, and never lets a
rejected draft's state or KV survive."""

from __future__ import annotations

import math
import pathlib

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.memory import PageKind, UnifiedMemoryPool
from kda_ref.model import HybridModel
from kda_ref.speculative import (SPEC_STATES, Drafter, NgramDrafter, SpecConfig, accept_greedy, accept_rejection,
                                 rollback_strategy)
from kda_ref.speculative.ngram_drafter import latest_match
from kda_ref.trace import TraceRecorder

CFG = ModelConfig.micro()
STATE = UnifiedMemoryPool(CFG, 1 << 20).sizes.state_bytes
PAGE = UnifiedMemoryPool(CFG, 1 << 20).sizes.kv_page_bytes


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0, chunk_size=16).eval()


def repetitive(n: int, period: int, seed: int) -> list[int]:
    """A prompt that repeats a random ``period``-token phrase: the n-gram drafter finds matches."""
    g = torch.Generator().manual_seed(seed)
    phrase = torch.randint(0, 256, (period,), generator=g).tolist()
    return (phrase * (n // period + 1))[:n]


def plain(model, prompts, max_tokens, **kw):
    llm = LLM(model, **kw)
    return llm.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True, return_logits=True))


def assert_same(outs, ref):
    for o, r in zip(outs, ref):
        assert o.token_ids == r.token_ids
        torch.testing.assert_close(o.logits, r.logits, atol=1e-4, rtol=0)


class OracleDrafter(Drafter):
    """Drafts the true greedy continuation (``answer``): all right (full accept), all wrong (full
    reject), or right but the last draft wrong (partial accept)."""

    def __init__(self, answers: dict[tuple, list[int]], wrong: bool = False, wrong_last: bool = False):
        self.answers, self.wrong, self.wrong_last = answers, wrong, wrong_last

    def release(self, seq_id):
        pass

    def propose(self, seq_id, tokens, k):
        for prompt, answer in self.answers.items():
            if tuple(tokens[:len(prompt)]) == prompt:
                done = len(tokens) - len(prompt)
                nxt = list(answer[done:done + k])
                if self.wrong:
                    return [(t + 1) % 256 for t in nxt]
                if self.wrong_last and len(nxt) > 1:
                    nxt[-1] = (nxt[-1] + 1) % 256
                return nxt
        return []


# ---- the pieces ------------------------------------------------------------------------------------------
def test_ngram_drafter_proposes_what_followed_the_latest_match():
    d = NgramDrafter(1, 3)
    assert d.propose(0, [5, 6, 7, 9, 5, 6, 7], 2) == [9, 5]  # "5 6 7" seen before: what followed
    assert d.propose(0, [1, 2, 3, 1, 2, 4, 1, 2], 3) == [4, 1, 2]  # the latest "1 2" wins
    assert d.propose(0, [1, 2, 3, 4], 3) == []  # no suffix recurs
    assert d.propose(0, [3, 3], 5) == [3]  # only what exists after the match
    assert NgramDrafter(2, 2).propose(0, [7, 1, 7], 2) == []  # a 1-gram match is below the minimum


def test_prompt_lookup_bounds_reach_the_drafter_and_a_longer_minimum_drafts_less(model):
    """``LLM(prompt_lookup_min=..., prompt_lookup_max=...)`` sets the drafter's suffix window (a minimum
    given alone above the default maximum raises the maximum to it); on a prompt whose phrases repeat,
    a longer shortest match drafts at fewer steps and the tokens stay plain decoding's."""
    assert (LLM(model, speculative="ngram", prompt_lookup_min=6).scheduler.drafter.min_n,
            LLM(model, speculative="ngram", prompt_lookup_min=6).scheduler.drafter.max_n) == (6, 6)
    assert LLM(model, speculative="ngram", prompt_lookup_max=2).scheduler.drafter.max_n == 2
    from kda_ref.train import load_trained

    trained = load_trained()  # reciting the docs it learned, it repeats its own phrases
    prompts = [(pathlib.Path(__file__).resolve().parents[1] / "docs" / "kda.md").read_text(encoding="utf-8")[:300]]
    ref = plain(trained, prompts, 48)
    steps = {}
    for lo in (1, 2):
        llm = LLM(trained, speculative="ngram", num_speculative_tokens=3, prompt_lookup_min=lo, prompt_lookup_max=6)
        assert_same(llm.generate(prompts, SamplingParams(max_tokens=48, ignore_eos=True, return_logits=True)), ref)
        steps[lo] = llm.stats()["spec_verify_steps"]
    assert 0 < steps[2] < steps[1]


def _scan_propose(tokens, k, min_n, max_n):
    """What the drafter must propose, from the reference scan (:func:`latest_match`)."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        i = latest_match(tokens, n)
        if i is not None:
            return tokens[i + n:i + n + k]
    return []


@pytest.mark.parametrize("min_n,max_n,vocab", [(1, 4, 3), (2, 5, 4), (3, 3, 2), (1, 1, 6), (1, 12, 2), (2, 9, 3)])
def test_ngram_index_proposes_what_the_scan_finds(min_n, max_n, vocab):
    """The per-request index gives the scan's proposal at every length of a growing sequence (tokens
    appended one or several at a time, as verify steps keep them), for two interleaved requests, and
    starts over when a request's tokens are not an extension of what it indexed."""
    g = torch.Generator().manual_seed(min_n * 10 + max_n)
    d = NgramDrafter(min_n, max_n)
    seqs = {0: [], 1: []}
    for step in range(150):
        sid = step % 2
        seqs[sid] += torch.randint(0, vocab, (1 + step % 3,), generator=g).tolist()
        k = 1 + step % 4
        assert d.propose(sid, seqs[sid], k) == _scan_propose(seqs[sid], k, min_n, max_n)
    rewritten = seqs[0][:40] + [vocab - 1 - t for t in seqs[0][40:]]  # same id, other tokens
    assert d.propose(0, rewritten, 3) == _scan_propose(rewritten, 3, min_n, max_n)
    d.release(1)
    assert d.propose(1, seqs[1], 3) == _scan_propose(seqs[1], 3, min_n, max_n)


def test_greedy_acceptance_stops_at_the_first_mismatch():
    logits = torch.full((4, 10), -5.0)
    for i, t in enumerate([3, 4, 8, 2]):  # greedy: 3, then 4, then 8, then 2
        logits[i, t] = 5.0
    assert accept_greedy(logits, [3, 4, 5]).tokens([3, 4, 5]) == [3, 4, 8]
    assert accept_greedy(logits, [3, 4, 8]).tokens([3, 4, 8]) == [3, 4, 8, 2]  # all accepted: a bonus token
    assert accept_greedy(logits, [9, 4, 8]).tokens([9, 4, 8]) == [3]


def test_rejection_sampling_keeps_the_target_distribution():
    """Chi-square test on a 6-token vocabulary: with a fixed draft d, the first emitted token is
    distributed as p0 (accept d with p0(d), else sample the residual), and after an accepted d the
    second as p1."""
    p0 = torch.tensor([0.05, 0.4, 0.1, 0.25, 0.15, 0.05])
    p1 = torch.tensor([0.3, 0.1, 0.1, 0.1, 0.1, 0.3])
    logits = torch.stack([p0.log(), p1.log(), p1.log()])
    gen = torch.Generator().manual_seed(0)
    N = 6000
    first, second = torch.zeros(6), torch.zeros(6)
    for _ in range(N):
        r = accept_rejection(logits, [1, 5], 1.0, 0, gen)
        toks = r.tokens([1, 5])
        first[toks[0]] += 1
        if toks[0] == 1 and len(toks) > 1:
            second[toks[1]] += 1

    def chi2(counts, p):
        exp = counts.sum() * p
        return float(((counts - exp) ** 2 / exp).sum())

    # 5 degrees of freedom: P(chi2 > 20.5) = 0.001
    assert chi2(first, p0) < 20.5
    assert second.sum() > 1000 and chi2(second, p1) < 20.5
    # a draft the target never produces is always rejected
    assert all(accept_rejection(torch.stack([p0.log()] * 2), [0], 1.0, 1, gen).tokens([0])[0] == 1
               for _ in range(20))  # top_k=1 leaves only token 1


def test_the_fixed_shape_fold_selects_the_state_after_each_rows_kept_tokens_bit_for_bit():
    """A static step's fold (:func:`fold_kept`) runs every row's L records and picks the state after its
    kept ones by an index tensor: bit for bit the fold of the kept records alone, for every kept count
    (0 keeps the committed state); the conv windows likewise."""
    from kda_ref.ops import l2norm
    from kda_ref.speculative.replay import replay, replay_conv
    from kda_ref.speculative.replay import fold_conv_kept, fold_kept

    g = torch.Generator().manual_seed(3)
    N, H, K, V, L, D = 6, 2, 16, 16, 5, 12
    S0 = torch.randn(N, H, K, V, generator=g)
    k = l2norm(torch.randn(N, L, H, K, generator=g))
    v, gg, b = torch.randn(N, L, H, V, generator=g), -torch.rand(N, L, H, K, generator=g), torch.rand(N, L, H, generator=g)
    kept = torch.tensor([0, 1, 2, 3, 5, 4])
    final, steps = fold_kept(S0, k, v, gg, b, kept)
    window, x = torch.randn(N, D, 3, generator=g), torch.randn(N, L, D, generator=g)
    conv, windows = fold_conv_kept(window, x, kept)
    for n, j in enumerate(kept.tolist()):
        want = S0[n] if j == 0 else replay(S0[n], k[n, :j], v[n, :j], gg[n, :j], b[n, :j])
        assert torch.equal(final[n], want), n
        assert torch.equal(steps[n], replay(S0[n], k[n], v[n], gg[n], b[n], all_steps=True))
        assert torch.equal(conv[n], window[n] if j == 0 else replay_conv(window[n], x[n, :j])[-1])
        assert torch.equal(windows[n], replay_conv(window[n], x[n]))


def test_replay_is_bit_identical_to_the_recurrent_kernel_token_by_token():
    """ReplaySSM's fold of L tokens equals, bit for bit, running the reference recurrent kernel one
    token at a time over the same inputs (and its intermediate states are each step's state); the
    conv replay equals the KDA layer's own window bookkeeping."""
    from kda_ref.model.kda_layer import conv_windows
    from kda_ref.ops import l2norm, recurrent_kda
    from kda_ref.ops.kda_recurrent import recurrent_kda_decode_
    from kda_ref.speculative.replay import replay, replay_conv

    g = torch.Generator().manual_seed(0)
    H, K, V, L = 4, 64, 64, 6
    S0 = torch.randn(H, K, V, generator=g)
    k = l2norm(torch.randn(L, H, K, generator=g))
    v, gg, b = torch.randn(L, H, V, generator=g), -torch.rand(L, H, K, generator=g), torch.rand(L, H, generator=g)
    steps = replay(S0, k, v, gg, b, all_steps=True)
    S = S0[None].clone()
    for t in range(L):
        one = lambda x: x[t][None, None]  # noqa: E731  [H, D] -> [1, 1, H, D]
        _, S = recurrent_kda(one(k), one(k), one(v), one(gg), one(b), initial_state=S, output_final_state=True)
        assert torch.equal(steps[t], S[0]), t
    assert torch.equal(replay(S0, k, v, gg, b), S[0])
    pool = S0[None].clone()  # the fused decode step: same math, another order of operations
    for t in range(L):
        recurrent_kda_decode_(k[t][None], k[t][None], v[t][None], gg[t][None], b[t][None], pool, torch.tensor([0]))
    torch.testing.assert_close(pool[0], S[0], rtol=0, atol=1e-6)
    window, x = torch.randn(12, 3, generator=g), torch.randn(L, 12, generator=g)
    assert torch.equal(replay_conv(window, x), conv_windows(window, x, torch.arange(1, L + 1)))


@pytest.mark.parametrize("bad, match", [
    (dict(speculative="ngram", num_speculative_tokens=0), "num_speculative_tokens"),
    (dict(speculative="eagle"), "speculative: must be one of"),
    (dict(speculative="ngram", spec_state="snapshot"), "spec_state: must be one of"),
    (dict(num_speculative_tokens=3), "num_speculative_tokens: given without speculative"),
    (dict(prompt_lookup_min=2), "prompt_lookup_min: given without speculative"),
    (dict(speculative="ngram", prompt_lookup_min=0), "prompt_lookup_min: must be an int in \\[1, 64\\]"),
    (dict(speculative="ngram", prompt_lookup_max=10**9), "prompt_lookup_max: must be an int in \\[(1|prompt_lookup_min), 64\\]"),
    (dict(speculative="ngram", prompt_lookup_min=3, prompt_lookup_max=2), "prompt_lookup_max: must be an int in \\[3, 64\\]"),
    (dict(speculative="draft", draft_model=CFG, prompt_lookup_max=6), "looks up suffixes \\(the n-gram drafter"),
    (dict(speculative=SpecConfig(), prompt_lookup_min=2), "prompt_lookup_min: given beside speculative=SpecConfig"),
    (dict(speculative=SpecConfig(), num_speculative_tokens=5), "num_speculative_tokens: given beside"),
    (dict(speculative="ngram", spec_state="replay", spec_tree_width=2), "per_step"),
])
def test_bad_speculative_arguments_are_named(model, bad, match, monkeypatch):
    from kda_ref.engine import llm as llm_mod

    built = []  # refused before any pool is allocated
    monkeypatch.setattr(llm_mod, "UnifiedMemoryPool", lambda *a, **k: built.append(1))
    with pytest.raises(ValueError, match=match):
        LLM(model, **bad)
    assert not built


# ---- the engine --------------------------------------------------------------------------------------------
STATES = SPEC_STATES


# every strategy, k and seed under -m slow; one diagonal of the grid (each state, k and seed once) by default
@pytest.mark.parametrize("state,k,seed", [
    pytest.param(s, k, seed, marks=() if STATES.index(s) % 3 == (1, 3, 5).index(k) == seed else pytest.mark.slow)
    for s in STATES for k in (1, 3, 5) for seed in (0, 1, 2)])
def test_ngram_speculation_equals_greedy(model, k, seed, state):
    prompts = [repetitive(40 + 9 * seed, 7, seed), repetitive(23, 5, seed + 10), repetitive(61, 11, seed + 20)]
    ref = plain(model, prompts, 24)
    llm = LLM(model, speculative="ngram", num_speculative_tokens=k, spec_state=state)
    outs = llm.generate(prompts, SamplingParams(max_tokens=24, ignore_eos=True, return_logits=True))
    assert_same(outs, ref)
    s = llm.stats()
    assert s["spec_verify_steps"] > 0 and s["spec_draft_tokens"] >= s["spec_verify_steps"]
    strategy = rollback_strategy(state)
    if not strategy.record.keeps_step_states:  # only per-token records are kept: far less than one state per token
        assert 0 < s["spec_state_bytes"] < STATE
    else:
        assert s["spec_state_bytes"] >= 2 * STATE
    if strategy.extra_slots(k):  # every speculating request held 1 + k slots at once
        assert s["spec_state_bytes"] >= (1 + k) * STATE and s["peak_pool_bytes"]["kda_state"] >= (1 + k) * STATE
    assert llm.pool.is_empty()


@pytest.mark.parametrize("static", [False, True])
def test_slots_are_written_by_the_verify_step_itself_and_nothing_is_copied_after_it(model, static):
    """``spec_state="slots"``: a uniform verify step (here every verify: one request) writes the state and
    conv window after each verified token into the request's slot for that position, in place, so that
    committing is only switching the request's active slot (vLLM reads slot ``num_accepted - 1``): no
    state comes back from the step and none is copied after it, and the answer is plain greedy decoding's
    while the committed slot moves from step to step."""
    prompt = repetitive(40, 7, 0)
    ref = plain(model, [prompt], 24)
    llm = LLM(model, speculative="ngram", num_speculative_tokens=3, spec_state="slots", static_decode=static)
    llm.scheduler.drafter = OracleDrafter({tuple(prompt): ref[0].token_ids}, wrong_last=True)  # accept 2 of 3

    def no_copy(*a, **k):
        raise AssertionError("a state was copied after the verify step")

    llm.pool.write_actives = no_copy
    steps, committed = [], set()
    run, commit = llm.runner.run, llm.scheduler._commit_speculation

    def recording(sched, *a, **k):
        out = run(sched, *a, **k)
        steps.extend(out.spec.values())
        assert not out.spec or not out.step_states  # nothing returned: written in place
        return out

    def commit_and_record(sched, out):
        kept = commit(sched, out)
        committed.update(it.req.slot for it in sched.items if it.drafts)
        return kept

    llm.runner.run, llm.scheduler._commit_speculation = recording, commit_and_record
    out = llm.generate([prompt], SamplingParams(max_tokens=24, ignore_eos=True, return_logits=True))
    assert_same(out, ref)
    assert steps and all(s.slots is not None and len(s.slots) == len(s.rows) for s in steps)
    assert len(committed) > 1  # the active slot moved among the request's 1 + k slots
    assert llm.pool.is_empty()


def test_slots_of_a_verify_mixed_with_a_plain_decode_are_copied_after_the_step(model):
    """A step in which one request verifies and another decodes plainly is not a uniform verify: it
    returns the verifying request's per-token states, and ``StateSlots.commit`` copies them into the
    request's slots after the step. The answers stay plain greedy decoding's."""
    drafting, plain_one = repetitive(40, 7, 0), repetitive(33, 5, 4)
    ref = plain(model, [drafting, plain_one], 16)
    llm = LLM(model, speculative="ngram", num_speculative_tokens=3, spec_state="slots")
    llm.scheduler.drafter = OracleDrafter({tuple(drafting): ref[0].token_ids}, wrong_last=True)  # only one drafts
    copies, steps = [], []
    write, run = llm.pool.write_actives, llm.runner.run

    def counting(slots, *a, **k):
        copies.append(list(slots))
        return write(slots, *a, **k)

    def recording(sched, *a, **k):
        out = run(sched, *a, **k)
        steps.extend(out.spec.values())
        return out

    llm.pool.write_actives, llm.runner.run = counting, recording
    outs = llm.generate([drafting, plain_one], SamplingParams(max_tokens=16, ignore_eos=True, return_logits=True))
    assert_same(outs, ref)
    mixed = [s for s in steps if s.slots is None]
    assert mixed and len(copies) == len(mixed)  # each mixed verify copied its states once, into its slots


@pytest.mark.parametrize("state", STATES)
def test_full_accept_and_full_reject(model, state):
    prompts = [repetitive(30, 6, 3), repetitive(45, 4, 4)]
    ref = plain(model, prompts, 20)
    answers = {tuple(p): r.token_ids for p, r in zip(prompts, ref)}
    for wrong in (False, True):
        tracer = TraceRecorder()
        llm = LLM(model, speculative="ngram", num_speculative_tokens=4, spec_state=state, tracer=tracer)
        llm.scheduler.drafter = OracleDrafter(answers, wrong=wrong)
        outs = llm.generate(prompts, SamplingParams(max_tokens=20, ignore_eos=True, return_logits=True))
        assert_same(outs, ref)
        s = llm.stats()
        if wrong:
            assert s["spec_accepted_tokens"] == 0  # every draft rejected: one token per step, as plain decoding
        else:
            assert s["spec_accepted_tokens"] == s["spec_draft_tokens"] > 0
            # tokens per verify step, as the trace's verify events count them (not drafts per step: 1 less)
            for o in outs:
                ev = [e for e in tracer.events if e.kind == "spec_verify" and e.req_id == o.req_id]
                assert o.metrics["spec_mean_accepted_length"] == pytest.approx(sum(e.kept for e in ev) / len(ev))
                assert o.metrics["spec_mean_accepted_length"] > 4.0  # most steps keep all 4 drafts and 1 more
        assert llm.pool.is_empty()


def test_rejected_kv_pages_are_freed_and_stop_tokens_cut_the_run(model):
    prompt = repetitive(33, 5, 9)
    ref = plain(model, [prompt], 16)[0]
    answers = {tuple(prompt): ref.token_ids}
    llm = LLM(model, speculative="ngram", num_speculative_tokens=5, page_size=4)
    llm.scheduler.drafter = OracleDrafter(answers)
    stop = ref.token_ids[6]
    out = llm.generate([prompt], SamplingParams(max_tokens=16, ignore_eos=True, stop_token_ids=(stop,)))[0]
    first = ref.token_ids.index(stop)
    assert out.token_ids == ref.token_ids[:first + 1] and out.finish_reason == "stop"
    decode = llm.tokenizer.decode  # the stop token's text is left out, as in a plain step
    assert out.text == decode(out.token_ids[:-1]) != decode(out.token_ids)
    # mid-generation: pages cover exactly the computed tokens (the rejected positions' pages went back)
    llm = LLM(model, speculative="ngram", num_speculative_tokens=5, page_size=4)
    llm.scheduler.drafter = OracleDrafter(answers, wrong=True)
    llm.add_request(prompt, SamplingParams(max_tokens=16, ignore_eos=True))
    for _ in range(4):
        llm.step()
    (req,) = llm.scheduler.running
    assert len(req.pages) == math.ceil(req.num_computed_tokens / 4)
    assert sorted(llm.pool.ownership()[PageKind.MLA_KV.value]) == sorted(req.pages)


@pytest.mark.parametrize("state,policy", [  # each strategy and each policy once by default, all pairs under -m slow
    pytest.param(s, p, marks=() if STATES.index(s) % 3 == ("chunk", "sglang", "branch").index(p) else pytest.mark.slow)
    for s in STATES for p in ("chunk", "sglang", "branch")])
def test_speculation_with_the_radix_cache_keeps_answers_and_boundaries(model, policy, state):
    """Accepted runs cross chunk boundaries: the cache saves exactly those states (from the verify
    step's per-token states), a later request that restores one answers as plain decoding."""
    prompt = repetitive(37, 6, 5)
    ref = plain(model, [prompt], 40)[0]
    llm = LLM(model, speculative="ngram", num_speculative_tokens=5, prefix_cache="radix", checkpoint_policy=policy,
              track_interval=16, spec_state=state)
    # every draft run ends in a wrong token: runs are kept but for their last draft, which is rejected
    llm.scheduler.drafter = OracleDrafter({tuple(prompt): ref.token_ids}, wrong_last=True)
    out = llm.generate([prompt], SamplingParams(max_tokens=40, ignore_eos=True, return_logits=True))[0]
    assert_same([out], [ref])
    s = llm.stats()
    assert 0 < s["spec_accepted_tokens"] < s["spec_draft_tokens"]  # drafts were rejected
    # nothing from a rejected draft entered the cache: every cached token path lies on the true answer
    truth = prompt + ref.token_ids
    for node in llm.prefix_cache.tree.nodes():
        path, n = [], node
        while n.parent is not None:
            path[:0] = list(n.key)
            n = n.parent
        assert path == truth[:len(path)]
    # a follow-up sharing prompt + 30 generated tokens: restored from a state saved during speculation
    follow = prompt + ref.token_ids[:30] + [7, 7, 7]
    want = plain(model, [follow], 8)[0]
    got = llm.generate([follow], SamplingParams(max_tokens=8, ignore_eos=True, return_logits=True))[0]
    assert_same([got], [want])
    if policy == "chunk":  # every chunk boundary the accepted runs crossed was checkpointed
        assert llm.stats()["cached_prompt_tokens"] >= 64
    llm.flush_cache()
    assert llm.pool.is_empty()


@pytest.mark.parametrize("state,mode", [
    pytest.param(s, m, marks=() if STATES.index(s) % 2 == ("all", "align").index(m) else pytest.mark.slow)
    for s in STATES for m in ("all", "align")])
def test_speculation_with_the_block_cache_saves_the_boundaries_of_kept_runs(model, mode, state):
    """vLLM-style state blocks: a block boundary inside a kept speculative run gets exactly its state
    (in "align" mode too, as vLLM's mamba_state_copy_boundary), and a later request resumes there."""
    prompt = repetitive(37, 6, 8)
    ref = plain(model, [prompt], 40)[0]
    llm = LLM(model, speculative="ngram", num_speculative_tokens=5, spec_state=state, prefix_cache="block",
              block_size=16, hash_unit=16, mamba_cache_mode=mode)
    llm.scheduler.drafter = OracleDrafter({tuple(prompt): ref.token_ids}, wrong_last=True)
    out = llm.generate([prompt], SamplingParams(max_tokens=40, ignore_eos=True, return_logits=True))[0]
    assert_same([out], [ref])
    before = llm.stats()["cached_prompt_tokens"]
    follow = prompt + ref.token_ids[:30] + [7, 7, 7]  # 70 tokens: the state block at 64 was crossed mid-run
    want = plain(model, [follow], 8)[0]
    got = llm.generate([follow], SamplingParams(max_tokens=8, ignore_eos=True, return_logits=True))[0]
    assert_same([got], [want])
    assert llm.stats()["cached_prompt_tokens"] - before == 64
    llm.flush_cache()
    assert llm.pool.is_empty()


@pytest.mark.parametrize("state", STATES)
def test_speculation_under_preemption_and_aborts(model, state):
    prompts = [repetitive(n, 5 + n % 4, n) for n in (30, 41, 26, 52)]
    ref = plain(model, prompts, 20)
    budget = 2 * (1 + rollback_strategy(state).extra_slots(3)) * STATE + 6 * PAGE  # slots: 2 requests x (1 + k) states
    llm = LLM(model, speculative="ngram", num_speculative_tokens=3, memory_budget_bytes=budget, max_num_seqs=4,
              spec_state=state)
    # the random-weight model's answers never repeat the prompt: draft the right answer with a wrong last token
    llm.scheduler.drafter = OracleDrafter({tuple(p): r.token_ids for p, r in zip(prompts, ref)}, wrong_last=True)
    _preempted_and_aborted(llm, prompts, ref, 20)
    assert llm.pool.is_empty()


def _preempted_and_aborted(llm, prompts, ref, max_tokens: int) -> None:
    """Run ``prompts`` on ``llm`` (a pool too small for all of them) and check greedy's answers ``ref``,
    preemptions, and accepted and rejected drafts; then abort a request mid-speculation and run the
    rest out."""
    outs = llm.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True, return_logits=True),
                        use_tqdm=False)
    s = llm.stats()
    assert s["preemptions"] > 0 and s["spec_verify_steps"] > 0
    assert 0 < s["spec_accepted_tokens"] < s["spec_draft_tokens"]
    assert_same(outs, ref)
    ids = [llm.add_request(p, SamplingParams(max_tokens=max_tokens, ignore_eos=True)) for p in prompts[:2]]
    for _ in range(5):
        llm.step()
    assert llm.abort(ids[0])
    while llm.has_unfinished():
        llm.step()


@pytest.mark.parametrize("state,prefix_cache", [
    pytest.param(s, c, marks=() if STATES.index(s) % 2 == 0 and STATES.index(s) // 2 % 2 == ("radix", "none").index(c)
                 else pytest.mark.slow) for s in STATES for c in ("none", "radix")])
def test_a_draft_model_under_preemption_aborts_and_a_prefix_cache(model, state, prefix_cache):
    """A draft model whose guesses are mostly right (the target's weights with a perturbed head), in a pool
    too small for all requests at once, with the prefix cache off and on: preempted requests restart
    (their draft caches too), accepted and rejected drafts mix, and every answer is plain greedy
    decoding's; a request aborted mid-speculation gives back everything it held."""
    import copy

    prompts = [repetitive(n, 5 + n % 4, n) for n in (30, 41, 26, 52)]
    ref = plain(model, prompts, 16)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        draft.lm_head.weight.add_(0.005 * torch.randn(draft.lm_head.weight.shape, generator=torch.Generator().manual_seed(0)))
    draft.clear_fused_weights()
    budget = 2 * (1 + rollback_strategy(state).extra_slots(3)) * STATE + 6 * PAGE
    llm = LLM(model, speculative="draft", draft_model=draft, num_speculative_tokens=3, memory_budget_bytes=budget,
              max_num_seqs=4, spec_state=state, prefix_cache=prefix_cache)
    _preempted_and_aborted(llm, prompts, ref, 16)
    assert not llm.scheduler.drafter._caches  # every draft cache released
    llm.flush_cache()
    assert llm.pool.is_empty()


def test_sampling_with_speculation_is_seeded_and_valid(model):
    prompt = repetitive(30, 5, 1)
    p = SamplingParams(max_tokens=12, temperature=0.8, seed=3, ignore_eos=True)
    a = LLM(model, speculative="ngram").generate([prompt], p)[0].token_ids
    b = LLM(model, speculative="ngram").generate([prompt], p)[0].token_ids
    assert a == b and len(a) == 12 and all(0 <= t < CFG.vocab_size for t in a)


@pytest.mark.parametrize("state", STATES)
def test_rejection_sampling_in_the_engine_reads_each_drafts_own_logits(model, state):
    """Sampling at temperature > 0 with ``top_k=1``: the target's distribution at every position is one-hot
    on its argmax, so rejection sampling must accept exactly the drafts greedy decoding would take and
    replace the first wrong one by the argmax -- the greedy answer, whatever the random draws. Any
    verify row read at the wrong offset, or a residual built from the wrong distribution, shows as a
    different token. Drafts: the oracle with its last draft wrong (partial accepts), then prompt lookup."""
    prompts = [repetitive(30, 6, 3), repetitive(41, 5, 6)]
    want = plain(model, prompts, 18)
    sampled = [SamplingParams(max_tokens=18, ignore_eos=True, temperature=0.9, top_k=1, seed=s) for s in (1, 2)]
    for oracle in (True, False):
        llm = LLM(model, speculative="ngram", num_speculative_tokens=3, spec_state=state)
        if oracle:
            llm.scheduler.drafter = OracleDrafter({tuple(p): w.token_ids for p, w in zip(prompts, want)},
                                                  wrong_last=True)
        got = llm.generate(prompts, sampled, use_tqdm=False)
        assert [g.token_ids for g in got] == [w.token_ids for w in want]
        s = llm.stats()
        assert s["spec_verify_steps"] > 0
        if oracle:  # accepted and rejected drafts in the same runs
            assert 0 < s["spec_accepted_tokens"] < s["spec_draft_tokens"]


def test_spec_config_object_and_defaults(model):
    llm = LLM(model, speculative=SpecConfig(num_speculative_tokens=2, prompt_lookup_max=2))
    assert llm.spec.num_speculative_tokens == 2 and llm.spec.state == "per_step"
    assert LLM(model).spec is None and "spec_verify_steps" not in LLM(model).stats()


@pytest.mark.parametrize("state", STATES)
def test_every_verify_is_traced_and_the_trace_round_trips(model, state):
    from kda_ref.trace import SpecVerify, TraceRecorder, dumps_event, loads_event

    prompt = repetitive(33, 5, 2)
    ref = plain(model, [prompt], 16)[0]
    rec = TraceRecorder()
    llm = LLM(model, speculative="ngram", num_speculative_tokens=4, tracer=rec, page_size=4, spec_state=state)
    llm.scheduler.drafter = OracleDrafter({tuple(prompt): ref.token_ids}, wrong_last=True)
    llm.generate([prompt], SamplingParams(max_tokens=16, ignore_eos=True))
    ev = [e for e in rec.events if isinstance(e, SpecVerify)]
    assert len(ev) == llm.stats()["spec_verify_steps"] and all(e.strategy == state for e in ev)
    phases = [p for e in rec.events if type(e).__name__ == "BatchComposition" for p in e.phases]
    # the first token comes from the prefill; a step with nothing to draft decodes one token
    assert sum(e.kept for e in ev) + 1 + phases.count("decode") == 16
    for e in ev[:-1]:  # every run but the last: its last draft was wrong, the others right
        assert e.rejected == 1 and e.verdicts() == ["accepted"] * (len(e.drafts) - 1) + ["rejected"]
    assert ev[-1].verdicts().count("accepted") == min(ev[-1].kept, ev[-1].num_accepted)  # cut at max_tokens
    cut = SpecVerify(step=1, req_id=0, context_len=5, drafts=[1, 2, 3], num_accepted=2, next_token=4, kept=1,
                     strategy="per_step", committed_row=0, rejected=3, freed_pages=[])
    assert cut.verdicts() == ["accepted", "cut", "rejected"]  # the first draft was a stop token: emitted, then cut
    tree = SpecVerify(step=1, req_id=0, context_len=5, drafts=[1, 2, 3, 4], num_accepted=1, next_token=4, kept=2,
                      strategy="per_step", committed_row=1, rejected=3, freed_pages=[], tree_parents=[-1, -1, 0, 2],
                      accepted_path=[2])
    assert tree.verdicts() == ["accepted", "rejected", "rejected"]  # per depth of a 3-deep tree
    assert loads_event(dumps_event(ev[0])) == ev[0]
    assert phases.count("verify") == len(ev)
    with pytest.raises(Exception, match="kept"):
        SpecVerify(step=1, req_id=0, context_len=5, drafts=[1, 2], num_accepted=1, next_token=3, kept=3,
                   strategy="per_step", committed_row=2, rejected=0, freed_pages=[])


# ---- a draft model --------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", [pytest.param(s, marks=() if s == "slots" else pytest.mark.slow) for s in STATES])
def test_a_draft_model_drafts_and_its_states_roll_back(model, state):
    """The target as its own draft model proposes exactly the greedy continuation (every draft
    accepted); a different tiny model proposes mostly wrong drafts. Both give plain greedy's tokens,
    and the draft's own cache ends where the target's committed tokens end."""
    prompts = [repetitive(35, 6, 11), repetitive(20, 3, 12)]
    ref = plain(model, prompts, 30)
    same = LLM(model, speculative="draft", draft_model=model, num_speculative_tokens=4, spec_state=state)
    outs = same.generate(prompts, SamplingParams(max_tokens=30, ignore_eos=True, return_logits=True))
    assert_same(outs, ref)
    s = same.stats()
    assert s["spec_accepted_tokens"] == s["spec_draft_tokens"] > 0
    other = HybridModel(CFG, seed=5, chunk_size=16).eval()
    llm = LLM(model, speculative="draft", draft_model=other, num_speculative_tokens=3, spec_state=state)
    ids = [llm.add_request(p, SamplingParams(max_tokens=30, ignore_eos=True, return_logits=True)) for p in prompts]
    done = {}
    for _ in range(5):
        done.update({o.req_id: o for o in llm.step()})
    drafter = llm.scheduler.drafter
    for req in llm.scheduler.running:  # rolled back: the draft holds exactly the target's committed tokens
        assert drafter._caches[req.req_id].lengths[0] <= req.num_computed_tokens + 1
    assert drafter.cache_bytes() > 0
    while llm.has_unfinished():
        done.update({o.req_id: o for o in llm.step()})
    assert_same([done[i] for i in ids], ref)
    assert drafter.cache_bytes() == 0  # released with the requests
    assert llm.stats()["spec_accepted_tokens"] < llm.stats()["spec_draft_tokens"]


def test_the_draft_model_is_checked(monkeypatch, tmp_path):
    from kda_ref.engine import llm as llm_mod
    from kda_ref.model import save_pretrained
    from kda_ref.speculative import model_drafter as draft_mod

    target = HybridModel(CFG, seed=0, chunk_size=16)
    small_vocab = ModelConfig.micro()
    small_vocab = ModelConfig(**{**small_vocab.__dict__, "vocab_size": 300})
    folder = save_pretrained(HybridModel(small_vocab, seed=0), tmp_path / "small_vocab")
    built = []  # nothing is allocated for a refused draft model: no pool, no draft weights
    monkeypatch.setattr(llm_mod, "UnifiedMemoryPool", lambda *a, **k: built.append("pool"))
    monkeypatch.setattr(HybridModel, "__init__", lambda *a, **k: built.append("draft"))
    monkeypatch.setattr(draft_mod, "load_pretrained", lambda *a, **k: built.append("draft folder"))
    for bad in (small_vocab, folder, str(folder)):
        with pytest.raises(ValueError, match="draft_model: its vocabulary has 300 tokens"):
            LLM(target, speculative="draft", draft_model=bad)
    with pytest.raises(ValueError, match="draft_model: .* is not a folder"):
        LLM(target, speculative="draft", draft_model=tmp_path / "missing")
    with pytest.raises(ValueError, match="^draft_model: .* holds no config.json"):
        LLM(target, speculative="draft", draft_model=tmp_path)
    assert built == []
    monkeypatch.undo()
    with pytest.raises(ValueError, match="draft_model: needed with speculative='draft'"):
        LLM(target, speculative="draft")
    with pytest.raises(ValueError, match="draft_model: expected a HybridModel"):
        LLM(target, speculative="draft", draft_model=42)
    with pytest.raises(ValueError, match="draft_model: given without speculative"):
        LLM(target, draft_model=target)


def test_a_draft_model_loads_from_a_checkpoint_folder(tmp_path):
    """``draft_model=`` a folder: the draft model is read from it and drafts -- here the target's own
    weights, so every draft is accepted -- and the answer is plain decoding's."""
    from kda_ref.model import save_pretrained

    target = HybridModel(CFG, seed=0, chunk_size=16)
    folder = save_pretrained(target, tmp_path / "draft")
    prompt = [5, 6, 7, 8] * 4
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    want = LLM(target).generate([prompt], params, use_tqdm=False)[0].token_ids
    llm = LLM(target, speculative="draft", draft_model=folder, num_speculative_tokens=3)
    assert llm.generate([prompt], params, use_tqdm=False)[0].token_ids == want
    s = llm.stats()
    assert s["spec_verify_steps"] > 0 and s["spec_accepted_tokens"] == s["spec_draft_tokens"]


def test_a_slots_verify_refuses_slots_its_request_does_not_own(model):
    """The verify step writes ``spec_slots`` in place without checks of its own, so the runner checks them
    first: a request whose slot list names a unit it does not hold fails, and that unit is not written."""
    prompt = repetitive(40, 7, 0)
    llm = LLM(model, speculative="ngram", num_speculative_tokens=3, spec_state="slots")
    ref = plain(model, [prompt], 12)
    llm.scheduler.drafter = OracleDrafter({tuple(prompt): ref[0].token_ids})
    rid = llm.add_request(prompt, SamplingParams(max_tokens=12, ignore_eos=True))
    llm.step()  # the prefill
    (req,) = llm.scheduler.running
    t = llm.pool.tensors
    foreign = next(i for i in range(1, t.num_slots) if llm.pool.owner_of(PageKind.KDA_STATE, i) is None)
    t.recurrent[:, foreign] = 7.0
    req.spec_slots[2] = foreign
    outs = {}
    while llm.has_unfinished():
        outs.update({o.req_id: o for o in llm.step()})
    assert outs[rid].finish_reason == "error" and "spec_slots" in outs[rid].error
    assert bool((t.recurrent[:, foreign] == 7.0).all())


@pytest.mark.parametrize("wrong_last", [False, True])
def test_accepted_drafts_are_counted_per_depth_as_vllm_counts_them(model, wrong_last):
    """``spec_accepted_per_pos[i]``: verifies whose draft at depth ``i + 1`` was accepted. All three drafts right:
    every full verify counts at every depth; the last one always wrong: depths 1 and 2 only."""
    prompt, params = [5, 6, 7, 5, 6, 7, 5, 6], SamplingParams(max_tokens=13, ignore_eos=True)
    plain = LLM(model).generate([prompt], params)[0].token_ids
    llm = LLM(model, speculative="ngram", num_speculative_tokens=3)
    llm.scheduler.drafter = OracleDrafter({tuple(prompt): plain}, wrong_last=wrong_last)
    assert llm.generate([prompt], params)[0].token_ids == plain
    st = llm.stats()
    per_pos, steps = st["spec_accepted_per_pos"], st["spec_verify_steps"]
    assert sum(per_pos) == st["spec_accepted_tokens"] and per_pos[0] == steps > 0
    assert (per_pos[2] == 0) if wrong_last else (per_pos[2] >= steps - 1)
    assert per_pos[0] >= per_pos[1] >= per_pos[2]
