"""The blocked inference path of the chunk form against the readable one (and the recurrence).

``chunk_kda`` runs :mod:`kda_ref.ops.kda_chunk_blocked` whenever no gradient is needed, so the
equivalence matrix in ``test_kda_torch.py`` already goes through it; here the two implementations
are compared directly, with block sizes small enough that every case crosses block boundaries
(including a varlen batch whose sequences end inside a block and at a block's edge).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref.ops import recurrent_kda
from kda_ref.ops.chunk_layout import ChunkLayout
from kda_ref.ops.kda_chunk import chunk_kda_impl
from kda_inputs import make_kda_inputs, make_state


def both(q, k, v, g, b, block_chunks, **kw):
    kw = dict(output_final_state=True, return_intermediate_states=True, **kw)
    ref = chunk_kda_impl(q, k, v, g, b, impl="readable", **kw)
    got = chunk_kda_impl(q, k, v, g, b, impl="blocked", block_chunks=block_chunks, **kw)
    return got, ref


def assert_same(got, ref, atol):
    for name, a, e in zip(("o", "final_state", "h"), got, ref):
        assert a.shape == e.shape and a.dtype == e.dtype, name
        torch.testing.assert_close(a, e, atol=atol, rtol=0, msg=name)


@pytest.mark.parametrize(
    "B,T,H,HV,K,V,C,cu",
    [
        (1, 256, 2, 2, 8, 8, 16, None),  # regular: a strided view of the input, no gather
        (3, 64, 1, 2, 8, 16, 16, None),  # regular, several rows, grouped value heads
        (2, 100, 2, 4, 16, 8, 16, None),  # T not a multiple of the chunk: gathered, padded
        (1, 205, 2, 2, 8, 8, 16, [0, 70, 75, 205]),  # varlen: sequences end at different steps
        (1, 300, 1, 1, 8, 8, 16, [0, 10, 40, 41, 300]),
        (1, 1, 2, 2, 8, 8, 64, None),  # T = 1
    ],
)
@pytest.mark.parametrize("block_chunks", [1, 2, 3, 8])
def test_blocked_equals_readable_float64(B, T, H, HV, K, V, C, cu, block_chunks):
    q, k, v, g, b = make_kda_inputs(B, T, H, K, V, HV=HV, dtype=torch.float64, seed=block_chunks)
    N = B if cu is None else len(cu) - 1
    S0 = make_state(N, HV, K, V, dtype=torch.float64)
    cu_t = None if cu is None else torch.tensor(cu)
    got, ref = both(q, k, v, g, b, block_chunks, initial_state=S0, cu_seqlens=cu_t, chunk_size=C)
    assert_same(got, ref, 1e-12)


def test_blocked_float32_default_sizes_match_recurrent():
    q, k, v, g, b = make_kda_inputs(1, 640, 2, 32, 32, gate_scale=0.1)
    S0 = make_state(1, 2, 32, 32)
    o, s, h = chunk_kda_impl(q, k, v, g, b, initial_state=S0, output_final_state=True,
                             return_intermediate_states=True, impl="blocked")
    o_r, s_r = recurrent_kda(q, k, v, g, b, initial_state=S0, output_final_state=True)
    torch.testing.assert_close(o, o_r, atol=2e-5, rtol=0)
    torch.testing.assert_close(s, s_r, atol=2e-5, rtol=0)
    torch.testing.assert_close(h[:, 0], S0, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_blocks_with_and_without_hard_gates(dtype):
    # one block per chunk: easy blocks take exp(-G) factors, hard ones the anchored recursion
    q, k, v, g, b = make_kda_inputs(1, 320, 2, 16, 16, dtype=dtype, gate_scale=25.0, seed=3)
    g[:, :64] *= 0.01
    g[:, 192:256] *= 0.01
    o_r, s_r = recurrent_kda(q, k, v, g, b, output_final_state=True)
    for block_chunks in (1, 2, 8):
        o, s = chunk_kda_impl(q, k, v, g, b, output_final_state=True, impl="blocked", block_chunks=block_chunks)
        assert torch.isfinite(o).all() and torch.isfinite(s).all()
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(o, o_r, atol=tol, rtol=0)
        torch.testing.assert_close(s, s_r, atol=tol, rtol=0)


@pytest.mark.parametrize("dtype,gate_scale", [(torch.float64, 150.0), (torch.float32, 30.0)])
def test_hard_gates_in_a_varlen_pack_with_grouped_heads(dtype, gate_scale):
    # the hard-gate patch picks channels across sequences and value heads, in the gathered layout (varlen) and
    # from the strided views of a regular batch: fp64 gates steep enough for the recursion, fp32 ones for
    # wide_decay_scores' fp64 factors (16-token chunks: ranges ~2,000 and ~400)
    cu = torch.tensor([0, 50, 51, 170])
    q, k, v, g, b = make_kda_inputs(1, 170, 1, 8, 8, HV=3, dtype=torch.float64, gate_scale=gate_scale, seed=5)
    g[:, 60:120] *= 0.001
    S0 = make_state(3, 3, 8, 8, dtype=torch.float64)
    o_r, s_r = recurrent_kda(q, k, v, g, b, initial_state=S0, output_final_state=True, cu_seqlens=cu)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    x = [t.to(dtype) for t in (q, k, v, g, b)]
    for block_chunks in (1, 3):
        got, ref = both(*x, block_chunks, initial_state=S0.to(dtype), cu_seqlens=cu, chunk_size=16)
        if dtype == torch.float64:
            assert_same(got, ref, 1e-12)
        torch.testing.assert_close(got[0].double(), o_r, atol=tol, rtol=0)
        torch.testing.assert_close(got[1].double(), s_r, atol=tol, rtol=0)
    # a regular [2, 160] batch with grouped heads: q / k read through strided views
    qb, kb_, vb, gb, bb = make_kda_inputs(2, 160, 1, 8, 8, HV=3, dtype=torch.float64, gate_scale=gate_scale, seed=6)
    o_r, s_r = recurrent_kda(qb, kb_, vb, gb, bb, initial_state=S0[:2], output_final_state=True)
    o, s = chunk_kda_impl(*(t.to(dtype) for t in (qb, kb_, vb, gb, bb)), initial_state=S0[:2].to(dtype),
                          output_final_state=True, impl="blocked")
    torch.testing.assert_close(o.double(), o_r, atol=tol, rtol=0)
    torch.testing.assert_close(s.double(), s_r, atol=tol, rtol=0)


def test_float32_inputs_with_a_float64_state_compute_in_float64():
    q, k, v, g, b = make_kda_inputs(2, 40, 2, 8, 8, seed=2)
    S0 = make_state(2, 2, 8, 8, dtype=torch.float64)
    got, ref = both(q, k, v, g, b, 1, initial_state=S0, chunk_size=16)
    assert got[0].dtype == torch.float32 and got[1].dtype == torch.float64
    assert_same(got, ref, 1e-6)
    o_r, s_r = recurrent_kda(q.double(), k.double(), v.double(), g.double(), b.double(), initial_state=S0,
                             output_final_state=True)
    torch.testing.assert_close(got[1], s_r, atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_are_computed_in_float32(dtype):
    q, k, v, g, b = make_kda_inputs(1, 130, 2, 16, 16, dtype=dtype)
    o, s = chunk_kda_impl(q, k, v, g, b, output_final_state=True, impl="blocked", block_chunks=1)
    o_r, s_r = chunk_kda_impl(q, k, v, g, b, output_final_state=True, impl="readable")
    assert o.dtype == dtype and s.dtype == torch.float32
    torch.testing.assert_close(o.float(), o_r.float(), atol=1e-2, rtol=0)
    torch.testing.assert_close(s, s_r, atol=1e-5, rtol=0)


def test_blocked_does_not_touch_its_inputs():
    q, k, v, g, b = make_kda_inputs(2, 96, 2, 8, 8, HV=4, dtype=torch.float64)
    S0 = make_state(2, 4, 8, 8, dtype=torch.float64)
    before = [t.clone() for t in (q, k, v, g, b, S0)]
    chunk_kda_impl(q, k, v, g, b, initial_state=S0, output_final_state=True, impl="blocked", block_chunks=2,
                   chunk_size=16)
    for a, e in zip((q, k, v, g, b, S0), before):
        assert torch.equal(a, e)


@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.integers(min_value=1, max_value=70), min_size=1, max_size=5),
       chunk=st.sampled_from([4, 16]), block_chunks=st.integers(min_value=1, max_value=6))
def test_blocked_equals_readable_on_random_packs(lengths, chunk, block_chunks):
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist())
    q, k, v, g, b = make_kda_inputs(1, sum(lengths), 1, 8, 8, HV=2, dtype=torch.float64, seed=len(lengths))
    S0 = make_state(len(lengths), 2, 8, 8, dtype=torch.float64)
    got, ref = both(q, k, v, g, b, block_chunks, initial_state=S0, cu_seqlens=cu, chunk_size=chunk)
    assert_same(got, ref, 1e-12)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=6),
       max_chunks=st.integers(min_value=1, max_value=9))
def test_layout_blocks_cover_every_step_once(lengths, max_chunks):
    starts = [0] + torch.tensor(lengths).cumsum(0).tolist()
    lay = ChunkLayout([(0, s, e) for s, e in zip(starts, starts[1:])], starts[-1], 16, torch.device("cpu"))
    blocks = lay.blocks(max_chunks)
    assert blocks[0][0] == 0 and blocks[0][2] == 0
    assert blocks[-1][1] == lay.total_chunks and blocks[-1][3] == len(lay.steps)
    for (c0, c1, j0, j1), nxt in zip(blocks, blocks[1:] + [None]):
        assert c0 == lay.steps[j0][0] and j1 > j0
        assert c1 - c0 <= max_chunks or j1 - j0 == 1  # only a single wide step may exceed the size
        if nxt is not None:
            assert nxt[0] == c1 and nxt[2] == j1


def test_layout_token_index_round_trips():
    lay = ChunkLayout([(0, 0, 5), (0, 5, 40), (0, 40, 41)], 41, 16, torch.device("cpu"))
    idx = lay.token_index
    assert idx.numel() == lay.total_chunks * 16
    assert sorted(idx[idx >= 0].tolist()) == list(range(41))
    assert torch.equal(idx[lay.token_slot], torch.arange(41))


def test_bad_impl_options():
    q, k, v, g, b = make_kda_inputs(1, 8, 1, 4, 4)
    with pytest.raises(ValueError, match="impl"):
        chunk_kda_impl(q, k, v, g, b, impl="fast")
    with pytest.raises(ValueError, match="block_chunks"):
        chunk_kda_impl(q, k, v, g, b, block_chunks=0)
    with pytest.raises(ValueError, match="impl"):
        chunk_kda_impl(q.requires_grad_(), k, v, g, b, impl="blocked")


def _four_kinds_of_channel(dtype, T=128, HV=2, K=16, seed=7):
    """Gates whose channels, in every (chunk, head) of the chunk the blocked path walks (``compute_chunk``:
    16 tokens here), fall in its classes: ``|G| <= L`` (channels 0-3), ``L < |G|`` with a range ``<= 2L``
    (4-7: the centring shift), a range past ``2L`` but within fp64's ``2 * 600`` (8-11: for fp32 the fp64
    factors of ``wide_decay_scores``, for fp64 the recursion) and past that too (12-15: the recursion);
    head 1 of the second chunk has none of the last two kinds. Returns the inputs and that chunk."""
    from kda_ref.ops.decay_scores import FACTOR_LIMIT
    from kda_ref.ops.kda_chunk_blocked import compute_chunk

    L, C = FACTOR_LIMIT[dtype], compute_chunk(K, K)
    q, k, v, g, b = make_kda_inputs(1, T, 1, K, K, HV=HV, dtype=torch.float64, seed=seed)
    wide = 1.5 * 2 * L if dtype == torch.float32 else 3.5 * L  # fp32: within fp64's range; fp64: past it
    per_step = torch.tensor([0.3 * L, 1.6 * L, wide, 3.5 * FACTOR_LIMIT[torch.float64]], dtype=torch.float64) / C
    rate = per_step.repeat_interleave(K // 4)  # [K] mean decay per token
    g = -rate * (0.5 + torch.rand(1, T, HV, K, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    # second chunk, head 1: its steep channels only "far"
    g[:, C:2 * C, 1, K // 2:] = g[:, C:2 * C, 1, 4:8].repeat(1, 1, 2)
    return tuple(x.to(dtype) for x in (q, k, v, g, b)), C


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_channels_near_far_and_hard_in_one_chunk(dtype):
    (q, k, v, g, b), C = _four_kinds_of_channel(dtype)
    S0 = make_state(1, 2, 16, 16, dtype=dtype)
    G = g.double().view(1, -1, C, 2, 16).cumsum(2)  # [B, chunks, C, HV, K] the per-chunk cumulative gates
    reach = G.abs().amax(2)  # [B, chunks, HV, K]
    span = G.amax(2) - G.amin(2)
    from kda_ref.ops.decay_scores import FACTOR_LIMIT
    L, L64 = FACTOR_LIMIT[dtype], FACTOR_LIMIT[torch.float64]
    assert (reach[..., :4] <= L).all() and (reach[..., 4:8] > L).all() and (span[..., 4:8] <= 2 * L).all()
    first = span[0, 0]  # [HV, K] the first chunk
    assert (first[:, 8:] > 2 * L).all() and (first[:, 12:] > 2 * L64).all()
    if dtype == torch.float32:
        assert (first[:, 8:12] <= 2 * L64).all()
    assert (span[0, 1, 1, 8:] <= 2 * L).all()
    o_r, s_r = recurrent_kda(q.double(), k.double(), v.double(), g.double(), b.double(), initial_state=S0.double(),
                             output_final_state=True)
    o, s = chunk_kda_impl(q, k, v, g, b, initial_state=S0, output_final_state=True, impl="blocked")
    tol = 2e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(o.double(), o_r, atol=tol, rtol=0)
    torch.testing.assert_close(s.double(), s_r, atol=tol, rtol=0)


def test_wide_decay_scores_match_the_recursion():
    """The fp64 factors of ``wide_decay_scores`` give the anchored recursion's scores (fp64 reference) on fp32
    channels of every range up to fp64's limit, and hand anything steeper (or not fp32) to the recursion."""
    from kda_ref.ops.decay_scores import tril_decay_scores, wide_decay_scores

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 16, 5, generator=gen).double()  # fp32 values, held in fp64 for the reference
    y = torch.randn(6, 16, 5, generator=gen).double()
    for rate in (1.0, 20.0, 70.0, 90.0):  # per token: 90 x 16 tokens is past 1,200
        G = (-rate * torch.rand(6, 16, 5, generator=gen)).cumsum(-2).double()
        ref = tril_decay_scores(x, y, G)
        got = wide_decay_scores(x.float(), y.float(), G.float())
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), ref, atol=1e-6, rtol=1e-6)
        assert torch.equal(wide_decay_scores(x, y, G), ref)  # fp64 operands: the recursion itself


