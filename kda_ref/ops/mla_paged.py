"""MLA decode over a paged latent cache: the readable torch reference and the shared input checks.

Article concept: MLA (multi-head latent attention, DeepSeek-V2) in its *weight-absorbed* decode form, as
used by the MLA layers of Kimi-Linear: every head attends to the same latent rows ``[c_kv ; k_pe]``
(``kv_cache [num_pages, page_size, Dc + Dp]``, ``block_table [N, max_pages]``, ``seq_lens [N]``). Counterparts:
vLLM's MLA backends (``vllm/v1/attention/backends/mla/``, ``forward_mqa`` in 0.32.0); SGLang's FlashMLA / Triton
decode backend (``req_to_token``). :func:`kda_ref.ops.triton.paged_mla_decode` is the kernel form of this
reference.

Design notes (the absorption, the cache layout): ``docs/kda.md#mla-expand-or-absorb-over-a-paged-cache``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..utils import cdiv
from ._checks import FLOAT_DTYPES, _need


@dataclass(frozen=True)
class PagedMLAShapes:
    """Sizes read off validated paged MLA decode inputs."""

    N: int  # sequences (one decode token each)
    H: int  # query heads
    Dc: int  # latent (c_kv) width, kv_lora_rank
    Dp: int  # shared positional key width (may be 0)
    num_pages: int
    page_size: int
    max_pages: int  # block_table columns


def _is_int_tensor(t: torch.Tensor) -> bool:
    return not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype != torch.bool


def check_paged_mla_inputs(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    check_values: bool = True,
) -> PagedMLAShapes:
    """Validate the inputs of a paged MLA decode and return their sizes.

    Shapes, dtypes and devices are always checked. With ``check_values`` (the default) also every
    ``seq_lens[n]`` in ``[1, max_pages * page_size]`` and every page that sequence reads in
    ``[0, num_pages)`` (both tensors on the host: a device sync on a GPU).

    Raises:
        ValueError: naming the offending argument.
    """
    s = _check_paged_shapes(q_latent, q_pe, kv_cache, block_table, seq_lens)
    _need(
        isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale) and scale > 0,
        "scale",
        f"must be a finite positive number, got {scale!r}",
    )
    if check_values:
        _check_paged_values(block_table, seq_lens, s)
    return s


def _check_paged_shapes(
    q_latent: torch.Tensor, q_pe: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor
) -> PagedMLAShapes:
    """Types, dtypes, shapes and devices of the paged MLA decode tensors (no values read)."""
    floats = (("q_latent", q_latent), ("q_pe", q_pe), ("kv_cache", kv_cache))
    for name, t in floats + (("block_table", block_table), ("seq_lens", seq_lens)):
        _need(isinstance(t, torch.Tensor), name, f"must be a torch.Tensor, got {type(t).__name__}")
    for name, t in floats:
        _need(t.dtype in FLOAT_DTYPES, name, f"must be a floating tensor, got {t.dtype}")

    _need(q_latent.dim() == 3, "q_latent", f"must be [N, H, Dc], got shape {tuple(q_latent.shape)}")
    N, H, Dc = q_latent.shape
    _need(N >= 1 and H >= 1 and Dc >= 1, "q_latent", f"needs N, H, Dc >= 1, got {tuple(q_latent.shape)}")
    _need(
        q_pe.dim() == 3 and q_pe.shape[:2] == (N, H),
        "q_pe",
        f"must be [N={N}, H={H}, Dp], got shape {tuple(q_pe.shape)}",
    )
    Dp = q_pe.shape[2]
    _need(
        kv_cache.dim() == 3,
        "kv_cache",
        f"must be [num_pages, page_size, Dc + Dp], got shape {tuple(kv_cache.shape)}",
    )
    num_pages, page_size, D = kv_cache.shape
    _need(num_pages >= 1 and page_size >= 1, "kv_cache", f"needs num_pages, page_size >= 1, got {tuple(kv_cache.shape)}")
    _need(
        D == Dc + Dp,
        "kv_cache",
        f"last dim must be Dc + Dp = {Dc} + {Dp} = {Dc + Dp} (c_kv then k_pe), got {D}",
    )
    _need(_is_int_tensor(block_table), "block_table", f"must be an integer tensor, got {block_table.dtype}")
    _need(
        block_table.dim() == 2 and block_table.shape[0] == N,
        "block_table",
        f"must be [N={N}, max_pages], got shape {tuple(block_table.shape)}",
    )
    max_pages = block_table.shape[1]
    _need(max_pages >= 1, "block_table", "needs at least one column (max_pages >= 1)")
    _need(_is_int_tensor(seq_lens), "seq_lens", f"must be an integer tensor, got {seq_lens.dtype}")
    _need(seq_lens.shape == (N,), "seq_lens", f"must be [N={N}], got shape {tuple(seq_lens.shape)}")
    for name, t in (("q_pe", q_pe), ("kv_cache", kv_cache), ("block_table", block_table), ("seq_lens", seq_lens)):
        _need(t.device == q_latent.device, name, f"must be on {q_latent.device} like q_latent, got {t.device}")
    return PagedMLAShapes(N=N, H=H, Dc=Dc, Dp=Dp, num_pages=num_pages, page_size=page_size, max_pages=max_pages)


def _check_paged_values(block_table: torch.Tensor, seq_lens: torch.Tensor, s: PagedMLAShapes) -> None:
    """Every ``seq_lens[n]`` in ``[1, max_pages * page_size]`` and every page sequence n reads in
    ``[0, num_pages)``. Reads both tensors on the host (a device sync on a GPU)."""
    lens = [int(x) for x in seq_lens.tolist()]
    cap = s.max_pages * s.page_size
    for n, L in enumerate(lens):
        _need(1 <= L <= cap, "seq_lens", f"seq_lens[{n}] = {L} must be in [1, max_pages * page_size = {cap}]")
    table = block_table.tolist()
    for n, L in enumerate(lens):
        used = table[n][: cdiv(L, s.page_size)]
        bad = [(j, p) for j, p in enumerate(used) if not 0 <= p < s.num_pages]
        _need(
            not bad,
            "block_table",
            f"sequence {n} (length {L}) maps logical page {bad[0][0] if bad else 0} to "
            f"physical page {bad[0][1] if bad else 0}, outside [0, num_pages = {s.num_pages})",
        )


def gather_latent_rows(kv_cache: torch.Tensor, block_table_row: list[int], seq_len: int) -> torch.Tensor:
    """The ``[seq_len, Dc + Dp]`` latent rows of one sequence, in logical order, read through its pages."""
    page_size = kv_cache.shape[1]
    pages = block_table_row[: cdiv(seq_len, page_size)]
    rows = kv_cache[torch.tensor(pages, dtype=torch.long, device=kv_cache.device)]  # [P, page_size, D]
    return rows.reshape(-1, kv_cache.shape[2])[:seq_len]


def paged_mla_decode_ref(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Weight-absorbed MLA decode, one query token per sequence, over a paged latent cache.

    Args:
        q_latent: ``[N, H, Dc]`` query already multiplied by ``W_UK`` (absorbed).
        q_pe: ``[N, H, Dp]`` positional part of the query (not rotated for Kimi-Linear's NoPE MLA).
        kv_cache: ``[num_pages, page_size, Dc + Dp]`` latent rows ``[c_kv ; k_pe]``.
        block_table: int ``[N, max_pages]``, logical page -> physical page.
        seq_lens: int ``[N]``, cached tokens per sequence (including the current one), >= 1.
        scale: softmax scale, ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5`` for MLA (not defaulted).

    Returns:
        ``[N, H, Dc]`` latent output in ``q_latent.dtype`` (multiply by ``W_UV`` afterwards), computed in
        float32 (float64 if any input is float64).
    """
    s = check_paged_mla_inputs(q_latent, q_pe, kv_cache, block_table, seq_lens, scale)
    dt = torch.float64 if torch.float64 in (q_latent.dtype, q_pe.dtype, kv_cache.dtype) else torch.float32
    out = torch.empty(s.N, s.H, s.Dc, dtype=q_latent.dtype, device=q_latent.device)
    table = block_table.tolist()
    for n, L in enumerate(int(x) for x in seq_lens.tolist()):
        rows = gather_latent_rows(kv_cache, table[n], L).to(dt)  # [L, Dc + Dp]
        c_kv, k_pe = rows[:, : s.Dc], rows[:, s.Dc :]
        score = scale * (q_latent[n].to(dt) @ c_kv.T + q_pe[n].to(dt) @ k_pe.T)  # [H, L]
        out[n] = (torch.softmax(score, dim=-1) @ c_kv).to(out.dtype)  # the value is c_kv itself
    return out
