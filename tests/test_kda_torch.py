"""Torch KDA references: recurrent == chunk, segmentation invariance, chunk-start states, oracles."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref.ops import chunk_kda, recurrent_kda
from oracles import fla_naive
from kda_inputs import make_kda_inputs, make_state


def literal_kda(q, k, v, g, beta, scale, S0):
    """The matrix formula, float64, one sequence: S_t = (I - b k k^T) Diag(exp g) S + b k v^T."""
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    G = HV // H
    S = S0.clone()
    out = torch.zeros(T, HV, V, dtype=torch.float64)
    eye = torch.eye(K, dtype=torch.float64)
    for t in range(T):
        for h in range(HV):
            kt, qt = k[t, h // G], q[t, h // G]
            A = (eye - beta[t, h] * torch.outer(kt, kt)) @ torch.diag(g[t, h].exp())
            S[h] = A @ S[h] + beta[t, h] * torch.outer(kt, v[t, h])
            out[t, h] = S[h].t() @ (scale * qt)
    return out, S


def test_recurrent_matches_the_literal_matrix_formula():
    q, k, v, g, b = make_kda_inputs(1, 9, 2, 5, 3, HV=4, dtype=torch.float64)
    S0 = make_state(1, 4, 5, 3, dtype=torch.float64)
    o, S = recurrent_kda(q, k, v, g, b, scale=0.7, initial_state=S0, output_final_state=True)
    o_ref, S_ref = literal_kda(q[0], k[0], v[0], g[0], b[0], 0.7, S0[0])
    torch.testing.assert_close(o[0], o_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(S[0], S_ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "B,T,H,HV,K,V,C,init",
    [
        (1, 1, 2, 2, 8, 8, 64, False),  # T = 1
        (1, 1, 2, 2, 8, 8, 64, True),
        (2, 100, 2, 2, 16, 8, 64, True),  # T not a multiple of the chunk
        (2, 100, 2, 2, 16, 8, 64, False),
        (1, 300, 1, 3, 16, 16, 32, True),  # grouped value heads, several chunks
        (3, 64, 2, 4, 8, 16, 16, True),  # exact multiple
        (1, 37, 2, 2, 8, 8, 4, True),  # tiny chunks
    ],
)
def test_chunk_equals_recurrent_float64(B, T, H, HV, K, V, C, init):
    q, k, v, g, b = make_kda_inputs(B, T, H, K, V, HV=HV, dtype=torch.float64)
    S0 = make_state(B, HV, K, V, dtype=torch.float64) if init else None
    o1, s1 = recurrent_kda(q, k, v, g, b, initial_state=S0, output_final_state=True)
    o2, s2 = chunk_kda(q, k, v, g, b, initial_state=S0, output_final_state=True, chunk_size=C)
    torch.testing.assert_close(o2, o1, atol=1e-12, rtol=0)
    torch.testing.assert_close(s2, s1, atol=1e-12, rtol=0)


def test_chunk_equals_recurrent_long_fp32():
    q, k, v, g, b = make_kda_inputs(1, 1000, 2, 32, 32, gate_scale=0.1)
    S0 = make_state(1, 2, 32, 32)
    o1, s1 = recurrent_kda(q, k, v, g, b, initial_state=S0, output_final_state=True)
    o2, s2 = chunk_kda(q, k, v, g, b, initial_state=S0, output_final_state=True)
    torch.testing.assert_close(o2, o1, atol=2e-5, rtol=0)
    torch.testing.assert_close(s2, s1, atol=2e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_strong_decay_takes_the_safe_path_and_stays_exact(dtype):
    # gates as low as ~-100 per step: exp(-G) over a chunk would overflow even in float64 for some
    # chunks; a mixture of easy and hard (chunk, head) pairs exercises all three score paths
    q, k, v, g, b = make_kda_inputs(1, 200, 2, 16, 16, dtype=dtype, gate_scale=25.0)
    g[:, :64] *= 0.01  # first chunk easy
    o1, s1 = recurrent_kda(q, k, v, g, b, output_final_state=True)
    o2, s2 = chunk_kda(q, k, v, g, b, output_final_state=True)
    assert torch.isfinite(o2).all() and torch.isfinite(s2).all()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(o2, o1, atol=tol, rtol=0)
    torch.testing.assert_close(s2, s1, atol=tol, rtol=0)


def test_varlen_equals_per_sequence_runs():
    lengths = [1, 37, 70, 64]
    q, k, v, g, b = make_kda_inputs(1, sum(lengths), 2, 16, 8, HV=4, dtype=torch.float64)
    cu = torch.tensor([0, 1, 38, 108, 172])
    S0 = make_state(4, 4, 16, 8, dtype=torch.float64)
    o, s, h = chunk_kda(q, k, v, g, b, initial_state=S0, output_final_state=True, cu_seqlens=cu,
                        chunk_size=32, return_intermediate_states=True)
    o_r, s_r = recurrent_kda(q, k, v, g, b, initial_state=S0, output_final_state=True, cu_seqlens=cu)
    torch.testing.assert_close(o, o_r, atol=1e-12, rtol=0)
    torch.testing.assert_close(s, s_r, atol=1e-12, rtol=0)
    assert h.shape == (1, 1 + 2 + 3 + 2, 4, 16, 8)
    # and each sequence alone gives the same as inside the pack
    base = 0
    for n, (a, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        sl = slice(a, e)
        o_n, s_n, h_n = chunk_kda(q[:, sl], k[:, sl], v[:, sl], g[:, sl], b[:, sl], initial_state=S0[n:n + 1],
                                  output_final_state=True, chunk_size=32, return_intermediate_states=True)
        torch.testing.assert_close(o[:, sl], o_n, atol=1e-12, rtol=0)
        torch.testing.assert_close(s[n:n + 1], s_n, atol=1e-12, rtol=0)
        torch.testing.assert_close(h[0, base:base + h_n.shape[1]], h_n[0], atol=1e-12, rtol=0)
        base += h_n.shape[1]


def test_intermediate_states_are_the_states_at_chunk_starts():
    q, k, v, g, b = make_kda_inputs(2, 100, 2, 8, 8, dtype=torch.float64)
    S0 = make_state(2, 2, 8, 8, dtype=torch.float64)
    _, _, steps = recurrent_kda(q, k, v, g, b, initial_state=S0, return_step_states=True)
    _, _, h = chunk_kda(q, k, v, g, b, initial_state=S0, chunk_size=16, return_intermediate_states=True)
    assert h.shape == (2, 7, 2, 8, 8)
    torch.testing.assert_close(h[:, 0], S0, atol=0, rtol=0)
    for c in range(1, 7):
        torch.testing.assert_close(h[:, c], steps[:, 16 * c - 1], atol=1e-12, rtol=0)


def test_output_is_read_after_the_update():
    # with a zero initial state, o_1 = beta_1 (k_1 . q_1 * scale) v_1: nonzero only if read after the write
    q, k, v, g, b = make_kda_inputs(1, 1, 1, 4, 4, dtype=torch.float64)
    o, _ = recurrent_kda(q, k, v, g, b, scale=1.0)
    expected = b[0, 0, 0] * (k[0, 0, 0] @ q[0, 0, 0]) * v[0, 0, 0]
    torch.testing.assert_close(o[0, 0, 0], expected)


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=89), max_size=5, unique=True), chunk=st.sampled_from([4, 16, 64]))
def test_segmentation_invariance(cuts, chunk):
    """Any split, state carried across: same outputs and state as one pass ("split but keep order")."""
    T = 90
    q, k, v, g, b = make_kda_inputs(1, T, 2, 8, 8, dtype=torch.float64, seed=7)
    o_full, s_full = chunk_kda(q, k, v, g, b, output_final_state=True, chunk_size=chunk)
    bounds = [0, *sorted(cuts), T]
    S, outs = None, []
    for a, e in zip(bounds, bounds[1:]):
        sl = slice(a, e)
        fn = recurrent_kda if (e - a) % 2 else chunk_kda  # mix the two forms across segments
        o, S = fn(q[:, sl], k[:, sl], v[:, sl], g[:, sl], b[:, sl], initial_state=S, output_final_state=True)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, dim=1), o_full, atol=1e-12, rtol=0)
    torch.testing.assert_close(S, s_full, atol=1e-12, rtol=0)


def test_order_matters():
    """Sequential: swapping two segments changes the state (why CP needs a scan, not a sum)."""
    q, k, v, g, b = make_kda_inputs(1, 40, 1, 8, 8, dtype=torch.float64)
    _, s1 = recurrent_kda(q, k, v, g, b, output_final_state=True)
    perm = torch.cat([torch.arange(20, 40), torch.arange(0, 20)])
    _, s2 = recurrent_kda(q[:, perm], k[:, perm], v[:, perm], g[:, perm], b[:, perm], output_final_state=True)
    assert (s1 - s2).abs().max() > 1e-3


def test_chunk_form_gradients_match_recurrent():
    q, k, v, g, b = make_kda_inputs(1, 45, 2, 8, 8, dtype=torch.float64)
    S0 = make_state(1, 2, 8, 8, dtype=torch.float64)
    grads = []
    for fn in (recurrent_kda, lambda *a, **kw: chunk_kda(*a, chunk_size=16, **kw)):
        xs = [t.clone().requires_grad_() for t in (q, k, v, g, b, S0)]
        o, s = fn(*xs[:5], initial_state=xs[5], output_final_state=True)
        (o.square().sum() + s.sin().sum()).backward()
        grads.append([x.grad for x in xs])
    for a, b_ in zip(*grads):
        torch.testing.assert_close(a, b_, atol=1e-10, rtol=0)


def test_float16_inputs_return_float16_and_match():
    q, k, v, g, b = make_kda_inputs(1, 70, 2, 16, 16, dtype=torch.float16)
    o1, _ = recurrent_kda(q, k, v, g, b)
    o2, _ = chunk_kda(q, k, v, g, b)
    assert o1.dtype == o2.dtype == torch.float16
    torch.testing.assert_close(o2.float(), o1.float(), atol=2e-3, rtol=0)


# ---- oracles nobody here wrote ---------------------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize("init", [False, True])
def test_matches_fla_naive_recurrent(init):
    naive = fla_naive()
    q, k, v, g, b = make_kda_inputs(2, 50, 2, 16, 16, HV=4)
    S0 = make_state(2, 4, 16, 16) if init else None
    o_ref, s_ref = naive.naive_recurrent_kda(q, k, v, g, b, initial_state=S0, output_final_state=True)
    for fn in (recurrent_kda, chunk_kda):
        o, s = fn(q, k, v, g, b, initial_state=S0, output_final_state=True)
        torch.testing.assert_close(o, o_ref, atol=1e-5, rtol=0)
        torch.testing.assert_close(s, s_ref, atol=1e-5, rtol=0)


@pytest.mark.oracle
def test_matches_fla_naive_chunk():
    naive = fla_naive()
    q, k, v, g, b = make_kda_inputs(1, 128, 2, 32, 32, gate_scale=0.2)
    S0 = make_state(1, 2, 32, 32)
    o_ref, s_ref = naive.naive_chunk_kda(q, k, v, g, b, initial_state=S0, output_final_state=True, chunk_size=64)
    o, s = chunk_kda(q, k, v, g, b, initial_state=S0, output_final_state=True)
    torch.testing.assert_close(o, o_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(s, s_ref, atol=1e-5, rtol=0)


# ---- bad input -------------------------------------------------------------------------------


def _bad_cases():
    q, k, v, g, b = make_kda_inputs(1, 10, 2, 8, 8)
    yield "q", (q[0], k, v, g, b), {}
    yield "k", (q, k[:, :, :1], v, g, b), {}
    v3, g3, b3 = torch.randn(1, 10, 3, 8), -torch.rand(1, 10, 3, 8), torch.rand(1, 10, 3)
    yield "v", (q, k, v3, g3, b3), {}  # HV = 3 not a multiple of H = 2
    yield "g", (q, k, v, g[..., :4], b), {}
    yield "beta", (q, k, v, g, b[..., None]), {}
    yield "q", (q.long(), k, v, g, b), {}
    yield "initial_state", (q, k, v, g, b), {"initial_state": torch.zeros(2, 2, 8, 8)}
    yield "initial_state", (q, k, v, g, b), {"initial_state": torch.zeros(1, 2, 8, 8, dtype=torch.float16)}
    yield "cu_seqlens", (q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1),
                         g.expand(2, -1, -1, -1), b.expand(2, -1, -1)), {"cu_seqlens": torch.tensor([0, 10, 20])}
    yield "cu_seqlens", (q, k, v, g, b), {"cu_seqlens": torch.tensor([0, 6, 4, 10])}
    yield "cu_seqlens", (q, k, v, g, b), {"cu_seqlens": torch.tensor([0, 6, 6, 10])}
    yield "cu_seqlens", (q, k, v, g, b), {"cu_seqlens": torch.tensor([0, 6, 9])}
    yield "cu_seqlens", (q, k, v, g, b), {"cu_seqlens": torch.tensor([0.0, 10.0])}
    # zero-sized heads, batch or head dimensions: a ZeroDivisionError, an IndexError or a reshape error before
    yield "q", tuple(t[:, :, :0] for t in (q, k, v, g, b)), {}  # H = HV = 0
    yield "q", tuple(t[:0] for t in (q, k, v, g, b)), {}  # B = 0
    yield "q", (q[..., :0], k[..., :0], v, g[..., :0], b), {}  # K = 0
    yield "v", (q, k, v[..., :0], g, b), {}  # V = 0


@pytest.mark.parametrize("fn", [recurrent_kda, chunk_kda], ids=["recurrent", "chunk"])
@pytest.mark.parametrize("case", list(range(17)))
def test_bad_input_names_the_argument(fn, case):
    name, args, kw = list(_bad_cases())[case]
    with pytest.raises(ValueError, match=rf"^{name}:"):
        fn(*args, **kw)


@pytest.mark.parametrize("chunk", [0, 3, 48, "64"])
def test_bad_chunk_size(chunk):
    q, k, v, g, b = make_kda_inputs(1, 10, 2, 8, 8)
    with pytest.raises(ValueError, match="^chunk_size:"):
        chunk_kda(q, k, v, g, b, chunk_size=chunk)


def test_inference_and_autograd_state_passes_agree():
    """chunk_kda has an in-place state pass for inference and an out-of-place one for autograd."""
    lengths = [70, 5, 130]
    q, k, v, g, b = make_kda_inputs(1, sum(lengths), 2, 8, 8, dtype=torch.float64, seed=9)
    cu = torch.tensor([0, 70, 75, 205])
    S0 = make_state(3, 2, 8, 8, dtype=torch.float64)
    ref = chunk_kda(q, k, v, g, b, initial_state=S0, output_final_state=True, cu_seqlens=cu, chunk_size=16,
                    return_intermediate_states=True)
    got = chunk_kda(q.clone().requires_grad_(), k, v, g, b, initial_state=S0, output_final_state=True,
                    cu_seqlens=cu, chunk_size=16, return_intermediate_states=True)
    assert got[0].requires_grad and not ref[0].requires_grad
    for a, e in zip(got, ref):
        torch.testing.assert_close(a.detach(), e, atol=1e-13, rtol=0)


def test_a_layout_first_laid_out_under_inference_mode_serves_a_later_backward():
    """The layouts of a pack are kept between calls (``chunk_layout``); one first made by the engine, under
    ``torch.inference_mode``, must still index tensors that a later call with gradients saves."""
    T, H, K = 40, 2, 16
    cu = torch.tensor([0, 17, 40])

    def inputs(grad):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, T, H, K, generator=g, dtype=torch.float64).requires_grad_(grad) for _ in range(3))
        gate = (-torch.rand(1, T, H, K, generator=g, dtype=torch.float64)).requires_grad_(grad)
        return q, k, v, gate, torch.rand(1, T, H, generator=g, dtype=torch.float64).requires_grad_(grad)

    with torch.inference_mode():
        chunk_kda(*inputs(False), cu_seqlens=cu, chunk_size=16, output_final_state=True)
    ins = inputs(True)
    o, S = chunk_kda(*ins, cu_seqlens=cu, chunk_size=16, output_final_state=True)
    (o.sum() + S.sum()).backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in ins)


def test_a_kept_layouts_lazy_indices_are_not_inference_tensors():
    """The layout's token index and slot, built on first use and kept with it, are made outside inference mode
    too: a later call with gradients may index with them directly."""
    from kda_ref.ops.kda_chunk import chunk_layout

    with torch.inference_mode():
        lay = chunk_layout(((0, 0, 9), (0, 9, 40)), 40, 16, torch.device("cpu"))
        index, slot = lay.token_index, lay.token_slot
    assert not any(t.is_inference() for t in (index, slot, lay.to_seq_major, lay.unsort))
    x = torch.randn(lay.total_chunks * 16, 3, requires_grad=True)  # the layout's slots, padding included
    x[slot].sum().backward()  # the index is saved for backward
    assert x.grad.sum() == 40 * 3 and x.grad[slot].eq(1).all()


def test_a_bool_chunk_size_is_refused_and_leaves_the_layout_cache_sound():
    """``chunk_size=True`` passed the power-of-two check (``True == 1``), failed deep inside, and left the
    layout cached under ``C=True`` -- which hashes as 1, so every later ``chunk_size=1`` call on that pack
    failed the same way."""
    from kda_ref.ops import chunk_kda

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 8, 1, 4, generator=g), torch.randn(1, 8, 1, 4, generator=g)
    v, gate = torch.randn(1, 8, 1, 4, generator=g), -torch.rand(1, 8, 1, 4, generator=g)
    beta = torch.rand(1, 8, 1, generator=g)
    with pytest.raises(ValueError, match="^chunk_size: must be a positive power of two, got True"):
        chunk_kda(q, k, v, gate, beta, chunk_size=True)
    o, _ = chunk_kda(q, k, v, gate, beta, chunk_size=1)
    o2, _ = chunk_kda(q, k, v, gate, beta, chunk_size=8)
    torch.testing.assert_close(o, o2, atol=1e-5, rtol=1e-5)