def test_outer_sum_is_the_matmul_at_every_width():
    """``outer_sum`` (the steep channels' scores as outer products when they are few) equals ``a @ b^T`` on
    each side of its switch to a matmul, ``a`` broadcast against ``b`` as the q / k scores are."""
    from kda_ref.ops.decay_scores import OUTER_MAX_D, outer_sum

    gen = torch.Generator().manual_seed(3)
    for D in range(OUTER_MAX_D + 3):
        a = torch.randn(2, 6, 16, D, generator=gen, dtype=torch.float64)
        b = torch.randn(6, 16, D, generator=gen, dtype=torch.float64)
        got = outer_sum(a, b)
        assert got.shape == (2, 6, 16, 16)
        torch.testing.assert_close(got, a @ b.transpose(-1, -2), atol=1e-12, rtol=0)


def test_equal_length_pack_runs_as_a_regular_batch():
    """A varlen pack of equal lengths (a multiple of the chunk) is computed as the [N, L] batch it is: the
    recurrence's outputs and final states, and each sequence's chunk-start states in the varlen layout."""
    cu = torch.tensor([0, 32, 64, 96])
    q, k, v, g, b = make_kda_inputs(1, 96, 2, 8, 8, HV=4, dtype=torch.float64, seed=4)
    S0 = make_state(3, 4, 8, 8, dtype=torch.float64)
    o_r, s_r = recurrent_kda(q, k, v, g, b, initial_state=S0, output_final_state=True, cu_seqlens=cu)
    for impl in ("blocked", "readable"):
        o, s, h = chunk_kda_impl(q, k, v, g, b, initial_state=S0, output_final_state=True, cu_seqlens=cu,
                                 chunk_size=16, return_intermediate_states=True, impl=impl)
        assert h.shape == (1, 6, 4, 8, 8)
        torch.testing.assert_close(o, o_r, atol=1e-12, rtol=0)
        torch.testing.assert_close(s, s_r, atol=1e-12, rtol=0)
        for n in range(3):  # sequence n alone: its two chunk-start states
            one = slice(32 * n, 32 * n + 32)
            _, _, h_n = chunk_kda_impl(q[:, one], k[:, one], v[:, one], g[:, one], b[:, one], initial_state=S0[n:n + 1],
                                       chunk_size=16, return_intermediate_states=True, impl=impl)
            torch.testing.assert_close(h[0, 2 * n:2 * n + 2], h_n[0], atol=1e-12, rtol=0)


