"""MLA (multi-head latent attention) as used by Kimi-Linear: NoPE, latent ``c_kv`` + shared ``k_pe``.

Article concept ``state.mla_kv`` (the first kind of state, ``docs/article.md#s1-2``): an MLA layer caches, per
token, one latent row ``[c_kv (Dc) | k_pe (Dp)]`` shared by all heads; the cache grows with the sequence
and any prefix of it is a valid cache for that prefix. Two equal ways to attend (tested against each other),
both causal with the queries at the last ``Tq`` of ``Tk`` key positions:

* :func:`mla_attention_naive` — expand, then attend (transformers ``KimiLinearAttention``; SGLang / vLLM prefill).
* :func:`mla_attention_absorbed` — weight-absorbed, over the latent rows (vLLM 0.32.0
  ``MLAAttention.forward_impl`` -> the backend's ``forward_mqa``; SGLang ``forward_absorb``); paged Triton form
  :func:`kda_ref.ops.triton.paged_mla_decode`. Design notes: ``docs/kda.md#mla-expand-or-absorb-over-a-paged-cache``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def split_kv_b(kv_b_weight: torch.Tensor, num_heads: int, nope_dim: int, v_dim: int):
    """``kv_b_proj.weight [H*(Dn+Dv), Dc]`` -> ``(W_UK [H, Dn, Dc], W_UV [H, Dv, Dc])``."""
    if kv_b_weight.dim() != 2 or kv_b_weight.shape[0] != num_heads * (nope_dim + v_dim):
        raise ValueError(
            f"kv_b_weight: must be [H*(Dn+Dv), Dc] = [{num_heads * (nope_dim + v_dim)}, Dc], "
            f"got {tuple(kv_b_weight.shape)}"
        )
    w = kv_b_weight.view(num_heads, nope_dim + v_dim, -1)  # [H*(Dn+Dv), Dc] -> [H, Dn+Dv, Dc]
    return w[:, :nope_dim], w[:, nope_dim:]


def _check(q_nope, q_pe, c_kv, k_pe):
    if q_nope.dim() != 3 or q_pe.dim() != 3 or q_nope.shape[:2] != q_pe.shape[:2]:
        raise ValueError(
            f"q_nope / q_pe: must be [Tq, H, Dn] and [Tq, H, Dp], got {tuple(q_nope.shape)}, {tuple(q_pe.shape)}"
        )
    if c_kv.dim() != 2 or k_pe.dim() != 2 or c_kv.shape[0] != k_pe.shape[0]:
        raise ValueError(f"c_kv / k_pe: must be [Tk, Dc] and [Tk, Dp], got {tuple(c_kv.shape)}, {tuple(k_pe.shape)}")
    if k_pe.shape[1] != q_pe.shape[2]:
        raise ValueError(f"k_pe: width {k_pe.shape[1]} must equal q_pe's {q_pe.shape[2]}")
    if c_kv.shape[0] < q_nope.shape[0]:
        raise ValueError(f"c_kv: {c_kv.shape[0]} key positions cannot cover {q_nope.shape[0]} queries")


def _causal_softmax(scores: torch.Tensor, Tq: int, Tk: int) -> torch.Tensor:
    # query i sits at absolute position Tk - Tq + i and sees keys 0 .. Tk - Tq + i
    qpos = torch.arange(Tk - Tq, Tk, device=scores.device)[:, None]
    kpos = torch.arange(Tk, device=scores.device)[None, :]
    return scores.masked_fill(kpos > qpos, float("-inf")).softmax(dim=-1)


def mla_attention_naive(q_nope, q_pe, c_kv, k_pe, kv_b_weight, v_dim: int, scale: float):
    """Expand-then-attend MLA. ``q_nope [Tq, H, Dn]``, ``q_pe [Tq, H, Dp]``, ``c_kv [Tk, Dc]``
    (already through ``kv_a_layernorm``), ``k_pe [Tk, Dp]``. Returns ``[Tq, H, Dv]``. With a leading batch
    dimension on every argument it attends ``B`` sequences of equal lengths in one call (fresh sequences may be
    padded at their ends; only the padding rows' outputs are meaningless) and returns ``[B, Tq, H, Dv]``.
    Runs ``F.scaled_dot_product_attention`` with V zero-padded to the q/k width, as vLLM does
    (``prefill/zen_cpu_sdpa.py::_sdpa_layout``). Why: ``docs/kda.md#mla-expand-or-absorb-over-a-paged-cache``.
    """
    batched = q_nope.dim() == 4
    if batched:
        if q_pe.dim() != 4 or c_kv.dim() != 3 or k_pe.dim() != 3 or len({t.shape[0] for t in (q_nope, q_pe, c_kv, k_pe)}) != 1:
            raise ValueError("q_nope / q_pe / c_kv / k_pe: with a batch dimension, all four must carry the same one")
        _check(q_nope[0], q_pe[0], c_kv[0], k_pe[0])
    else:
        _check(q_nope, q_pe, c_kv, k_pe)
        q_nope, q_pe, c_kv, k_pe = q_nope[None], q_pe[None], c_kv[None], k_pe[None]
    B, Tq, H, Dn = q_nope.shape
    Tk, Dp = c_kv.shape[1], k_pe.shape[-1]
    kv = (c_kv @ kv_b_weight.t()).view(B, Tk, H, Dn + v_dim)  # [B, Tk, H*(Dn+Dv)] -> [B, Tk, H, Dn+Dv]
    k = torch.cat([kv[..., :Dn], k_pe[:, :, None, :].expand(B, Tk, H, Dp)], dim=-1)  # [B, Tk, H, Dn+Dp]
    q = torch.cat([q_nope, q_pe], dim=-1)  # [B, Tq, H, Dn+Dp]
    width = max(Dn + Dp, v_dim)  # one head width for the fused kernel: pad the narrower side with zeros
    q, k, v = (F.pad(t, (0, width - t.shape[-1])) for t in (q, k, kv[..., Dn:]))
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, T, H, D] -> [B, H, T, D]
    if Tq == Tk:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    else:  # queries are the last Tq of Tk positions
        qpos = torch.arange(Tk - Tq, Tk, device=q.device)[:, None]
        allowed = torch.arange(Tk, device=q.device)[None, :] <= qpos  # [Tq, Tk]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    o = o[..., :v_dim].transpose(1, 2)  # [B, H, Tq, Dv] -> [B, Tq, H, Dv]
    return o if batched else o[0]


def mla_attention_absorbed(q_nope, q_pe, c_kv, k_pe, kv_b_weight, v_dim: int, scale: float):
    """Weight-absorbed MLA over the latent rows; same arguments and result as the naive form."""
    _check(q_nope, q_pe, c_kv, k_pe)
    Tq, H, Dn = q_nope.shape
    Tk = c_kv.shape[0]
    w_uk, w_uv = split_kv_b(kv_b_weight, H, Dn, v_dim)
    q_lat = torch.einsum("qhn,hnc->qhc", q_nope, w_uk)  # absorb W_UK: [Tq, H, Dc]
    scores = (torch.einsum("qhc,kc->hqk", q_lat, c_kv) + torch.einsum("qhp,kp->hqk", q_pe, k_pe)) * scale
    probs = _causal_softmax(scores, Tq, Tk)
    o_lat = torch.einsum("hqk,kc->qhc", probs, c_kv)  # attend in latent space: [Tq, H, Dc]
    return torch.einsum("qhc,hvc->qhv", o_lat, w_uv)  # absorb W_UV: [Tq, H, Dv]
