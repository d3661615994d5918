"""RecoverSSM (``spec_state="recoverssm"``): the verify stores each token's correction ``u_t``, the commit
rebuilds the accepted state in closed form. Its pieces against the recurrence, and the engine's committed
states against per-step states for every accepted length ``0 .. k``."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.model import HybridModel
from kda_ref.speculative import Drafter
from kda_ref.ops import l2norm
from kda_ref.ops.gate import kda_gate, kda_gate_lowerbound
from kda_ref.ops.kda_recurrent import _verify_fused, recurrent_kda_verify, segment_corrections
from kda_ref.speculative import STRATEGIES, RecoverSSM, recover, rollback_bytes
from kda_ref.speculative.recoverssm import correction_record_bytes
from kda_ref.trace import SpecVerify, TraceRecorder

TOL = dict(rtol=1e-5, atol=1e-5)  # fp32: the closed form sums in another order than the recurrence


def _inputs(N: int, L: int, H: int, K: int, V: int, seed: int, bounded: bool):
    """A verify's inputs with gates as the KDA layer makes them: Kimi-Linear's unbounded gate, or K3's
    bounded one (every log decay in [-5, 0))."""
    g = torch.Generator().manual_seed(seed)
    raw = 3 * torch.randn(N, L, H, K, generator=g)
    A_log, dt_bias = torch.randn(H, generator=g), torch.randn(H * K, generator=g)
    gate = (kda_gate_lowerbound(raw, A_log, dt_bias, lower_bound=-5.0) if bounded else kda_gate(raw, A_log, dt_bias))
    q, k = l2norm(torch.randn(N, L, H, K, generator=g)), l2norm(torch.randn(N, L, H, K, generator=g))
    v, beta = torch.randn(N, L, H, V, generator=g), torch.rand(N, L, H, generator=g)
    S0 = torch.randn(N, H, K, V, generator=g)
    return q, k, v, gate.float(), beta, S0


def _u_by_definition(k, v, g, beta, S0):
    """``u_t = beta_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)`` by the loop, in float64 (one sequence)."""
    S, us = S0.double().clone(), []
    for t in range(k.shape[0]):
        S = S * g[t].double().exp().unsqueeze(-1)
        u = beta[t].double().unsqueeze(-1) * (v[t].double() - torch.einsum("hkv,hk->hv", S, k[t].double()))
        S = S + k[t].double().unsqueeze(-1) * u.unsqueeze(-2)
        us.append(u)
    return torch.stack(us)


@pytest.mark.parametrize("bounded", [False, True])
def test_every_verify_kernel_stores_the_correction_the_recurrence_wrote(bounded):
    """The eager verify kernel, its traced form, the Triton kernel and the reference path's reading off the
    states all store the same ``u_t`` -- the delta rule's definition, computed in float64."""
    from kda_ref.ops.dispatcher import KDAKernelDispatcher

    N, L, H, K, V = 3, 5, 2, 16, 16
    q, k, v, g, beta, S0 = _inputs(N, L, H, K, V, seed=1, bounded=bounded)
    want = torch.stack([_u_by_definition(k[n], v[n], g[n], beta[n], S0[n]) for n in range(N)]).float()
    eager, fused = torch.empty(N, L, H, V), torch.empty(N, L, H, V)
    o, steps = recurrent_kda_verify(q, k, v, g, beta, S0, corrections=eager)
    _verify_fused(q, k, v, g, beta, S0, K**-0.5, False, None, fused)
    torch.testing.assert_close(eager, want, **TOL)
    torch.testing.assert_close(fused, want, **TOL)
    tri = torch.empty(N, L, H, V)
    o_t, _ = KDAKernelDispatcher("triton").verify_(q, k, v, g, beta, state_pool=S0.clone(),
                                                   state_indices=torch.arange(N), corrections=tri)
    torch.testing.assert_close(tri, want, **TOL)
    torch.testing.assert_close(o_t, o, **TOL)
    packed = lambda t: t.reshape(N * L, *t.shape[2:])  # noqa: E731  [N, L, ...] -> [T, ...]
    read = segment_corrections(packed(steps), S0, torch.arange(0, N * L + 1, L), packed(k), packed(v), packed(g),
                               packed(beta))
    torch.testing.assert_close(read.view(N, L, H, V), want, **TOL)


