"""Fused recurrent KDA kernel: the token-by-token recurrence in one Triton kernel (decode / verify).

Article concept: the KDA recurrence run token by token (``kda.recurrence``), the form a serving
engine uses for decode and for speculative verification. Same semantics as the torch reference
:func:`kda_ref.ops.kda_recurrent.recurrent_kda`. Counterparts: fla
``fla/ops/kda/fused_recurrent.py::fused_recurrent_kda``, SGLang ``KDAKernelDispatcher`` decode path, vLLM 0.32.0
``fused_recurrent_kda_packed_decode`` (``state_indices`` into a state pool). ``step_states``: the
per-token states for speculative rollback.

Design notes: ``docs/kda.md#the-triton-kda-kernels``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import PreparedInputs, next_pow2, prepare_kda_call


@triton.jit
def _fused_recurrent_kda_kernel(
    q,  # [B, T, H, K]
    k,  # [B, T, H, K]
    v,  # [B, T, HV, V]
    g,  # [B, T, HV, K]  log decay
    beta,  # [B, T, HV]
    o,  # [B, T, HV, V]  output, v.dtype
    h0,  # [N, HV, K, V] read-only initial state, or the [P, HV, K, V] pool (USE_POOL)
    ht,  # [N, HV, K, V] final states (STORE_FINAL)
    step_states,  # [B, T, HV, K, V] state after every token (SAVE_STEPS)
    corrections,  # [B, T, HV, V] every token's correction beta (v - S^T k) (SAVE_U)
    cu_seqlens,  # [N + 1] int64 (IS_VARLEN)
    state_indices,  # [N] int64 pool slots (USE_POOL)
    has_init,  # [N] int32 flags (HAS_FLAGS)
    scale,
    T,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_H0: tl.constexpr,
    USE_POOL: tl.constexpr,
    HAS_FLAGS: tl.constexpr,
    STORE_FINAL: tl.constexpr,
    SAVE_STEPS: tl.constexpr,
    SAVE_U: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):
    """One program = (V-block i_v, sequence i_n, value head i_hv); state tile [BK, BV] fp32 in registers."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)  # grouped value heads: value head hv reads q/k head hv // (HV // H)
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        bos = i_n.to(tl.int64) * T
        eos = bos + T

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    # offsets of the [BK, BV] tile inside one [K, V] state
    o_h = o_k[:, None] * V + o_v[None, :]

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

    p_q = q + (bos * H + i_h) * K + o_k
    p_k = k + (bos * H + i_h) * K + o_k
    p_g = g + (bos * HV + i_hv) * K + o_k
    p_v = v + (bos * HV + i_hv) * V + o_v
    p_o = o + (bos * HV + i_hv) * V + o_v
    p_beta = beta + bos * HV + i_hv
    p_s = step_states + (bos * HV + i_hv) * K * V + o_h
    p_u = corrections + (bos * HV + i_hv) * V + o_v
    for _ in range(0, (eos - bos).to(tl.int32)):
        b_q = tl.load(p_q, mask=m_k, other=0.0).to(tl.float32) * scale
        b_k = tl.load(p_k, mask=m_k, other=0.0).to(tl.float32)
        b_g = tl.load(p_g, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(p_v, mask=m_v, other=0.0).to(tl.float32)
        b_beta = tl.load(p_beta).to(tl.float32)
        b_h = b_h * tl.exp(b_g)[:, None]  # Diag(alpha_t) S
        b_vn = b_beta * (b_v - tl.sum(b_h * b_k[:, None], axis=0))  # beta (v - S^T k)   [BV]
        b_h += b_k[:, None] * b_vn[None, :]  # S += k (beta (v - S^T k))^T
        b_o = tl.sum(b_h * b_q[:, None], axis=0)  # o = S^T (scale q)   [BV]
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)
        if SAVE_STEPS:
            tl.store(p_s, b_h, mask=m_h)
        if SAVE_U:
            tl.store(p_u, b_vn, mask=m_v)
        p_q += H * K
        p_k += H * K
        p_g += HV * K
        p_v += HV * V
        p_o += HV * V
        p_beta += HV
        p_s += HV * K * V
        p_u += HV * V

    if STORE_FINAL:
        tl.store(ht + (i_n.to(tl.int64) * HV + i_hv) * K * V + o_h, b_h, mask=m_h)
    if USE_POOL:
        tl.store(h0 + (i_s * HV + i_hv) * K * V + o_h, b_h, mask=m_h)


