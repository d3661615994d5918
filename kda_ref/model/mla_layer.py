"""The MLA layer of Kimi-Linear (NoPE), with a paged latent cache.

Article concept ``state.mla_kv``: per token the layer caches one latent row ``[c_kv | k_pe]``
(``kv_a_proj_with_mqa`` output, ``c_kv`` through ``kv_a_layernorm``). Rows are written into pages
through the sequence's ``block_table`` (SGLang ``req_to_token`` + ``MLATokenToKVPool``; vLLM
``block_table`` + the MLA KV cache spec) and read back for attention.

* extend: expand-then-attend (:func:`~kda_ref.ops.mla.mla_attention_naive`) over the cached rows
  plus the new ones;
* decode: weight-absorbed attention over the latent rows — torch
  :func:`~kda_ref.ops.mla.mla_attention_absorbed`, or the Triton paged kernel
  :func:`~kda_ref.ops.triton.paged_mla_decode` with the ``triton`` backend.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..ops.mla import mla_attention_absorbed, mla_attention_naive, split_kv_b
from ..ops.norms import rms_norm
from .batch import ForwardBatch
from .cache import HybridCacheTensors
from .config import ModelConfig
from .kda_layer import NormWeight


class MLAAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        c = config
        self.layer_idx = layer_idx
        self.num_heads = c.num_attention_heads
        self.nope, self.pe, self.v_dim, self.latent = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        self.scale = (self.nope + self.pe) ** -0.5
        self.eps = c.rms_norm_eps
        self.q_proj = nn.Linear(c.hidden_size, self.num_heads * (self.nope + self.pe), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.hidden_size, self.latent + self.pe, bias=False)
        self.kv_a_layernorm = NormWeight(self.latent)
        self.kv_b_proj = nn.Linear(self.latent, self.num_heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_dim, c.hidden_size, bias=False)

    def latents(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, hidden]`` -> cache rows ``[T, Dc + Dp]`` = ``[norm(c_kv) | k_pe]``."""
        ckv = self.kv_a_proj_with_mqa(x)
        c, k_pe = ckv.split([self.latent, self.pe], dim=-1)
        return torch.cat([rms_norm(c, self.kv_a_layernorm.weight, self.eps), k_pe], dim=-1)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, cache: HybridCacheTensors | None,
                backend: str = "torch") -> torch.Tensor:
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.num_heads, self.nope + self.pe)  # [T, H*(Dn+Dp)] -> [T, H, Dn+Dp]
        q_nope, q_pe = q.split([self.nope, self.pe], dim=-1)
        rows = self.latents(x)
        offs = batch.cu_seqlens.tolist()
        if cache is None:
            outs = [self._attend(q_nope[s:e], q_pe[s:e], rows[s:e], decode=False) for s, e in zip(offs, offs[1:])]
            return self.o_proj(torch.cat(outs).flatten(-2))
        kv = cache.kv[cache.mla_index[self.layer_idx]]
        self._write(kv, rows, batch)
        is_decode = [L == 1 and int(c) > 0 for L, c in zip(batch.seq_lens, batch.context_lens)]
        out = torch.empty(T, self.num_heads, self.v_dim, dtype=x.dtype, device=x.device)
        if any(is_decode) and not batch.verify:
            dec = [n for n, d in enumerate(is_decode) if d]
            decode = self._decode_triton if backend == "triton" else self._decode_torch
            out[[offs[n] for n in dec]] = decode(q_nope, q_pe, kv, batch, dec, offs)
            todo = [n for n, d in enumerate(is_decode) if not d]
        else:
            todo = range(batch.num_seqs)
        for n in todo:
            s, e = offs[n], offs[n + 1]
            hist = self._gather(kv, batch, n)
            out[s:e] = self._attend(q_nope[s:e], q_pe[s:e], hist, decode=(e - s == 1))
        return self.o_proj(out.flatten(-2))

    def _attend(self, q_nope, q_pe, rows, decode: bool):
        c_kv, k_pe = rows.split([self.latent, self.pe], dim=-1)
        fn = mla_attention_absorbed if decode else mla_attention_naive
        return fn(q_nope, q_pe, c_kv, k_pe, self.kv_b_proj.weight, self.v_dim, self.scale)

    def _positions(self, batch: ForwardBatch):
        """Absolute position of every new token and the sequence it belongs to."""
        seq = torch.repeat_interleave(torch.arange(batch.num_seqs, device=batch.cu_seqlens.device),
                                      torch.tensor(batch.seq_lens, device=batch.cu_seqlens.device))
        pos = torch.arange(batch.num_tokens, device=seq.device) - batch.cu_seqlens[seq] + batch.context_lens[seq]
        return seq, pos

    def _write(self, kv: torch.Tensor, rows: torch.Tensor, batch: ForwardBatch) -> None:
        ps = kv.shape[1]
        seq, pos = self._positions(batch)
        if int((pos // ps).max()) >= batch.block_table.shape[1]:
            raise ValueError("block_table: too few pages for the tokens of this batch")
        pages = batch.block_table[seq, pos // ps]
        kv[pages, pos % ps] = rows.to(kv.dtype)

    def _gather(self, kv: torch.Tensor, batch: ForwardBatch, n: int) -> torch.Tensor:
        ps = kv.shape[1]
        total = int(batch.context_lens[n]) + batch.seq_lens[n]
        pos = torch.arange(total, device=kv.device)
        return kv[batch.block_table[n, pos // ps], pos % ps]  # [total, Dc + Dp]

    def _decode_torch(self, q_nope, q_pe, kv, batch, dec, offs):
        """Weight-absorbed decode for all decode sequences at once over their paged rows (padded to
        the longest, masked): the torch twin of the Triton paged kernel."""
        ps = kv.shape[1]
        tok = torch.tensor([offs[n] for n in dec], device=q_nope.device)
        lens = batch.context_lens[dec] + 1  # [n] cached tokens incl. the current one
        pos = torch.arange(int(lens.max()), device=kv.device)  # [L]
        rows = kv[batch.block_table[dec][:, pos // ps], pos % ps]  # [n, L, Dc + Dp]
        c_kv, k_pe = rows.split([self.latent, self.pe], dim=-1)
        w_uk, w_uv = split_kv_b(self.kv_b_proj.weight, self.num_heads, self.nope, self.v_dim)
        q_lat = torch.einsum("nhd,hdc->nhc", q_nope[tok], w_uk)  # absorb W_UK: [n, H, Dc]
        scores = torch.einsum("nhc,nlc->nhl", q_lat, c_kv) + torch.einsum("nhp,nlp->nhl", q_pe[tok], k_pe)
        scores = (scores * self.scale).masked_fill(~(pos[None, :] < lens[:, None])[:, None, :], float("-inf"))
        o_lat = torch.einsum("nhl,nlc->nhc", scores.softmax(-1), c_kv)  # [n, H, Dc]
        return torch.einsum("nhc,hvc->nhv", o_lat, w_uv)  # absorb W_UV: [n, H, Dv]

    def _decode_triton(self, q_nope, q_pe, kv, batch, dec, offs):
        from ..ops.triton import paged_mla_decode

        tok = torch.tensor([offs[n] for n in dec], device=q_nope.device)
        w_uk, w_uv = split_kv_b(self.kv_b_proj.weight, self.num_heads, self.nope, self.v_dim)
        q_lat = torch.einsum("nhd,hdc->nhc", q_nope[tok], w_uk)  # absorb W_UK: [n, H, Dc]
        seq_lens = (batch.context_lens[dec] + 1).to(torch.int32)
        o_lat = paged_mla_decode(q_lat.contiguous(), q_pe[tok].contiguous(), kv,
                                 batch.block_table[dec].to(torch.int32), seq_lens, self.scale)
        return torch.einsum("nhc,hvc->nhv", o_lat, w_uv)  # absorb W_UV: [n, H, Dv]