@pytest.mark.parametrize("bounded", [False, True])
def test_the_closed_form_equals_the_recurrence_for_every_accepted_length(bounded):
    """``recover`` over the first ``kept`` records (``kept = 1 .. 1 + k``: 0 .. k drafts accepted) is the
    state the recurrence reached after them; its ``all_steps`` form gives every one at once."""
    L, H, K, V = 6, 4, 32, 32
    q, k, v, g, beta, S0 = _inputs(1, L, H, K, V, seed=2, bounded=bounded)
    u = torch.empty(1, L, H, V)
    _, steps = recurrent_kda_verify(q, k, v, g, beta, S0, corrections=u)
    for kept in range(1, L + 1):
        got = recover(S0[0], k[0, :kept], g[0, :kept], u[0, :kept])
        torch.testing.assert_close(got, steps[0, kept - 1], **TOL)
    torch.testing.assert_close(recover(S0[0], k[0], g[0], u[0], all_steps=True), steps[0], **TOL)


def test_the_fixed_shape_closed_form_selects_each_rows_kept_state():
    """``recover_kept`` (a static step's commit): every row's state after its kept records, picked by an index
    tensor, equals :func:`recover` over the kept records alone (0 keeps the committed state), and its
    states after every record are the recurrence's."""
    from kda_ref.speculative.recoverssm import recover_kept

    N, L, H, K = 5, 4, 2, 16
    q, k, v, g, beta, S0 = _inputs(N, L, H, K, K, seed=4, bounded=True)
    u = torch.empty(N, L, H, K)
    _, steps = recurrent_kda_verify(q, k, v, g, beta, S0, corrections=u)
    kept = torch.tensor([0, 1, 2, 4, 3])
    final, every = recover_kept(S0, k, g, u, kept)
    torch.testing.assert_close(every, steps, **TOL)
    for n, j in enumerate(kept.tolist()):
        want = S0[n] if j == 0 else recover(S0[n], k[n, :j], g[n, :j], u[n, :j])
        torch.testing.assert_close(final[n], want, **TOL)


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 9), H=st.integers(1, 3), K=st.sampled_from([4, 8, 16]), seed=st.integers(0, 10**6),
       bounded=st.booleans(), data=st.data())
def test_the_closed_form_at_a_random_acceptance_is_the_recurrences_state(L, H, K, seed, bounded, data):
    """Property: any shape, either gate, any acceptance -- the closed form over the kept records is the
    recurrence's state, and the state after a rejected token never leaks in (the records past ``kept``
    are changed and the answer stays)."""
    kept = data.draw(st.integers(1, L), label="kept")
    q, k, v, g, beta, S0 = _inputs(1, L, H, K, K, seed=seed, bounded=bounded)
    u = torch.empty(1, L, H, K)
    _, steps = recurrent_kda_verify(q, k, v, g, beta, S0, corrections=u)
    got = recover(S0[0], k[0, :kept], g[0, :kept], u[0, :kept])
    torch.testing.assert_close(got, steps[0, kept - 1], rtol=1e-5, atol=1e-5 * max(1.0, float(got.abs().max())))
    u2 = u.clone()
    u2[0, kept:] += 1.0  # what the rejected drafts wrote
    assert torch.equal(recover(S0[0], k[0, :kept], g[0, :kept], u2[0, :kept]), got)


