"""Decayed intra-chunk scores ``sum_d x_i[d] y_j[d] exp(G_i[d] - G_j[d])`` without overflow.

Shared by the readable chunk form (:mod:`kda_ref.ops.kda_chunk`) and the blocked inference path
(:mod:`kda_ref.ops.kda_chunk_blocked`). ``exp(G_i - G_j)`` is never formed as
``exp(G_i) * exp(-G_j)`` over a chunk whose gates decay hard: ``exp(-G_j)`` would overflow. Where
every ``|G|`` of a (chunk, head) is under :data:`FACTOR_LIMIT` the factorisation around the chunk
start is exact and is one matmul; elsewhere :func:`tril_decay_scores` halves the chunk recursively
around anchors (the torch analogue of fla's sub-chunk anchoring in ``chunk_kda_fwd_intra``).
"""

from __future__ import annotations

import torch

_DIRECT_BLOCK = 4  # diagonal blocks up to this size compute exp(G_i - G_j) per pair

# exp's argument below which the result is no longer a normal float (fp32: exp(-87.3) = 1.2e-38), with margin
EXP_FLOOR = {torch.float32: -87.0, torch.float64: -708.0}


def decay_exp(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``exp(x)`` of a log decay with ``x`` first raised to :data:`EXP_FLOOR`: the result differs from exp's
    only where both are below the smallest normal float (1.2e-38 in fp32), and torch's vectorised CPU exp
    runs about 20x slower on a tensor holding any argument past that point (measured 2026-12-06: 0.11 vs
    2.4 ms for 131k fp32 values), which hard-decaying channels put into every chunk. ``inplace``: into ``x``."""
    floor = EXP_FLOOR.get(x.dtype)
    if floor is None:
        return x.exp_() if inplace else x.exp()
    return (x.clamp_(min=floor) if inplace else x.clamp(min=floor)).exp_()


def channel_range(G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(min, max)`` of ``G [..., C, D]`` over its chunk axis, each ``[..., 1, D]``: two reductions, which torch's
    CPU kernels run ~4x faster than one ``aminmax`` over a non-last axis (~23 against 88 us for
    ``[64, 2, 16, 64]`` fp32 on the 2-core machine of docs/benchmarks.md, 2026-12-07)."""
    return G.amin(dim=-2, keepdim=True), G.amax(dim=-2, keepdim=True)


def tril_decay_scores(x: torch.Tensor, y: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """``M[..., i, j] = sum_d x_i[d] y_j[d] exp(G_i[d] - G_j[d])`` for ``j <= i``, 0 above.

    ``x: [..., C, D]`` (may broadcast against ``y``), ``y, G: [..., C, D]``; C a power of two.
    Uses the anchored recursive factorisation described in the module docstring.
    """
    C = G.shape[-2]
    if C <= _DIRECT_BLOCK:
        diff = G[..., :, None, :] - G[..., None, :, :]  # [..., C(i), C(j), D]
        causal = torch.ones(C, C, dtype=torch.bool, device=G.device).tril()
        decay = decay_exp(diff.masked_fill(~causal[:, :, None], 0.0)).masked_fill(~causal[:, :, None], 0.0)
        return (x[..., :, None, :] * decay * y[..., None, :, :]).sum(-1)
    h = C // 2
    # [..., C, D] -> [..., 2, h, D]: both halves recurse as one batch
    split = lambda t: t.unflatten(-2, (2, h))  # noqa: E731
    diag = tril_decay_scores(split(x), split(y), split(G))  # [..., 2, h, h]
    anchor = G[..., h - 1 : h, :]  # [..., 1, D]: last position of the upper half
    left = x[..., h:, :] * decay_exp(G[..., h:, :] - anchor)  # rows i >= h, factor <= 1
    right = y[..., :h, :] * decay_exp(anchor - G[..., :h, :])  # cols j < h, factor <= 1
    lower = left @ right.transpose(-1, -2)  # [..., h, h]
    zeros = torch.zeros_like(lower)
    top = torch.cat([diag[..., 0, :, :], zeros], dim=-1)
    bottom = torch.cat([lower, diag[..., 1, :, :]], dim=-1)
    return torch.cat([top, bottom], dim=-2)  # [..., C, C]


# |G| bound under which exp(G) and exp(-G) are both finite and normal, with margin
FACTOR_LIMIT = {torch.float32: 60.0, torch.float64: 600.0}


def wide_decay_scores(x: torch.Tensor, y: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """:func:`tril_decay_scores` of fp32 operands through fp64 factors, for channels too steep for fp32's.

    A centring shift ``s`` per channel makes ``exp(G + s)`` and ``exp(-s - G)`` normal fp64 floats while the
    channel's range over the chunk is at most ``2 * FACTOR_LIMIT[float64]`` (1,200, a decay of 75 a token
    over 16 tokens), so the scores are one fp64 matmul over those channels, rounded to fp32 once: as exact
    as the recursion and a few small ops instead of its ~40. Any other dtype, or a range past that, takes
    :func:`tril_decay_scores`. ``x: [..., C, D]`` (may broadcast against ``y``), ``y, G: [..., C, D]``."""
    limit = FACTOR_LIMIT[torch.float64]
    lo, hi = channel_range(G)  # [..., 1, D] each channel's range over the chunk
    if G.dtype != torch.float32 or bool((hi - lo).max() > 2 * limit):
        return tril_decay_scores(x, y, G)
    e = G.double() - (lo.double() + hi.double()) * 0.5  # G + s, |G + s| <= 600
    left = x.double() * torch.exp(e)  # [..., C, D]
    right = y.double() * torch.exp(e.neg_())
    # the lower triangle's products are <= |x_i y_j|; above it they may overflow, and tril_ overwrites them
    return outer_sum(left, right).tril_().to(G.dtype)  # [..., C, C]


# Inner widths up to which outer_sum adds outer products instead of calling a batched matmul: MKL's fp64
# bmm of [256, 16, D] x [256, D, 16] took 424 us at D = 1 and ~150 us at D = 2-4 on the 2-core machine of
# docs/benchmarks.md, the outer products 33 / 70 / 75 / 147 us (2026-12-07).
OUTER_MAX_D = 3


def outer_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b^T`` for ``a: [..., C, D]`` (may broadcast against ``b``), ``b: [..., C, D]``: for ``D`` up to
    :data:`OUTER_MAX_D` as ``D`` outer products (the steep channels of a chunk are few), else one matmul."""
    D = a.shape[-1]
    if D > OUTER_MAX_D or D == 0:
        return torch.matmul(a, b.transpose(-1, -2))
    out = a[..., :, 0:1] * b[..., None, :, 0]  # [..., C, 1] x [..., 1, C] -> [..., C, C]
    for d in range(1, D):
        out.addcmul_(a[..., :, d : d + 1], b[..., None, :, d])
    return out


def inverse_decayed_keys(k: torch.Tensor, G: torch.Tensor):
    """``(k * exp(-G))^T`` as ``[..., K, C]`` and the (chunk, head) mask where it is safe to use.

    When every ``|G|`` of a (chunk, head) stays under a dtype limit, ``exp(-G)`` is finite and
    normal and ``exp(G_i - G_j) = exp(G_i) * exp(-G_j)`` loses nothing. The mask is ``None`` when
    every pair is safe (decided by one pass over G, the common case); elsewhere ``exp(-G)`` is
    clamped so the discarded values stay finite.
    """
    limit = FACTOR_LIMIT[G.dtype]
    lo, hi = torch.aminmax(G)
    if bool(max(-lo, hi) <= limit):
        return (k * torch.exp(-G)).transpose(-1, -2), None
    ok = G.abs().amax(dim=(-1, -2)) <= limit  # [NCT, HV]
    return (k * torch.exp((-G).clamp(max=limit))).transpose(-1, -2), ok
