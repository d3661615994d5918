"""Triton kernel: weight-absorbed MLA decode over a paged latent cache.

Same semantics as :func:`kda_ref.ops.mla_paged.paged_mla_decode_ref`: MQA over the latent rows
``[c_kv ; k_pe]``. One program serves ``BLOCK_H`` heads (each latent tile reused for the scores and the
weighted sum) and resolves each token through the block table, so any page size works. Grid
``(N, cdiv(H, BLOCK_H), cdiv(Dc, BLOCK_DV))``; online softmax in base 2; fp32 arithmetic. Counterparts:
vLLM's MLA backends (``vllm/v1/attention/backends/mla/``, ``forward_mqa`` in 0.32.0); SGLang's FlashMLA /
``triton_backend`` decode. Not done: flash-decoding splits (``num_kv_splits``), FP8 caches.

Design notes: ``docs/kda.md#mla-expand-or-absorb-over-a-paged-cache``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..mla_paged import check_paged_mla_inputs

_LOG2E = 1.4426950408889634


@triton.jit
def _paged_mla_decode_kernel(
    q_lat_ptr,
    q_pe_ptr,
    kv_ptr,
    bt_ptr,
    seq_lens_ptr,
    out_ptr,
    qk_scale,  # softmax scale * log2(e): the kernel works with exp2
    H,
    DC,
    DP,
    PAGE_SIZE,
    stride_ql_n,
    stride_ql_h,
    stride_ql_d,
    stride_qp_n,
    stride_qp_h,
    stride_qp_d,
    stride_kv_page,
    stride_kv_slot,
    stride_kv_d,
    stride_bt_n,
    stride_bt_j,
    stride_o_n,
    stride_o_h,
    stride_o_d,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_D_BLOCKS: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_DP: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    n = tl.program_id(0)
    hb = tl.program_id(1)
    vb = tl.program_id(2)

    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_t = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_p = tl.arange(0, BLOCK_DP)
    mask_p = offs_p < DP
    offs_dv = vb * BLOCK_DV + tl.arange(0, BLOCK_DV)
    mask_dv = offs_dv < DC

    seq_len = tl.load(seq_lens_ptr + n)
    q_lat_base = q_lat_ptr + n * stride_ql_n + offs_h[:, None] * stride_ql_h
    bt_row = bt_ptr + n * stride_bt_n

    # The positional query is small ([BLOCK_H, Dp]): keep it for the whole sequence.
    q_pe = tl.load(
        q_pe_ptr + n * stride_qp_n + offs_h[:, None] * stride_qp_h + offs_p[None, :] * stride_qp_d,
        mask=mask_h[:, None] & mask_p[None, :],
        other=0.0,
    ).to(tl.float32)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)

    for start in range(0, seq_len, BLOCK_N):
        pos = start + offs_t
        mask_t = pos < seq_len
        # Token -> (physical page, slot) through the block table; masked tokens read page 0 and
        # are never loaded from the cache.
        page = tl.load(bt_row + (pos // PAGE_SIZE) * stride_bt_j, mask=mask_t, other=0)
        slot = pos % PAGE_SIZE
        row = kv_ptr + page.to(tl.int64) * stride_kv_page + slot * stride_kv_slot  # [BLOCK_N]

        # Scores: positional part, then the latent part tiled over Dc.
        k_pe = tl.load(
            row[None, :] + (DC + offs_p)[:, None] * stride_kv_d,
            mask=mask_p[:, None] & mask_t[None, :],
            other=0.0,
        ).to(tl.float32)  # [BLOCK_DP, BLOCK_N]
        s = tl.dot(q_pe, k_pe, input_precision=INPUT_PRECISION)
        for db in range(NUM_D_BLOCKS):
            d = db * BLOCK_D + offs_d
            mask_d = d < DC
            q = tl.load(
                q_lat_base + d[None, :] * stride_ql_d,
                mask=mask_h[:, None] & mask_d[None, :],
                other=0.0,
            ).to(tl.float32)  # [BLOCK_H, BLOCK_D]
            c = tl.load(
                row[None, :] + d[:, None] * stride_kv_d,
                mask=mask_d[:, None] & mask_t[None, :],
                other=0.0,
            ).to(tl.float32)  # [BLOCK_D, BLOCK_N]
            s += tl.dot(q, c, input_precision=INPUT_PRECISION)
        s = tl.where(mask_t[None, :], s * qk_scale, float("-inf"))

        # Online softmax. Every tile holds at least one valid token (start < seq_len), so m_new
        # is finite and exp2(-inf - m_new) = 0 handles both the first tile and masked tokens.
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)

        v = tl.load(
            row[:, None] + offs_dv[None, :] * stride_kv_d,
            mask=mask_t[:, None] & mask_dv[None, :],
            other=0.0,
        ).to(tl.float32)  # [BLOCK_N, BLOCK_DV]: the value is the latent c_kv itself
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=INPUT_PRECISION)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(
        out_ptr + n * stride_o_n + offs_h[:, None] * stride_o_h + offs_dv[None, :] * stride_o_d,
        out.to(out_ptr.dtype.element_ty),
        mask=mask_h[:, None] & mask_dv[None, :],
    )


def _pow2_at_least_16(x: int) -> int:
    # tl.dot needs every dimension >= 16 on the GPU.
    return max(16, triton.next_power_of_2(max(1, x)))


def paged_mla_decode(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    block_h: int = 16,
    block_n: int = 32,
    block_d: int = 64,
    block_dv: int | None = None,
    check_values: bool = True,
    num_warps: int = 4,
) -> torch.Tensor:
    """Weight-absorbed (MQA-over-latent) MLA decode over a paged latent cache, in Triton.

    Args:
        q_latent: ``[N, H, Dc]`` query already multiplied by ``W_UK``; q_pe: ``[N, H, Dp]`` (not rotated).
        kv_cache: ``[num_pages, page_size, Dc + Dp]``, rows ``[c_kv ; k_pe]``.
        block_table: int ``[N, max_pages]``; seq_lens: int ``[N]`` (>= 1, current token included).
        scale: softmax scale (for MLA ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5``).
        block_h / block_n / block_d: heads per program, tokens per tile (may span pages), Dc columns per
            score step (powers of two >= 16); block_dv: output Dc columns per program (default ``Dc`` rounded up).
        check_values: validate ``seq_lens`` / ``block_table`` contents (a host sync on a GPU).
        num_warps: GPU warps per program (ignored by the interpreter).

    Returns:
        ``[N, H, Dc]`` latent output in ``q_latent.dtype``; multiply by ``W_UV`` afterwards.
    """
    s = check_paged_mla_inputs(
        q_latent, q_pe, kv_cache, block_table, seq_lens, scale, check_values=check_values
    )
    block_d, block_dv = _tiles(s.Dc, block_h, block_n, block_d, block_dv)
    out = torch.empty(s.N, s.H, s.Dc, dtype=q_latent.dtype, device=q_latent.device)
    half_only = all(t.dtype in (torch.float16, torch.bfloat16) for t in (q_latent, q_pe, kv_cache))
    grid = (s.N, triton.cdiv(s.H, block_h), triton.cdiv(s.Dc, block_dv))
    _paged_mla_decode_kernel[grid](
        q_latent, q_pe, kv_cache, block_table, seq_lens.contiguous(), out, float(scale) * _LOG2E,
        s.H, s.Dc, s.Dp, s.page_size,
        *q_latent.stride(), *q_pe.stride(), *kv_cache.stride(), *block_table.stride(), *out.stride(),
        BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_D=block_d, NUM_D_BLOCKS=math.ceil(s.Dc / block_d),
        BLOCK_DV=block_dv, BLOCK_DP=_pow2_at_least_16(s.Dp), INPUT_PRECISION="tf32" if half_only else "ieee",
        num_warps=num_warps,
    )
    return out


def _tiles(Dc: int, block_h: int, block_n: int, block_d: int, block_dv: int | None) -> tuple[int, int]:
    """:func:`paged_mla_decode`'s tile sizes checked (powers of two >= 16, else a ``ValueError`` naming the
    argument): ``(block_d, block_dv)`` fitted to the latent width ``Dc``."""
    for name, b in (("block_h", block_h), ("block_n", block_n), ("block_d", block_d)):
        if b < 16 or b & (b - 1):
            raise ValueError(f"{name}: must be a power of two >= 16, got {b}")
    block_dv = _pow2_at_least_16(Dc) if block_dv is None else block_dv
    if block_dv < 16 or block_dv & (block_dv - 1):
        raise ValueError(f"block_dv: must be a power of two >= 16, got {block_dv}")
    return min(block_d, _pow2_at_least_16(Dc)), block_dv