def fused_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    state_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    step_states: torch.Tensor | None = None,
    corrections: torch.Tensor | None = None,
):
    """Token-by-token KDA in one Triton kernel (fla ``fused_recurrent_kda``; SGLang / vLLM decode).

    Args:
        q, k: ``[B, T, H, K]`` (not normalised here); v: ``[B, T, HV, V]`` with ``HV % H == 0``;
            g: ``[B, T, HV, K]`` log decay; beta: ``[B, T, HV]`` post-sigmoid; any float dtype (loads -> fp32).
        scale: query scale, default ``K ** -0.5``.
        initial_state: without ``state_indices`` a read-only ``[N, HV, K, V]`` state; with
            ``state_indices`` a float32 state pool ``[P, HV, K, V]``, slot ``state_indices[n]`` read as
            sequence n's initial state and overwritten in place with its final state.
        output_final_state: also return the final states as a new ``[N, HV, K, V]`` float32 tensor.
        cu_seqlens: ``[N + 1]`` int offsets of packed sequences (requires ``B == 1``).
        state_indices: ``[N]`` int pool slots (distinct, in ``[0, P)``).
        has_initial_state: ``[N]`` bool; where False sequence n starts from a zero state.
        step_states: optional preallocated float32 ``[B, T, HV, K, V]``: the state after every token.
        corrections: optional preallocated float32 ``[B, T, HV, V]``: every token's correction
            ``beta_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)`` (RecoverSSM; vLLM ``_kda_recoverssm_verify_kernel``).

    Returns:
        ``(o, final_state)``: ``o`` ``[B, T, HV, V]`` in ``v.dtype``; ``final_state`` ``[N, HV, K, V]``
        float32 or ``None``.
    """
    p = prepare_kda_call(q, k, v, g, beta, scale, initial_state, cu_seqlens, state_indices, has_initial_state)
    B, T, HV, K, V, N = p.shapes.B, p.shapes.T, p.shapes.HV, p.shapes.K, p.shapes.V, p.shapes.N
    if step_states is not None:
        _check_buffer("step_states", step_states, (B, T, HV, K, V), q.device)
    if corrections is not None:
        _check_buffer("corrections", corrections, (B, T, HV, V), q.device)
    o = torch.empty(B, T, HV, V, dtype=v.dtype, device=v.device)
    ht = torch.empty(N, HV, K, V, dtype=torch.float32, device=v.device) if output_final_state else None
    _launch_fused_recurrent(p, o, ht, step_states, corrections)
    return o, ht


def _check_buffer(name: str, buf: torch.Tensor, shape: tuple[int, ...], device: torch.device) -> None:
    """An output buffer (``step_states``, ``corrections``) must be a contiguous float32 tensor of ``shape``
    on ``device``."""
    if not isinstance(buf, torch.Tensor):
        raise ValueError(f"{name}: must be a torch.Tensor")
    if buf.shape != shape or buf.dtype != torch.float32:
        raise ValueError(f"{name}: must be a float32 buffer of shape {shape}, got {tuple(buf.shape)} {buf.dtype}")
    if not buf.is_contiguous() or buf.device != device:
        raise ValueError(f"{name}: must be contiguous and on {device}")


def _launch_fused_recurrent(
    p: PreparedInputs, o: torch.Tensor, ht: torch.Tensor | None, step_states: torch.Tensor | None,
    corrections: torch.Tensor | None = None,
) -> None:
    """One program per (V-block, sequence, value head): writes ``o``, and ``ht`` / ``step_states`` /
    ``corrections`` if given."""
    s = p.shapes
    BK = next_pow2(s.K)
    # the [BK, BV] fp32 state tile lives in registers: at most 4K values (fla uses BV = 32)
    BV = min(next_pow2(s.V), max(8, 4096 // BK), 32)
    NV = triton.cdiv(s.V, BV)
    dummy = o  # placeholder pointer for disabled (constexpr-False) arguments; never dereferenced
    grid = (NV, s.N * s.HV)
    _fused_recurrent_kda_kernel[grid](
        p.q,
        p.k,
        p.v,
        p.g,
        p.beta,
        o,
        p.state if p.state is not None else dummy,
        ht if ht is not None else dummy,
        step_states if step_states is not None else dummy,
        corrections if corrections is not None else dummy,
        p.cu_seqlens if p.cu_seqlens is not None else dummy,
        p.state_indices if p.state_indices is not None else dummy,
        p.has_initial_state if p.has_initial_state is not None else dummy,
        p.scale,
        s.T,
        H=s.H,
        HV=s.HV,
        K=s.K,
        V=s.V,
        BK=BK,
        BV=BV,
        USE_H0=p.state is not None,
        USE_POOL=p.state_indices is not None,
        HAS_FLAGS=p.has_initial_state is not None,
        STORE_FINAL=ht is not None,
        SAVE_STEPS=step_states is not None,
        SAVE_U=corrections is not None,
        IS_VARLEN=p.cu_seqlens is not None,
        num_warps=4,
    )
