"""The rest of the KDA layer (gate, l2norm, short conv, gated RMSNorm) and MLA's two forms."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import torch.nn.functional as F

from kda_ref.ops import (
    causal_conv1d,
    causal_conv1d_update,
    kda_gate,
    kda_gate_lowerbound,
    l2norm,
    mla_attention_absorbed,
    mla_attention_naive,
    rms_norm_gated,
)
from kda_ref.ops.mla_paged import paged_mla_decode_ref
from oracles import fla_naive


def test_softplus_gate_formula_and_shapes():
    gen = torch.Generator().manual_seed(0)
    H, K = 3, 4
    g_raw = torch.randn(5, H * K, generator=gen) * 10  # includes large values (softplus ~ identity)
    A_log = torch.randn(1, 1, H, 1, generator=gen)
    dt_bias = torch.randn(H * K, generator=gen)
    g = kda_gate(g_raw, A_log, dt_bias, head_dim=K)
    assert g.shape == (5, H, K) and g.dtype == torch.float32 and (g <= 0).all()
    for t in range(5):
        for h in range(H):
            for d in range(K):
                x = float(g_raw[t, h * K + d] + dt_bias[h * K + d])
                want = -math.exp(float(A_log.flatten()[h])) * math.log1p(math.exp(x))
                assert abs(float(g[t, h, d]) - want) < 1e-4 * max(1.0, abs(want))


def test_lowerbound_gate_is_bounded():
    g_raw = torch.randn(100, 2, 8) * 50
    g = kda_gate_lowerbound(g_raw, torch.zeros(2), torch.zeros(16), lower_bound=-5.0)
    assert (g >= -5.0).all() and (g <= 0).all() and g.min() < -4.9
    with pytest.raises(ValueError, match="^lower_bound:"):
        kda_gate_lowerbound(g_raw, torch.zeros(2), lower_bound=1.0)


@pytest.mark.oracle
def test_gate_matches_fla():
    fla_naive()
    from fla.ops.kda.gate import naive_kda_gate

    g_raw = torch.randn(2, 7, 3, 16)
    A_log = torch.randn(3)
    dt_bias = torch.randn(48)
    torch.testing.assert_close(kda_gate(g_raw, A_log, dt_bias), naive_kda_gate(g_raw, A_log, dt_bias), atol=1e-6, rtol=0)


def test_gate_bad_dt_bias():
    with pytest.raises(ValueError, match="^dt_bias:"):
        kda_gate(torch.randn(4, 2, 8), torch.zeros(2), torch.zeros(2))  # [HV] instead of [HV*K]


def test_l2norm_eps_convention():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0], [1e-4, 0.0]])
    y = l2norm(x)
    torch.testing.assert_close(y[0], torch.tensor([0.6, 0.8]), atol=1e-6, rtol=0)
    assert (y[1] == 0).all()
    # x / sqrt(sum + eps), not F.normalize's x / max(|x|, eps)
    assert abs(float(y[2, 0]) - 1e-4 / math.sqrt(1e-8 + 1e-6)) < 1e-6
    assert abs(float(F.normalize(x, dim=-1)[2, 0]) - float(y[2, 0])) > 0.5


def test_rms_norm_gated_formula():
    x, gate, w = torch.randn(3, 4, 8), torch.randn(3, 4, 8), torch.randn(8)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w * torch.sigmoid(gate)
    torch.testing.assert_close(rms_norm_gated(x, gate, w, 1e-5), want)


def _conv_reference(x, w, prev):
    """Direct sum: y_t = silu(sum_i w[:, i] x_{t-W+1+i}) with history prev [D, W-1]."""
    D, W = w.shape
    full = torch.cat([prev.t(), x])
    return F.silu(torch.stack([(full[t:t + W].t() * w).sum(-1) for t in range(x.shape[0])]))


@pytest.mark.parametrize("lens,W", [([1, 2, 9], 4), ([2, 2, 2], 4), ([9, 9, 9], 4), ([1, 1, 1], 4), ([3, 3, 3], 2),
                                    ([5, 5, 5], 1)])
def test_causal_conv1d_varlen_and_states(lens, W):
    """Unequal lengths (one packed row index) and equal ones (each sequence's taps behind its history, no copy),
    sequences shorter than the window among them."""
    gen = torch.Generator().manual_seed(0)
    D = 6
    x = torch.randn(sum(lens), D, generator=gen)
    w = torch.randn(D, W, generator=gen)
    prev = torch.randn(3, D, W - 1, generator=gen)
    has = torch.tensor([True, False, True])
    prev[1] = float("nan")  # a window without a state is never read, whatever it holds
    given = prev.clone()
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    y, st = causal_conv1d(x, w, cu_seqlens=cu, conv_state=prev, has_initial_state=has)
    assert torch.equal(prev.nan_to_num(), given.nan_to_num())  # the caller's windows are not written
    for n, (a, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        p = prev[n] if has[n] else torch.zeros(D, W - 1)
        torch.testing.assert_close(y[a:e], _conv_reference(x[a:e], w, p), atol=1e-5, rtol=0)
        full = torch.cat([p.t(), x[a:e]])
        torch.testing.assert_close(st[n], full[full.shape[0] - (W - 1):].t())  # short sequences reach into prev


def test_conv_decode_continues_prefill():
    gen = torch.Generator().manual_seed(1)
    D, W = 5, 4
    x = torch.randn(12, D, generator=gen)
    w = torch.randn(D, W, generator=gen)
    y_full, _ = causal_conv1d(x[None], w)
    y, st = causal_conv1d(x[:7], w, cu_seqlens=torch.tensor([0, 7]))
    outs = [y]
    for t in range(7, 12):
        y_t, st = causal_conv1d_update(x[t:t + 1], st, w)
        outs.append(y_t)
    torch.testing.assert_close(torch.cat(outs), y_full[0], atol=1e-6, rtol=0)


def test_conv_window_from_another_boundary_changes_the_output():
    """Boundary consistency at the op level: a conv state taken one token late gives other outputs."""
    gen = torch.Generator().manual_seed(2)
    D, W = 4, 4
    x = torch.randn(10, D, generator=gen)
    w = torch.randn(D, W, generator=gen)
    _, st6 = causal_conv1d(x[:6], w, cu_seqlens=torch.tensor([0, 6]))
    _, st7 = causal_conv1d(x[:7], w, cu_seqlens=torch.tensor([0, 7]))
    y_ok, _ = causal_conv1d_update(x[6:7], st6, w)
    y_bad, _ = causal_conv1d_update(x[6:7], st7, w)
    y_full, _ = causal_conv1d(x[None, :7], w)
    torch.testing.assert_close(y_ok[0], y_full[0, 6], atol=1e-6, rtol=0)
    assert (y_bad - y_ok).abs().max() > 1e-3


def test_conv_bad_inputs():
    with pytest.raises(ValueError, match="^conv_state:"):
        causal_conv1d(torch.randn(5, 4), torch.randn(4, 4), cu_seqlens=torch.tensor([0, 5]),
                      conv_state=torch.zeros(1, 4, 4))
    with pytest.raises(ValueError, match="^weight:"):
        causal_conv1d_update(torch.randn(2, 4), torch.zeros(2, 4, 3), torch.randn(3, 4))
    with pytest.raises(ValueError, match="^cu_seqlens:"):
        causal_conv1d(torch.randn(5, 4), torch.randn(4, 4), cu_seqlens=torch.tensor([0, 3]))


def _mla_inputs(Tq, Tk, H=4, Dn=8, Dp=4, Dc=16, Dv=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    return r(Tq, H, Dn), r(Tq, H, Dp), r(Tk, Dc), r(Tk, Dp), r(H * (Dn + Dv), Dc), Dv


@pytest.mark.parametrize("Tq,Tk", [(1, 1), (1, 9), (5, 5), (3, 11)])
def test_mla_naive_equals_absorbed(Tq, Tk):
    q_nope, q_pe, c_kv, k_pe, w, Dv = _mla_inputs(Tq, Tk)
    a = mla_attention_naive(q_nope, q_pe, c_kv, k_pe, w, Dv, 0.3)
    b = mla_attention_absorbed(q_nope, q_pe, c_kv, k_pe, w, Dv, 0.3)
    assert a.shape == (Tq, 4, Dv)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_mla_is_causal_and_shares_k_pe_unrotated():
    q_nope, q_pe, c_kv, k_pe, w, Dv = _mla_inputs(4, 6)
    base = mla_attention_naive(q_nope, q_pe, c_kv, k_pe, w, Dv, 0.3)
    c2 = c_kv.clone()
    c2[-1] += 1.0  # the last key is only visible to the last query
    out = mla_attention_naive(q_nope, q_pe, c2, k_pe, w, Dv, 0.3)
    torch.testing.assert_close(out[:-1], base[:-1])
    assert (out[-1] - base[-1]).abs().max() > 1e-6
    # NoPE: permuting earlier keys (not the newest) does not change the last query's output
    perm = torch.tensor([2, 0, 4, 1, 3, 5])
    out_p = mla_attention_naive(q_nope[-1:], q_pe[-1:], c_kv[perm], k_pe[perm], w, Dv, 0.3)
    torch.testing.assert_close(out_p[0], base[-1], atol=1e-12, rtol=0)


@pytest.mark.parametrize("Dv", [6, 12, 20])  # narrower, equal to and wider than the query / key heads (Dn + Dp = 12)
def test_mla_naive_batched_equals_one_sequence_at_a_time(Dv):
    """A leading batch dimension attends each sequence on its own (one call for a prefill of equal prompts),
    whichever side the head-width padding goes to."""
    seqs = [_mla_inputs(5, 5, Dv=Dv, seed=s)[:4] for s in range(3)]
    w = _mla_inputs(5, 5, Dv=Dv)[4]
    stacked = [torch.stack(parts) for parts in zip(*seqs)]  # q_nope [3, 5, H, Dn], ..., c_kv [3, 5, Dc], ...
    got = mla_attention_naive(*stacked, w, Dv, 0.3)
    assert got.shape == (3, 5, 4, Dv)
    for n, (q_nope, q_pe, c_kv, k_pe) in enumerate(seqs):
        torch.testing.assert_close(got[n], mla_attention_absorbed(q_nope, q_pe, c_kv, k_pe, w, Dv, 0.3),
                                   atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="^q_nope / q_pe / c_kv / k_pe:"):
        mla_attention_naive(stacked[0], stacked[1], stacked[2][:2], stacked[3], w, Dv, 0.3)


def test_mla_naive_padded_sequences_see_only_their_own_keys():
    """Fresh sequences of different lengths padded at their ends (with large junk) to the longest, in one
    batched call: under the causal mask every real query attends exactly as its sequence alone."""
    lens = [5, 2, 4]
    seqs = [_mla_inputs(L, L, seed=10 + L) for L in lens]
    w, Dv = seqs[0][4], seqs[0][5]
    padded = []
    for i in range(4):  # q_nope, q_pe, c_kv, k_pe: each padded to 5 rows with large junk
        parts = [torch.cat([s_[i], torch.full((5 - s_[i].shape[0], *s_[i].shape[1:]), 9.0, dtype=torch.float64)])
                 for s_ in seqs]
        padded.append(torch.stack(parts))
    got = mla_attention_naive(*padded, w, Dv, 0.3)
    for b, (L, s_) in enumerate(zip(lens, seqs)):
        torch.testing.assert_close(got[b, :L], mla_attention_absorbed(*s_[:4], w, Dv, 0.3), atol=1e-12, rtol=0)


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=5), W=st.sampled_from([1, 2, 4]),
       data=st.data())
def test_causal_conv1d_packs_any_lengths_and_histories(lens, W, data):
    """The packed short conv (every sequence behind its W-1 inputs of history, one multiply-add per tap)
    against the direct sum per sequence, sequences shorter than the window included."""
    gen = torch.Generator().manual_seed(len(lens) * 10 + W)
    D = 3
    x = torch.randn(sum(lens), D, generator=gen, dtype=torch.float64)
    w = torch.randn(D, W, generator=gen, dtype=torch.float64)
    prev = torch.randn(len(lens), D, W - 1, generator=gen, dtype=torch.float64)
    has = torch.tensor(data.draw(st.lists(st.booleans(), min_size=len(lens), max_size=len(lens))))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    y, st_ = causal_conv1d(x, w, cu_seqlens=cu, conv_state=prev, has_initial_state=has)
    for n, (a, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        p = prev[n] if has[n] else torch.zeros(D, W - 1, dtype=torch.float64)
        torch.testing.assert_close(y[a:e], _conv_reference(x[a:e], w, p), atol=1e-12, rtol=0)
        torch.testing.assert_close(st_[n], torch.cat([p.t(), x[a:e]])[x[a:e].shape[0]:].t(), atol=0, rtol=0)


def test_absorbed_decode_equals_paged_reference():
    """Our absorbed MLA step, written through the paged-cache reference, gives the same output."""
    q_nope, q_pe, c_kv, k_pe, w, Dv = _mla_inputs(1, 13)
    H, Dn, Dc = 4, 8, 16
    want = mla_attention_absorbed(q_nope, q_pe, c_kv, k_pe, w, Dv, 0.3)
    w_uk = w.view(H, Dn + Dv, Dc)[:, :Dn]
    w_uv = w.view(H, Dn + Dv, Dc)[:, Dn:]
    q_lat = torch.einsum("qhn,hnc->qhc", q_nope, w_uk)
    page = 4
    kv = torch.zeros(6, page, Dc + 4, dtype=torch.float64)
    table = torch.tensor([[3, 1, 5, 2]], dtype=torch.int32)
    rows = torch.cat([c_kv, k_pe], -1)
    for p in range(13):
        kv[table[0, p // page], p % page] = rows[p]
    o_lat = paged_mla_decode_ref(q_lat, q_pe, kv, table, torch.tensor([13], dtype=torch.int32), 0.3)
    torch.testing.assert_close(torch.einsum("qhc,hvc->qhv", o_lat, w_uv), want, atol=1e-10, rtol=0)