def test_recoverssm_is_registered_and_keeps_no_state_per_token():
    """The registry names it; it holds one slot; its record per token is far below a state, and at K3's sizes
    the four strategies' bytes per request order as the references say."""
    s = STRATEGIES["recoverssm"]
    assert isinstance(s, RecoverSSM) and s.extra_slots(5) == 0 and not s.record.keeps_step_states
    assert s.record.keeps_corrections and not s.supports_trees
    cfg = ModelConfig.kimi_k3()
    state = cfg.state_bytes()["kda_per_seq"]
    assert correction_record_bytes(cfg) < state / 20
    b = {name: rollback_bytes(cfg, 3, name) for name in STRATEGIES}
    assert b["recoverssm"] < b["replay"] < b["per_step"] == b["slots"] == 4 * state


class _RandomAcceptDrafter(Drafter):
    """Drafts the true continuation with the first ``j`` drafts right and the rest wrong, ``j`` drawn from
    a generator keyed on the position: two engines given the same answers see the same drafts."""

    def __init__(self, answers: dict[tuple, list[int]], seed: int):
        self.answers, self.seed = answers, seed

    def release(self, seq_id):
        pass

    def propose(self, seq_id, tokens, k):
        for prompt, answer in self.answers.items():
            if tuple(tokens[:len(prompt)]) == prompt:
                done = len(tokens) - len(prompt)
                nxt = list(answer[done:done + k])
                right = random.Random(self.seed * 100003 + len(tokens)).randint(0, len(nxt))
                return nxt[:right] + [(t + 1) % 256 for t in nxt[right:]]
        return []


@pytest.mark.parametrize("settings_", [{}, {"static_decode": True},
                                       pytest.param({"prefix_cache": "radix"}, marks=pytest.mark.slow)],
                         ids=["eager", "static", "radix"])
def test_the_engine_commits_the_recurrences_state_for_every_accepted_length(settings_):
    """Two engines in lockstep on the same drafts, one keeping per-token states and one RecoverSSM: after
    every step each request's committed state and conv window agree (fp32, 1e-5), every accepted
    length 0 .. k occurs, and the tokens are plain greedy decoding's."""
    cfg, k = ModelConfig.micro(), 4
    model = HybridModel(cfg, seed=0, chunk_size=16).eval()
    prompts = [[(7 * i + 3) % 256 for i in range(n)] for n in (21, 34)]
    params = SamplingParams(max_tokens=28, ignore_eos=True)
    plain = LLM(model).generate(prompts, params, use_tqdm=False)
    answers = {tuple(p): o.token_ids for p, o in zip(prompts, plain)}
    rec = TraceRecorder()
    engines = [LLM(model, speculative="ngram", num_speculative_tokens=k, spec_state=s, tracer=t, **settings_)
               for s, t in (("per_step", None), ("recoverssm", rec))]
    for llm in engines:
        llm.scheduler.drafter = _RandomAcceptDrafter(answers, seed=1)
        for p in prompts:
            llm.add_request(p, params)
    outs = {0: {}, 1: {}}
    while engines[0].has_unfinished():
        for i, llm in enumerate(engines):
            for o in llm.step():
                outs[i][o.req_id] = o.token_ids
        a, b = (sorted(llm.scheduler.running, key=lambda r: r.req_id) for llm in engines)
        assert [r.num_computed_tokens for r in a] == [r.num_computed_tokens for r in b]
        for ra, rb in zip(a, b):
            ta, tb = engines[0].pool.tensors, engines[1].pool.tensors
            torch.testing.assert_close(tb.recurrent[:, rb.slot], ta.recurrent[:, ra.slot], **TOL)
            torch.testing.assert_close(tb.conv[:, rb.slot].float(), ta.conv[:, ra.slot].float(), **TOL)
    assert not engines[1].has_unfinished()
    assert sorted(outs[1].values()) == sorted(outs[0].values()) == sorted(o.token_ids for o in plain)
    accepted = {e.num_accepted for e in rec.events if isinstance(e, SpecVerify) and len(e.drafts) == k}
    assert accepted == set(range(k + 1))
    assert all(llm.pool.is_empty() for llm in engines if not settings_.get("prefix_cache"))