@pytest.mark.parametrize("B,T,cu", [(2, 150, None), (1, 205, [0, 70, 75, 205]), (1, 256, [0, 128, 256]),
                                    (1, 64, None)])
@pytest.mark.parametrize("K", [8, 72])
def test_64_token_chunks_computed_in_shorter_steps(B, T, cu, K):
    """The blocked path walks shorter chunks (compute_chunk: 16 tokens for narrow heads, 32 for wide) when the
    caller lays out 64: the outputs, the final states and the chunk-start states at every 64th token
    (regular, varlen and equal-length packs) equal the readable form's over 64-token chunks."""
    from kda_ref.ops.kda_chunk_blocked import compute_chunk

    assert compute_chunk(K, K) == (16 if K <= 64 else 32)
    q, k, v, g, b = make_kda_inputs(B, T, 2, K, K, dtype=torch.float64, seed=T)
    N = B if cu is None else len(cu) - 1
    S0 = make_state(N, 2, K, K, dtype=torch.float64)
    got, ref = both(q, k, v, g, b, None, initial_state=S0, cu_seqlens=None if cu is None else torch.tensor(cu),
                    chunk_size=64)
    assert_same(got, ref, 1e-12)


@pytest.mark.parametrize("dtype,floor", [(torch.float32, -87.0), (torch.float64, -708.0)])
def test_decay_exp_differs_from_exp_only_below_the_normal_range(dtype, floor):
    """The chunk form's exp of log decays: exactly exp down to where exp stops being a normal float (with
    a margin), below it the normal magnitude there (never 0 or a subnormal); in place when asked."""
    from kda_ref.ops.decay_scores import decay_exp

    x = torch.linspace(-800, 0, 4001, dtype=torch.float64).to(dtype)
    got, want = decay_exp(x), x.exp()
    kept = x >= floor
    assert torch.equal(got[kept], want[kept]) and (~kept).any()
    tiny = torch.finfo(dtype).tiny
    assert ((got[~kept] >= tiny) & (got[~kept] < 2 * tiny)).all()
    y = x.clone()
    assert decay_exp(y, inplace=True) is y and torch.equal(y, got)
