"""Chunkwise KDA kernels (WY / UT transform): the prefill path.

Article concepts: ``kda.chunk_form`` (the chunkwise-parallel form; Kimi Linear tech report
section 3.1, Eq. 6-9) and ``kda.chunk_checkpoints`` (the chunk-start states, see
``return_intermediate_states``). Torch counterpart: :func:`kda_ref.ops.kda_chunk.chunk_kda`; fla
``fla/ops/kda/chunk.py::chunk_kda``; the prefill kernel behind SGLang's ``KDAKernelDispatcher`` and vLLM's
``vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py::KimiGatedDeltaNetAttention._forward``
(0.32.0). The algorithm's three parts as fla's ``chunk_kda_fwd`` (``fla/ops/kda/chunk_fwd.py`` at bc3b101d)
arranges them, in five kernels: parallel over chunks, the gate cumsum, the intra-chunk scores and the UT
transform; sequential over each sequence's chunks, the state walk, writing every chunk's initial state;
parallel over chunks again, the output. Operand dtype and dot precision: one choice,
:func:`~kda_ref.ops.triton._common.dot_plan` (bfloat16 operands with float32 accumulation for bfloat16 inputs
on a GPU, float32 otherwise).

Design notes (the pipeline, fla's counterparts, the numerics): ``docs/kda.md#the-triton-kda-kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._common import DotPlan, PreparedInputs, dot_plan, next_pow2, prepare_kda_call

#: sub-chunk size of the intra-chunk decomposition (fla ``BC = 16``); also the smallest chunk.
SUB_CHUNK = 16
CHUNK_SIZES = (16, 32, 64)


@triton.jit
def _chunk_bounds(i_c, cu_seqlens, chunk_indices, T, BT: tl.constexpr, IS_VARLEN: tl.constexpr):
    """(global token index of the chunk's first row, number of valid rows) of chunk ``i_c``.

    Grid axis 0 runs over every chunk of the call, axis 1 over the value heads (CUDA allows 2^31 - 1
    programs on axis 0, 65,535 on the others, so the batch never sits on axis 1). Batched: row ``b``'s ``NT``
    chunks are ``[b NT, (b + 1) NT)``. Varlen: ``chunk_indices[i_c] = (n, chunk in n)`` (fla
    ``prepare_chunk_indices``). Either way ``i_c`` is also the chunk's index in the walk's buffer of states.
    """
    if IS_VARLEN:
        i_n = tl.load(chunk_indices + i_c * 2).to(tl.int64)
        i_t = tl.load(chunk_indices + i_c * 2 + 1).to(tl.int64)
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        NT = tl.cdiv(T, BT)
        i_t = (i_c % NT).to(tl.int64)
        bos = (i_c // NT).to(tl.int64) * T
        eos = bos + T
    t0 = bos + i_t * BT
    n_rows = tl.minimum(eos - t0, BT)
    return t0, n_rows


@triton.jit
def _chunk_gate_cumsum_kernel(
    g,  # [B, T, HV, K] log decay, any float dtype
    gc,  # [B, T, HV, K] float32 out: chunk-local inclusive cumsum G
    cu_seqlens,
    chunk_indices,
    T,
    HV: tl.constexpr,
    K: tl.constexpr,
    BT: tl.constexpr,
    BK: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):
    """G = cumsum of g inside each chunk (reset at every chunk start). Program = (chunk, head, K-block)."""
    i_c, i_hv, i_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    t0, n_rows = _chunk_bounds(i_c, cu_seqlens, chunk_indices, T, BT, IS_VARLEN)
    o_t = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    m = (o_t < n_rows)[:, None] & (o_k < K)[None, :]
    offs = ((t0 + o_t) * HV + i_hv)[:, None] * K + o_k[None, :]  # [BT, BK] into [., ., HV, K]
    b_g = tl.load(g + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(gc + offs, tl.cumsum(b_g, axis=0), mask=m)


@triton.jit
def _chunk_kda_intra_kernel(
    q,  # [B, T, H, K]
    k,  # [B, T, H, K]
    gc,  # [B, T, HV, K] float32 chunk-local cumsum
    beta,  # [B, T, HV]
    Akk,  # [B, T, HV, BT] float32 out: strictly lower, rows scaled by beta
    Aqk,  # [B, T, HV, BT] float32 out: lower incl. diagonal, times scale
    cu_seqlens,
    chunk_indices,
    scale,
    T,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    BT: tl.constexpr,
    BC: tl.constexpr,
    BK: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Intra-chunk matrices A_kk, A_qk of one (chunk, value head), built from BC x BC sub-blocks.

    Entry (i, j): sum_d x_i[d] exp(G_i[d] - G_j[d]) k_j[d], every factor <= 1: diagonal sub-blocks one column
    offset at a time with the exponent masked before ``exp``, off-diagonal ones anchored at the row block's
    first row (one ``tl.dot``). Upper blocks are not written; rows past a sequence end are not stored.
    Design notes: ``docs/kda.md#the-triton-kda-kernels``.
    """
    i_c, i_hv = tl.program_id(0), tl.program_id(1)
    t0, n_rows = _chunk_bounds(i_c, cu_seqlens, chunk_indices, T, BT, IS_VARLEN)
    i_h = i_hv // (HV // H)
    NC: tl.constexpr = BT // BC
    NK: tl.constexpr = (K + BK - 1) // BK
    o_t = tl.arange(0, BT)
    o_c = tl.arange(0, BC)
    m_t = o_t < n_rows
    t_t = t0 + o_t  # [BT] global token index (int64)
    b_beta = tl.load(beta + t_t * HV + i_hv, mask=m_t, other=0.0).to(tl.float32)

    # ---- diagonal sub-blocks: b_d*[i, j] = A[i, c(i)], c(i) = BC * (i // BC) + j      [BT, BC]
    o_tb = (o_t // BC) * BC  # first chunk row of every row's sub-block
    b_dkk = tl.zeros([BT, BC], dtype=tl.float32)
    b_dqk = tl.zeros([BT, BC], dtype=tl.float32)
    for i_k in tl.static_range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        m_tk = m_t[:, None] & m_k[None, :]
        b_q = tl.load(q + (t_t * H + i_h)[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
        b_k = tl.load(k + (t_t * H + i_h)[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
        b_g = tl.load(gc + (t_t * HV + i_hv)[:, None] * K + o_k[None, :], mask=m_tk, other=0.0)
        for j in range(0, BC):
            t_c = t0 + o_tb + j  # [BT] global token of each row's column
            m_le = (o_t >= o_tb + j) & m_t  # row at or below its column (so the column is valid)
            m_lek = m_le[:, None] & m_k[None, :]
            b_kc = tl.load(k + (t_c * H + i_h)[:, None] * K + o_k[None, :], mask=m_lek, other=0.0).to(tl.float32)
            b_gcol = tl.load(gc + (t_c * HV + i_hv)[:, None] * K + o_k[None, :], mask=m_lek, other=0.0)
            b_kgc = tl.where(m_lek, tl.exp(tl.where(m_lek, b_g - b_gcol, 0.0)) * b_kc, 0.0)  # exp <= 1
            sel = o_c[None, :] == j  # write as column j of the [BT, BC] strip
            b_dkk += tl.where(sel, tl.sum(b_k * b_kgc, axis=1)[:, None], 0.0)
            b_dqk += tl.where(sel, tl.sum(b_q * b_kgc, axis=1)[:, None], 0.0)
    p_d = (t_t * HV + i_hv)[:, None] * BT + (o_tb[:, None] + o_c[None, :])  # [BT, BC]
    m_strict = o_t[:, None] > o_tb[:, None] + o_c[None, :]
    tl.store(Akk + p_d, tl.where(m_strict, b_dkk * b_beta[:, None], 0.0), mask=m_t[:, None])
    tl.store(Aqk + p_d, b_dqk * scale, mask=m_t[:, None])  # zero above the diagonal already

    # ---- off-diagonal sub-blocks (I, J), J < I: anchored factors, one dot per K-block
    for i_i in tl.static_range(1, NC):
        if i_i * BC < n_rows:  # skip row blocks entirely past the end of the sequence
            o_i = i_i * BC + o_c  # chunk rows of block I
            m_i = o_i < n_rows
            t_i = t0 + o_i
            b_beta_i = tl.load(beta + t_i * HV + i_hv, mask=m_i, other=0.0).to(tl.float32)
            for i_j in tl.static_range(i_i):
                o_j = i_j * BC + o_c
                t_j = t0 + o_j  # block J lies before block I, so all its rows are valid
                b_akk = tl.zeros([BC, BC], dtype=tl.float32)
                b_aqk = tl.zeros([BC, BC], dtype=tl.float32)
                for i_k in tl.static_range(NK):
                    o_k = i_k * BK + tl.arange(0, BK)
                    m_k = o_k < K
                    m_ik = m_i[:, None] & m_k[None, :]
                    p_i = (t_i * H + i_h)[:, None] * K + o_k[None, :]
                    b_qi = tl.load(q + p_i, mask=m_ik, other=0.0).to(tl.float32)
                    b_ki = tl.load(k + p_i, mask=m_ik, other=0.0).to(tl.float32)
                    b_gi = tl.load(gc + (t_i * HV + i_hv)[:, None] * K + o_k[None, :], mask=m_ik, other=0.0)
                    b_kj = tl.load(k + (t_j * H + i_h)[:, None] * K + o_k[None, :], mask=m_k[None, :], other=0.0).to(tl.float32)
                    b_gj = tl.load(gc + (t_j * HV + i_hv)[:, None] * K + o_k[None, :], mask=m_k[None, :], other=0.0)
                    # anchor: G at the first row of block I (valid: the block is not skipped)
                    b_gn = tl.load(gc + ((t0 + i_i * BC) * HV + i_hv) * K + o_k, mask=m_k, other=0.0)
                    e_i = tl.exp(tl.where(m_ik, b_gi - b_gn[None, :], 0.0))  # exp(G_i - G_n) <= 1   [BC, BK]
                    b_kgj = tl.trans(b_kj * tl.exp(b_gn[None, :] - b_gj))  # k_j exp(G_n - G_j), <= 1   [BK, BC]
                    b_akk += tl.dot(b_ki * e_i, b_kgj, input_precision=DOT_PRECISION)
                    b_aqk += tl.dot(b_qi * e_i, b_kgj, input_precision=DOT_PRECISION)
                p_blk = (t_i * HV + i_hv)[:, None] * BT + o_j[None, :]  # [BC, BC]
                tl.store(Akk + p_blk, b_akk * b_beta_i[:, None], mask=m_i[:, None])
                tl.store(Aqk + p_blk, b_aqk * scale, mask=m_i[:, None])


@triton.jit
def _chunk_kda_wy_kernel(
    q,  # [B, T, H, K]
    k,  # [B, T, H, K]
    v,  # [B, T, HV, V]
    gc,  # [B, T, HV, K] float32
    beta,  # [B, T, HV]
    Akk,  # [B, T, HV, BT] float32 (strictly lower part valid)
    w,  # [B, T, HV, K] float32 out: Tm (beta exp(G) k)
    u,  # [B, T, HV, V] float32 out: Tm (beta v)
    qg,  # [B, T, HV, K] float32 out: scale q exp(G)
    kg,  # [B, T, HV, K] float32 out: k exp(G_last - G)
    cu_seqlens,
    chunk_indices,
    scale,
    T,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BT: tl.constexpr,
    BC: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """UT transform of one (chunk, value head): Tm = (I + A_kk)^-1, w = Tm (beta e^G k), u = Tm (beta v).

    Block inverse in fp32: ``(I + A_kk)^-1 = (I - X)(I + X^2) D^-1`` (fla, ``fla/ops/utils/solve_tril.py``, also
    inverts the 16x16 diagonal blocks by forward substitution but merges them by block substitution).
    Also writes ``qg = scale q exp(G)``, ``kg = k exp(G_last - G)`` (fla ``recompute_w_u_fwd``: its ``qg``
    has no scale). Rows past the
    sequence end stay identity rows of Tm. Design notes: ``docs/kda.md#the-triton-kda-kernels``.
    """
    i_c, i_hv = tl.program_id(0), tl.program_id(1)
    t0, n_rows = _chunk_bounds(i_c, cu_seqlens, chunk_indices, T, BT, IS_VARLEN)
    i_h = i_hv // (HV // H)
    o_t = tl.arange(0, BT)
    m_t = o_t < n_rows
    t_t = t0 + o_t  # [BT] int64

    m_A = m_t[:, None] & (o_t[None, :] < o_t[:, None])  # valid strictly-lower entries
    b_A = tl.load(Akk + (t_t * HV + i_hv)[:, None] * BT + o_t[None, :], mask=m_A, other=0.0)
    b_A = tl.where(m_A, b_A, 0.0)  # [BT, BT]
    same_blk = (o_t // BC)[:, None] == (o_t // BC)[None, :]
    b_Ad = tl.where(same_blk, b_A, 0.0)  # strictly lower part of the diagonal blocks
    b_I = tl.where(o_t[:, None] == o_t[None, :], 1.0, 0.0)
    b_D = b_I  # -> D^-1
    for j in range(1, BC):
        sel = ((o_t % BC) == j)[:, None]  # row j of every diagonal block
        b_new = b_I - tl.dot(tl.where(sel, b_Ad, 0.0), b_D, input_precision=DOT_PRECISION)
        b_D = tl.where(sel, b_new, b_D)
    b_X = tl.dot(b_D, tl.where(same_blk, 0.0, b_A), input_precision=DOT_PRECISION)  # X = D^-1 N
    b_X2 = tl.dot(b_X, b_X, input_precision=DOT_PRECISION)
    b_T = tl.dot(b_I - b_X, b_I + b_X2, input_precision=DOT_PRECISION)
    b_T = tl.dot(b_T, b_D, input_precision=DOT_PRECISION)  # (I + A_kk)^-1   [BT, BT]

    b_beta = tl.load(beta + t_t * HV + i_hv, mask=m_t, other=0.0).to(tl.float32)
    for i_k in tl.static_range((K + BK - 1) // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        m = m_t[:, None] & m_k[None, :]
        p_tk = (t_t * HV + i_hv)[:, None] * K + o_k[None, :]  # [BT, BK] into [., ., HV, K]
        b_k = tl.load(k + (t_t * H + i_h)[:, None] * K + o_k[None, :], mask=m, other=0.0).to(tl.float32)
        b_q = tl.load(q + (t_t * H + i_h)[:, None] * K + o_k[None, :], mask=m, other=0.0).to(tl.float32)
        b_g = tl.load(gc + p_tk, mask=m, other=0.0)
        b_eg = tl.exp(b_g)  # exp(G) <= 1
        b_w = tl.dot(b_T, b_k * b_eg * b_beta[:, None], input_precision=DOT_PRECISION)
        tl.store(w + p_tk, b_w.to(w.dtype.element_ty), mask=m)
        tl.store(qg + p_tk, (b_q * b_eg * scale).to(qg.dtype.element_ty), mask=m)
        b_glast = tl.load(gc + ((t0 + n_rows - 1) * HV + i_hv) * K + o_k, mask=m_k, other=0.0)
        tl.store(kg + p_tk, (b_k * tl.exp(tl.where(m, b_glast[None, :] - b_g, 0.0))).to(kg.dtype.element_ty), mask=m)
    for i_v in tl.static_range((V + BV - 1) // BV):
        o_v = i_v * BV + tl.arange(0, BV)
        m = m_t[:, None] & (o_v < V)[None, :]
        b_v = tl.load(v + (t_t * HV + i_hv)[:, None] * V + o_v[None, :], mask=m, other=0.0).to(tl.float32)
        b_u = tl.dot(b_T, b_v * b_beta[:, None], input_precision=DOT_PRECISION)
        tl.store(u + (t_t * HV + i_hv)[:, None] * V + o_v[None, :], b_u.to(u.dtype.element_ty), mask=m)


@triton.jit
def _chunk_kda_walk_kernel(
    kg,  # [B, T, HV, K] operand dtype: k exp(G_last - G)
    gc,  # [B, T, HV, K] float32
    w,  # [B, T, HV, K] operand dtype
    u,  # [B, T, HV, V] operand dtype
    vn,  # [B, T, HV, V] operand dtype out: v' = u - w h
    h0,  # [N, HV, K, V] read-only, or the [P, HV, K, V] pool (USE_POOL)
    ht,  # [N, HV, K, V] out (STORE_FINAL)
    hs,  # [B, NT, HV, K, V], or [1, all chunks, HV, K, V] varlen, out: every chunk's initial state
    cu_seqlens,  # [N + 1] int64 (IS_VARLEN)
    chunk_offsets,  # [N] int64: index of sequence n's first chunk in hs (IS_VARLEN)
    state_indices,  # [N] int64 (USE_POOL)
    has_init,  # [N] int32 (HAS_FLAGS)
    T,
    NT,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_H0: tl.constexpr,
    USE_POOL: tl.constexpr,
    HAS_FLAGS: tl.constexpr,
    STORE_FINAL: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """The state walk of one (sequence, value head, V-block), the only sequential part; h [BK, BV] in float32
    registers. Per chunk, in order: store h (the chunk's initial state); v' = u - w h; h = Diag(exp G_last) h
    + kg^T v' (fla ``fla/ops/common/chunk_delta_h.py::chunk_gated_delta_rule_fwd_h``). The dots take the
    workspace's operand dtype (:func:`~kda_ref.ops.triton._common.dot_plan`) and accumulate in float32.
    """
    i_nh, i_v = tl.program_id(0), tl.program_id(1)  # sequences x heads on axis 0: it may pass 65,535
    i_n = i_nh // HV
    i_hv = i_nh % HV
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        boh = tl.load(chunk_offsets + i_n).to(tl.int64)
    else:
        bos = i_n.to(tl.int64) * T
        eos = bos + T
        boh = i_n.to(tl.int64) * NT

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    o_t = tl.arange(0, BT)
    m_k = o_k < K
    m_v = o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    o_h = o_k[:, None] * V + o_v[None, :]  # [BK, BV] offsets inside one [K, V] state

    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_POOL:
        i_s = tl.load(state_indices + i_n).to(tl.int64)
    else:
        i_s = i_n.to(tl.int64)
    if USE_H0:
        m_h0 = m_h
        if HAS_FLAGS:
            # flag folded into the bound (the interpreter mis-types `tensor & scalar`)
            m_h0 = (o_k < tl.where(tl.load(has_init + i_n) != 0, K, 0))[:, None] & m_v[None, :]
        b_h += tl.load(h0 + (i_s * HV + i_hv) * K * V + o_h, mask=m_h0, other=0.0).to(tl.float32)

    n_chunks = tl.cdiv(eos - bos, BT).to(tl.int32)
    for i_t in range(0, n_chunks):
        t0 = bos + i_t * BT
        n_rows = tl.minimum(eos - t0, BT)
        m_t = o_t < n_rows
        t_t = t0 + o_t  # [BT] int64
        tl.store(hs + ((boh + i_t) * HV + i_hv) * K * V + o_h, b_h.to(hs.dtype.element_ty), mask=m_h)
        m_tk = m_t[:, None] & m_k[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        p_tk = (t_t * HV + i_hv)[:, None] * K + o_k[None, :]  # [BT, BK] into [., ., HV, K]
        p_tv = (t_t * HV + i_hv)[:, None] * V + o_v[None, :]  # [BT, BV] into [., ., HV, V]
        b_w = tl.load(w + p_tk, mask=m_tk, other=0.0)
        b_u = tl.load(u + p_tv, mask=m_tv, other=0.0).to(tl.float32)
        b_vn = b_u - tl.dot(b_w, b_h.to(b_w.dtype), input_precision=DOT_PRECISION)  # v' = u - w h   [BT, BV]
        b_vn = b_vn.to(vn.dtype.element_ty)
        tl.store(vn + p_tv, b_vn, mask=m_tv)

        b_glast = tl.load(gc + ((t0 + n_rows - 1) * HV + i_hv) * K + o_k, mask=m_k, other=0.0)
        b_kg = tl.load(kg + p_tk, mask=m_tk, other=0.0)
        b_h = b_h * tl.exp(b_glast)[:, None] + tl.dot(tl.trans(b_kg), b_vn, input_precision=DOT_PRECISION)

    if STORE_FINAL:
        tl.store(ht + (i_n.to(tl.int64) * HV + i_hv) * K * V + o_h, b_h, mask=m_h)
    if USE_POOL:
        tl.store(h0 + (i_s * HV + i_hv) * K * V + o_h, b_h, mask=m_h)


@triton.jit
def _chunk_kda_output_kernel(
    qg,  # [B, T, HV, K] operand dtype: scale q exp(G)
    Aqk,  # [B, T, HV, BT] float32
    vn,  # [B, T, HV, V] operand dtype: v'
    hs,  # [B, NT, HV, K, V], or [1, all chunks, HV, K, V] varlen: every chunk's initial state
    o,  # [B, T, HV, V] out, v.dtype
    cu_seqlens,
    chunk_indices,
    T,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """The output of one (chunk, value head, V-block), parallel over all chunks once the walk has written
    their initial states: ``o = qg h + A_qk v'`` (fla ``fla/ops/gla/chunk.py::chunk_gla_fwd_o_gk``)."""
    i_c, i_hv, i_v = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    t0, n_rows = _chunk_bounds(i_c, cu_seqlens, chunk_indices, T, BT, IS_VARLEN)
    o_t = tl.arange(0, BT)
    o_v = i_v * BV + tl.arange(0, BV)
    m_t = o_t < n_rows
    m_v = o_v < V
    t_t = t0 + o_t  # [BT] int64
    m_tv = m_t[:, None] & m_v[None, :]
    p_tv = (t_t * HV + i_hv)[:, None] * V + o_v[None, :]  # [BT, BV] into [., ., HV, V]

    b_vn = tl.load(vn + p_tv, mask=m_tv, other=0.0)
    m_A = m_t[:, None] & (o_t[None, :] <= o_t[:, None])
    b_A = tl.load(Aqk + (t_t * HV + i_hv)[:, None] * BT + o_t[None, :], mask=m_A, other=0.0)
    b_o = tl.dot(tl.where(m_A, b_A, 0.0).to(b_vn.dtype), b_vn, input_precision=DOT_PRECISION)  # A_qk v'
    for i_k in tl.static_range((K + BK - 1) // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_qg = tl.load(qg + (t_t * HV + i_hv)[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
        p_h = (i_c.to(tl.int64) * HV + i_hv) * K * V + o_k[:, None] * V + o_v[None, :]  # [BK, BV] of chunk i_c's state
        b_h = tl.load(hs + p_h, mask=m_k[:, None] & m_v[None, :], other=0.0)
        b_o += tl.dot(b_qg, b_h.to(b_qg.dtype), input_precision=DOT_PRECISION)  # + scale (q exp(G)) h
    tl.store(o + p_tv, b_o.to(o.dtype.element_ty), mask=m_tv)


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    chunk_size: int = 64,
    return_intermediate_states: bool = False,
    state_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
):
    """Chunkwise KDA (fla ``fla/ops/kda/chunk.py::chunk_kda``; SGLang / vLLM KDA prefill).

    Args:
        q, k: ``[B, T, H, K]`` (not normalised here); v: ``[B, T, HV, V]`` with ``HV % H == 0``;
            g: ``[B, T, HV, K]`` log decay; beta: ``[B, T, HV]`` post-sigmoid; any float dtype (loads -> fp32).
        scale: query scale, default ``K ** -0.5``.
        initial_state: without ``state_indices`` a read-only ``[N, HV, K, V]`` state; with
            ``state_indices`` a float32 state pool ``[P, HV, K, V]``: slot ``state_indices[n]`` is
            sequence n's initial state and receives its final state in place.
        output_final_state: also return the final states as a new ``[N, HV, K, V]`` float32 tensor.
        cu_seqlens: ``[N + 1]`` int offsets of packed sequences (requires ``B == 1``).
        chunk_size: 16, 32 or 64 tokens per chunk.
        return_intermediate_states: also return ``h``, the float32 chunk-start states, shaped as in
            :func:`kda_ref.ops.kda_chunk.chunk_kda`.
        state_indices: ``[N]`` int pool slots (distinct, in ``[0, P)``).
        has_initial_state: ``[N]`` bool; where False sequence n starts from a zero state.

    Returns:
        ``(o, final_state)`` or, with ``return_intermediate_states``, ``(o, final_state, h)``;
        ``o`` ``[B, T, HV, V]`` in ``v.dtype``, ``final_state`` ``[N, HV, K, V]`` float32 or ``None``.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size: must be one of {CHUNK_SIZES}, got {chunk_size!r}")
    p = prepare_kda_call(q, k, v, g, beta, scale, initial_state, cu_seqlens, state_indices, has_initial_state)
    plan = _plan_chunks(p, chunk_size, q.device)
    dots = dot_plan(q.device, q.dtype, k.dtype, v.dtype)
    ws = _alloc_workspace(p, plan, v.dtype, dots, output_final_state, return_intermediate_states)
    _launch_intra_chunk(p, plan, ws, dots.precision)  # parallel over chunks
    _launch_walk(p, plan, ws, dots.precision)  # sequential over each sequence's chunks
    _launch_output(p, plan, ws, dots.precision)  # parallel over chunks again
    if return_intermediate_states:
        return ws.o, ws.ht, ws.hs
    return ws.o, ws.ht


@dataclass
class _ChunkPlan:
    """How the tokens of one :func:`chunk_kda` call split into chunks (fla ``prepare_chunk_indices``).

    Batched: ``NT`` chunks per row, ``B * NT`` in all. Varlen: a flat list of (sequence, chunk in
    sequence) pairs (``chunk_indices``) and each sequence's first chunk index (``chunk_offsets``).
    """

    BT: int  # tokens per chunk
    NT: int  # chunks of the longest sequence (of every row when batched)
    n_chunks_total: int
    chunk_indices: torch.Tensor | None  # [n_chunks_total, 2] int64 (varlen only)
    chunk_offsets: torch.Tensor | None  # [N] int64 (varlen only)
    grid: tuple[int, int]  # grid of the per-chunk kernels: (every chunk of the call, value heads)


def _plan_chunks(p: PreparedInputs, BT: int, dev: torch.device) -> _ChunkPlan:
    """Chunk bookkeeping: batched -> NT chunks per row; varlen -> (sequence, chunk) pairs."""
    B, T, HV = p.shapes.B, p.shapes.T, p.shapes.HV
    if p.offs is None:
        NT = triton.cdiv(T, BT)
        return _ChunkPlan(BT, NT, B * NT, None, None, (B * NT, HV))
    counts = [triton.cdiv(e - b, BT) for b, e in zip(p.offs, p.offs[1:])]
    pairs = [(n, i) for n, c in enumerate(counts) for i in range(c)]
    chunk_indices = torch.tensor(pairs, dtype=torch.int64, device=dev).reshape(-1, 2)  # [NC_total, 2]
    starts = [0]
    for c in counts[:-1]:
        starts.append(starts[-1] + c)
    chunk_offsets = torch.tensor(starts, dtype=torch.int64, device=dev)  # [N]
    return _ChunkPlan(BT, max(counts), len(pairs), chunk_indices, chunk_offsets, (len(pairs), HV))


@dataclass
class _Workspace:
    """The intermediates of the kernels, the output and the optional final states. ``w``, ``u``, ``qg``, ``kg``,
    ``vn`` and ``hs`` hold the operands of the walk and the output in the :class:`DotPlan`'s dtype (``hs`` in
    float32 when the caller asked for the chunk states); ``gc`` and the ``A`` matrices stay float32."""

    gc: torch.Tensor  # [B, T, HV, K] chunk-local cumsum of g
    Akk: torch.Tensor  # [B, T, HV, BT]: row t holds row (t - chunk start) of its chunk's [BT, BT] matrix
    Aqk: torch.Tensor  # [B, T, HV, BT]
    w: torch.Tensor  # [B, T, HV, K]
    u: torch.Tensor  # [B, T, HV, V]
    qg: torch.Tensor  # [B, T, HV, K]
    kg: torch.Tensor  # [B, T, HV, K]
    vn: torch.Tensor  # [B, T, HV, V] v' = u - w h, written by the walk
    hs: torch.Tensor  # chunk-start states: [B, NT, HV, K, V], or [1, all chunks, HV, K, V] varlen
    o: torch.Tensor  # [B, T, HV, V] in v.dtype
    ht: torch.Tensor | None  # [N, HV, K, V] final states (output_final_state)


def _alloc_workspace(p: PreparedInputs, plan: _ChunkPlan, out_dtype: torch.dtype, dots: DotPlan, final: bool,
                     save_h: bool) -> _Workspace:
    """Allocate (never initialise) every buffer the kernels write."""
    B, T, HV, K, V, N = p.shapes.B, p.shapes.T, p.shapes.HV, p.shapes.K, p.shapes.V, p.shapes.N
    dev = p.q.device
    f32 = dict(dtype=torch.float32, device=dev)
    op = dict(dtype=dots.operand, device=dev)
    hs_rows, hs_chunks = (B, plan.NT) if p.offs is None else (1, plan.n_chunks_total)
    return _Workspace(
        gc=torch.empty(B, T, HV, K, **f32),
        Akk=torch.empty(B, T, HV, plan.BT, **f32),
        Aqk=torch.empty(B, T, HV, plan.BT, **f32),
        w=torch.empty(B, T, HV, K, **op),
        u=torch.empty(B, T, HV, V, **op),
        qg=torch.empty(B, T, HV, K, **op),
        kg=torch.empty(B, T, HV, K, **op),
        vn=torch.empty(B, T, HV, V, **op),
        hs=torch.empty(hs_rows, hs_chunks, HV, K, V, **(f32 if save_h else op)),
        o=torch.empty(B, T, HV, V, dtype=out_dtype, device=dev),
        ht=torch.empty(N, HV, K, V, **f32) if final else None,
    )


def _launch_intra_chunk(p: PreparedInputs, plan: _ChunkPlan, ws: _Workspace, prec: str) -> None:
    """Kernels 1-3, one program per (chunk, head): gate cumsum, A_kk / A_qk, UT transform (w, u, qg, kg)."""
    T, H, HV, K, V = p.shapes.T, p.shapes.H, p.shapes.HV, p.shapes.K, p.shapes.V
    BT, BC = plan.BT, SUB_CHUNK
    dummy = ws.gc  # placeholder pointer for disabled (constexpr-False) arguments; never dereferenced
    cu = p.cu_seqlens if p.cu_seqlens is not None else dummy
    ci = plan.chunk_indices if plan.chunk_indices is not None else dummy
    varlen = p.offs is not None

    BKc = min(next_pow2(K), 64)
    _chunk_gate_cumsum_kernel[plan.grid + (triton.cdiv(K, BKc),)](
        p.g, ws.gc, cu, ci, T, HV=HV, K=K, BT=BT, BK=BKc, IS_VARLEN=varlen
    )
    BK = max(16, min(next_pow2(K), 32))  # tl.dot needs every dimension >= 16
    _chunk_kda_intra_kernel[plan.grid](
        p.q, p.k, ws.gc, p.beta, ws.Akk, ws.Aqk, cu, ci, p.scale, T,
        H=H, HV=HV, K=K, BT=BT, BC=BC, BK=BK, IS_VARLEN=varlen, DOT_PRECISION=prec,
    )
    BKw = max(16, min(next_pow2(K), 64))
    BVw = max(16, min(next_pow2(V), 64))
    _chunk_kda_wy_kernel[plan.grid](
        p.q, p.k, p.v, ws.gc, p.beta, ws.Akk, ws.w, ws.u, ws.qg, ws.kg, cu, ci, p.scale, T,
        H=H, HV=HV, K=K, V=V, BT=BT, BC=BC, BK=BKw, BV=BVw, IS_VARLEN=varlen, DOT_PRECISION=prec,
    )


def _launch_walk(p: PreparedInputs, plan: _ChunkPlan, ws: _Workspace, prec: str) -> None:
    """Kernel 4, one program per (sequence, value head, V-block): the walk over the chunks (h, v')."""
    HV, K, V, N = p.shapes.HV, p.shapes.K, p.shapes.V, p.shapes.N
    dummy = ws.gc  # placeholder pointer for disabled (constexpr-False) arguments; never dereferenced
    BKh = max(16, next_pow2(K))  # the whole K extent of the state lives in one register tile
    BVh = max(16, min(next_pow2(V), 4096 // BKh, 32))  # [BKh, BVh] fp32 h tile: <= 4K values
    _chunk_kda_walk_kernel[(N * HV, triton.cdiv(V, BVh))](
        ws.kg, ws.gc, ws.w, ws.u, ws.vn,
        p.state if p.state is not None else dummy,
        ws.ht if ws.ht is not None else dummy,
        ws.hs,
        p.cu_seqlens if p.cu_seqlens is not None else dummy,
        plan.chunk_offsets if plan.chunk_offsets is not None else dummy,
        p.state_indices if p.state_indices is not None else dummy,
        p.has_initial_state if p.has_initial_state is not None else dummy,
        p.shapes.T, plan.NT,
        HV=HV, K=K, V=V, BT=plan.BT, BK=BKh, BV=BVh,
        USE_H0=p.state is not None,
        USE_POOL=p.state_indices is not None,
        HAS_FLAGS=p.has_initial_state is not None,
        STORE_FINAL=ws.ht is not None,
        IS_VARLEN=p.offs is not None,
        DOT_PRECISION=prec,
        num_warps=8,
        num_stages=1,  # the fp32 state tile (fp32 operands too, off bf16): no software pipelining
    )


def _launch_output(p: PreparedInputs, plan: _ChunkPlan, ws: _Workspace, prec: str) -> None:
    """Kernel 5, one program per (chunk, head, V-block): ``o = qg h + A_qk v'`` from the walk's states."""
    HV, K, V = p.shapes.HV, p.shapes.K, p.shapes.V
    dummy = ws.gc
    BK = max(16, min(next_pow2(K), 64))
    BV = max(16, min(next_pow2(V), 64))
    _chunk_kda_output_kernel[plan.grid + (triton.cdiv(V, BV),)](
        ws.qg, ws.Aqk, ws.vn, ws.hs, ws.o,
        p.cu_seqlens if p.cu_seqlens is not None else dummy,
        plan.chunk_indices if plan.chunk_indices is not None else dummy,
        p.shapes.T,
        HV=HV, K=K, V=V, BT=plan.BT, BK=BK, BV=BV, IS_VARLEN=p.offs is not None, DOT_PRECISION=prec,
    )
