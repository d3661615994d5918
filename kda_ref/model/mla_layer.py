"""The MLA layer of Kimi-Linear and Kimi K3 (NoPE), with a paged latent cache.

Article concept ``state.mla_kv``: per token the layer caches one latent row ``[c_kv | k_pe]``, written into
pages through the sequence's ``block_table`` (SGLang ``req_to_token`` + ``MLATokenToKVPool``; vLLM
``block_table`` + the MLA KV cache spec). Extend: expand-then-attend; decode: weight-absorbed attention
(torch or the Triton paged kernel, as the backend says). K3 adds q-LoRA and an output gate, both outside
the cache (Moonshot's ``KimiMLAAttention``; vLLM ``vllm/models/kimi_k3/nvidia/mla.py``).
:meth:`MLAAttention.decode` is the fused fast path (FlashMLA's and SGLang's ``forward_absorb`` form),
tested against :meth:`MLAAttention.forward`. Design notes: ``docs/model.md#the-mla-layer``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn

from ..ops.backend import KernelBackend, kernel_backend
from ..ops.dispatcher import KDAKernelDispatcher
from ..ops.mla import mla_attention_absorbed, mla_attention_naive, split_kv_b
from ..ops.norms import rms_norm
from ..ops.pad_rows import gather_rows, write_rows
from .batch import DecodePlan, ForwardBatch
from .layer_state import HybridCacheTensors
from .config import ModelConfig
from .parts import FusedWeightCache, NormWeight, mla_parts, rms_norm_fast, transposed


class MLAFusedWeights(NamedTuple):
    """One MLA layer's fast-path weights (:meth:`MLAAttention.fused_weights`)."""

    # [hidden, Q + Dc + Dp (+ H*Dv)]: q_proj (Q = H*(Dn+Dp)) or q_a_proj (Q the q-LoRA rank) | kv_a_proj_with_mqa
    # (| g_proj), one matmul (SGLang's DeepSeek MLA merges q_a_proj and kv_a_proj_with_mqa as fused_qkv_a_proj_with_mqa)
    in_proj: torch.Tensor
    widths: tuple[int, ...]  # its column blocks, one per projection
    q_b: torch.Tensor | None  # q_b_proj.weight^T [rank, H*(Dn+Dp)] (q-LoRA's second projection), else None
    # W_UK [H, Dn, Dc] and W_UV^T [H, Dc, Dv] from kv_b_proj, contiguous for bmm (vLLM 0.32.0's
    # MLAAttention.process_weights_after_loading keeps W_UK_T / W_UV the same way)
    w_uk: torch.Tensor
    w_uv_t: torch.Tensor
    o_proj: torch.Tensor  # o_proj.weight^T [H*Dv, hidden]


class MLAAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        c = config
        self.layer_idx = layer_idx
        self.num_heads = c.num_attention_heads
        self.nope, self.pe, self.v_dim, self.latent = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        self.scale = (self.nope + self.pe) ** -0.5
        self.eps = c.rms_norm_eps
        # the parts Kimi K3 swaps, chosen here once (kda_ref.model.parts): the query (q_proj, or q-LoRA's
        # q_a -> norm -> q_b) and the output gate (none, or sigmoid(g_proj(x)))
        self.query, self.out_gate = mla_parts(c)
        self.query.build(self, c.hidden_size, self.num_heads * (self.nope + self.pe))
        self.kv_a_proj_with_mqa = nn.Linear(c.hidden_size, self.latent + self.pe, bias=False)
        self.kv_a_layernorm = NormWeight(self.latent)
        self.kv_b_proj = nn.Linear(self.latent, self.num_heads * (self.nope + self.v_dim), bias=False)
        self.out_gate.build(self, c.hidden_size, self.num_heads * self.v_dim)
        self.o_proj = nn.Linear(self.num_heads * self.v_dim, c.hidden_size, bias=False)
        self._fused = FusedWeightCache()  # derived from the parameters above; not in the state dict

    # ---- fused weights of the fast path -----------------------------------------------------------
    def fused_in_projections(self) -> list[nn.Linear]:
        """The projections of the layer's input ``x``, in the fused matmul's column order: the query's
        (``q_proj``, or K3's ``q_a_proj``), ``kv_a_proj_with_mqa``, and K3's output gate ``g_proj``."""
        return [self.query.in_proj(self), self.kv_a_proj_with_mqa, *self.out_gate.in_projs(self)]

    def fused_weights(self) -> MLAFusedWeights:
        """Every weight of the fast path (:class:`MLAFusedWeights`), built together and cached as one entry
        (one version check a step; any source written in place rebuilds all)."""
        return self._fused.get("fused", self._fused_sources, self._build_fused)

    def _fused_sources(self) -> list[torch.Tensor]:
        """The fused input projections' weights, then ``kv_b_proj``, ``o_proj`` (and q-LoRA's ``q_b_proj``)."""
        return [m.weight for m in self.fused_in_projections()] + [self.kv_b_proj.weight, self.o_proj.weight] + \
            ([self.q_b_proj.weight] if hasattr(self, "q_b_proj") else [])

    def _build_fused(self, ws) -> MLAFusedWeights:
        n = len(self.fused_in_projections())
        ins, (kv_b, o_proj), q_b = ws[:n], ws[n:n + 2], ws[n + 2:]
        w_uk, w_uv = split_kv_b(kv_b, self.num_heads, self.nope, self.v_dim)
        return MLAFusedWeights(in_proj=transposed(torch.cat(ins, dim=0)), widths=tuple(w.shape[0] for w in ins),
                               q_b=transposed(q_b[0]) if q_b else None, w_uk=w_uk.contiguous(),
                               w_uv_t=w_uv.transpose(1, 2).contiguous(), o_proj=transposed(o_proj))

    def project_fused(self, x: torch.Tensor, w: MLAFusedWeights):
        """:meth:`project` over the fused weights (the input projections as one matmul), the absorbed query
        ready: ``x [T, hidden]`` fp32 -> ``(q_lat [T, H, Dc], q_pe [T, H, Dp], rows [T, Dc + Dp], gate)``,
        ``gate`` the output gate's logits, ``[T, H*Dv]`` each (an empty list without one: :meth:`output_fused`'s
        input)."""
        T, H, Dc, Dp = x.shape[0], self.num_heads, self.latent, self.pe
        q, c, *gate = torch.mm(x, w.in_proj).split(w.widths, dim=-1)  # [T, Q + Dc + Dp (+ H*Dv)]
        c, k_pe = c.split([Dc, Dp], dim=-1)
        q = self.query.finish_fused(self, q, self.eps, w.q_b)  # [T, H*(Dn+Dp)]
        row = torch.cat([rms_norm_fast(c, self.kv_a_layernorm.weight, self.eps), k_pe], dim=-1)  # latent row [T, Dc+Dp]
        q_nope, q_pe = q.view(T, H, self.nope + Dp).split([self.nope, Dp], dim=-1)
        # absorb W_UK: [H,T,Dn]@[H,Dn,Dc] -> [T,H,Dc] (contiguous operands: what inductor's C++ GEMM template takes)
        q_lat = torch.bmm(q_nope.transpose(0, 1).contiguous(), w.w_uk).transpose(0, 1)
        return q_lat, q_pe, row, gate

    def output_fused(self, o_lat: torch.Tensor, gate: list[torch.Tensor], w: MLAFusedWeights) -> torch.Tensor:
        """The attention's latent output ``o_lat [T, H, Dc]`` -> ``[T, hidden]``: W_UV absorbed, K3's output gate
        (``gate``, :meth:`project_fused`'s), then o_proj."""
        T = o_lat.shape[0]
        # [H,T,Dc]@[H,Dc,Dv] -> [T,H,Dv]
        out = torch.bmm(o_lat.transpose(0, 1).contiguous(), w.w_uv_t).transpose(0, 1)
        out = self.out_gate.fused(out.reshape(T, self.num_heads * self.v_dim), gate)
        return torch.mm(out, w.o_proj)

    def decode(self, x: torch.Tensor, plan: DecodePlan, cache: HybridCacheTensors,
               dispatcher: KDAKernelDispatcher) -> torch.Tensor:
        """Fast path of an all-decode step, ``x [N, hidden]`` -> ``[N, hidden]``, or of a verify step,
        ``x [N * L, hidden]`` (``plan.tokens = L`` tokens per sequence, token t attending to the cached
        rows and the step's tokens up to t); see the module docstring. ``dispatcher``: the model's kernel
        dispatcher, whose backend (``dispatcher.kernels``) says which decode runs."""
        T, H, Dc, Dp, L = x.shape[0], self.num_heads, self.latent, self.pe, plan.tokens
        N = T // L
        w = self.fused_weights()
        q_lat, q_pe, row, gate = self.project_fused(x, w)
        kv = cache.kv[cache.mla_index[self.layer_idx]]  # [pages, page_size, Dc+Dp]
        kv_rows = kv.view(-1, Dc + Dp)  # [pages * page_size, Dc+Dp]: flat rows, as the plan indexes them
        write_rows(kv_rows, plan.kv_write, row, plan.pad)  # a PAD row (kv_write -1) writes nothing live
        if L == 1 and not plan.pad and dispatcher.kernels.uses_triton_mla_decode:
            from ..ops.triton import paged_mla_decode

            o_lat = paged_mla_decode(q_lat.contiguous(), q_pe.contiguous(), kv, plan.block_table.to(torch.int32),
                                     plan.kv_lens.to(torch.int32), self.scale)
        else:  # torch (a static step, or a verify step: several queries per sequence)
            Lk = plan.kv_bias.shape[-1]  # whole pages: [N, P] pages -> [N, P * page_size] rows, masked past the end
            # [N * P] pages; a static step's PAD page (-1) lies past its row's tokens (or in a PAD row), so it
            # is read as the PAD unit 0 and zeroed by kv_pad like any never-written row
            pages = plan.kv_pages.reshape(-1)
            rows = (gather_rows(kv, pages) if plan.pad else kv.index_select(0, pages)).view(N, Lk, Dc + Dp)  # a copy
            rows = rows if rows.dtype == x.dtype else rows.to(x.dtype)
            rows.masked_fill_(plan.kv_pad, 0.0)  # never-written rows may hold NaN (0 * NaN leaks past the mask)
            q_full = torch.cat([q_lat, q_pe], dim=-1).view(N, L * H, Dc + Dp)  # token-major queries per sequence
            bias = plan.kv_bias if L == 1 else plan.kv_bias.repeat_interleave(H, dim=1)  # [N, L*H or 1, Lk]
            # [N, L*H, Lk]; traced, a plain bmm (baddbmm has no C++ GEMM template: compile_gemm would refuse it)
            scores = (torch.bmm(q_full, rows.transpose(1, 2)).mul_(self.scale).add_(bias) if torch.compiler.is_compiling()
                      else torch.baddbmm(bias, q_full, rows.transpose(1, 2), alpha=self.scale))
            o_lat = torch.bmm(scores.softmax(-1), rows[:, :, :Dc]).view(T, H, Dc)  # the value is c_kv itself
        return self.output_fused(o_lat, gate, w)

    def latents(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, hidden]`` -> cache rows ``[T, Dc + Dp]`` = ``[norm(c_kv) | k_pe]``."""
        ckv = self.kv_a_proj_with_mqa(x)
        c, k_pe = ckv.split([self.latent, self.pe], dim=-1)
        return torch.cat([rms_norm(c, self.kv_a_layernorm.weight, self.eps), k_pe], dim=-1)

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, hidden]`` -> ``[T, H*(Dn+Dp)]``: ``q_proj(x)``, or K3's ``q_b_proj(RMSNorm(q_a_proj(x)))``."""
        return self.query.reference(self, x, self.eps)

    def project(self, x: torch.Tensor):
        """``x [T, hidden]`` -> ``(q_nope [T, H, Dn], q_pe [T, H, Dp], rows [T, Dc + Dp])``: the queries
        (:meth:`queries`) and the latent cache rows (:meth:`latents`), one call per checkpoint projection."""
        T = x.shape[0]
        q = self.queries(x).view(T, self.num_heads, self.nope + self.pe)  # [T, H*(Dn+Dp)] -> [T, H, Dn+Dp]
        q_nope, q_pe = q.split([self.nope, self.pe], dim=-1)
        return q_nope, q_pe, self.latents(x)

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The attention's output ``o [T, H, Dv]`` of the layer's input ``x [T, hidden]`` -> ``[T, hidden]``:
        ``o_proj(o)``, or with K3's output gate ``o_proj(o * sigmoid(g_proj(x)))`` (Moonshot's
        ``KimiMLAAttention``; vLLM ``kimi_k3/nvidia/mla.py::_gate_sigmoid_mul``)."""
        return self.o_proj(self.out_gate.reference(self, o.flatten(-2), x))

    def forward(self, x: torch.Tensor, batch: ForwardBatch, cache: HybridCacheTensors | None,
                backend: str | KernelBackend = "torch", out_rows=None) -> torch.Tensor:
        """The reference path: ``x [T, hidden]`` packed as ``batch.cu_seqlens`` -> ``[T, hidden]``. ``backend``:
        as :meth:`decode`'s (asked which kernel runs the single-query decode sequences). ``out_rows``: the
        output at those rows alone (every row's KV is still written); when they are the sequences' last rows,
        only their queries are computed (:meth:`_last_rows`)."""
        triton = kernel_backend(backend).uses_triton_mla_decode
        if out_rows is not None and cache is not None and _are_last_rows(out_rows, batch):
            return self._last_rows(x, batch, cache, triton)
        q_nope, q_pe, rows = self.project(x)
        if cache is None:
            offs = batch.cu_seqlens.tolist()
            out = torch.cat([self.attend(q_nope[s:e], q_pe[s:e], rows[s:e], decode=False)
                             for s, e in zip(offs, offs[1:])])
        else:
            out = self._attend_cached(q_nope, q_pe, rows, batch, cache, triton)
        return self.output(out, x) if out_rows is None else self.output(out[out_rows], x[out_rows])

    def _attend_cached(self, q_nope, q_pe, rows, batch: ForwardBatch, cache: HybridCacheTensors, triton: bool):
        """:meth:`forward`'s attention with a cache: the new latent ``rows`` written to the pages, decode
        sequences through :meth:`_decode`, fresh prompts together, the rest over their gathered history ->
        ``[T, H, Dv]``."""
        offs = batch.cu_seqlens.tolist()
        kv = cache.kv[cache.mla_index[self.layer_idx]]
        self._write(kv, rows, batch)
        is_decode = [ph == "decode" for ph in batch.phases()]
        out = torch.empty(q_nope.shape[0], self.num_heads, self.v_dim, dtype=q_nope.dtype, device=q_nope.device)
        if any(is_decode):
            dec = [n for n, d in enumerate(is_decode) if d]
            tok = [offs[n] for n in dec]
            out[tok] = self._decode(q_nope[tok], q_pe[tok], kv, batch.block_table[dec], batch.context_lens[dec] + 1,
                                    triton)
            todo = [n for n, d in enumerate(is_decode) if not d]
        else:
            todo = range(batch.num_seqs)
        todo = self._attend_fresh(q_nope, q_pe, rows, out, batch, todo)
        for n in todo:
            s, e = offs[n], offs[n + 1]
            hist = self._gather(kv, batch, n).to(q_nope.dtype)  # the cache's dtype may differ from the model's
            out[s:e] = self.attend(q_nope[s:e], q_pe[s:e], hist, decode=(e - s == 1))
        return out

    def _last_rows(self, x: torch.Tensor, batch: ForwardBatch, cache: HybridCacheTensors, triton: bool) -> torch.Tensor:
        """:meth:`forward` at each sequence's last row alone -> ``[N, hidden]``: every row's latent written to the
        pages, one query per sequence, which attends over all its rows as a decode query does (:meth:`_decode`).
        The last layer of a step that samples only there (``DecoderLayer.forward``'s ``out_rows``)."""
        kv = cache.kv[cache.mla_index[self.layer_idx]]
        self._write(kv, self.latents(x), batch)
        x_last = x[batch.cu_seqlens[1:] - 1]  # [N, hidden]
        N = x_last.shape[0]
        q = self.queries(x_last).view(N, self.num_heads, self.nope + self.pe)
        q_nope, q_pe = q.split([self.nope, self.pe], dim=-1)
        lens = batch.context_lens + batch.cu_seqlens.diff()  # [N] rows each query attends: all of its sequence
        groups = [list(range(N))] if triton else _padding_groups(lens.tolist())  # the paged kernel pads nothing
        if len(groups) == 1:
            o = self._decode(q_nope, q_pe, kv, batch.block_table, lens, triton)
        else:  # the torch twin pads its rows to the longest: decodes beside a long prompt go apart
            o = q_nope.new_empty(N, self.num_heads, self.v_dim)
            for g in groups:
                idx = torch.tensor(g, device=x.device)
                o[idx] = self._decode(q_nope[idx], q_pe[idx], kv, batch.block_table[idx], lens[idx], triton)
        return self.output(o, x_last)

    def _attend_fresh(self, q_nope, q_pe, rows, out, batch: ForwardBatch, todo) -> list[int]:
        """Attend the sequences of ``todo`` that start from nothing (no cached context) in ONE batched call over
        their own new rows (no read back from the pages): all of them when padding them to the longest at most
        doubles the work, else those of the most common length. A prefill step of fresh prompts of similar
        lengths is one attention call. Writes ``out``; returns the sequences left."""
        offs = batch.cu_seqlens.tolist()
        fresh = [n for n in todo if int(batch.context_lens[n]) == 0 and offs[n + 1] - offs[n] > 1]
        lens = [offs[n + 1] - offs[n] for n in fresh]
        if len(fresh) > 1 and len(fresh) * max(lens) ** 2 > 2 * sum(ln * ln for ln in lens):
            L = max(set(lens), key=lens.count)  # too ragged to pad: the most common length together
            fresh = [n for n, ln in zip(fresh, lens) if ln == L]
            lens = [L] * len(fresh)
        if len(fresh) < 2:
            return list(todo)
        self._attend_together(q_nope, q_pe, rows, out, offs, fresh, lens, whole=len(fresh) == batch.num_seqs)
        return [n for n in todo if n not in set(fresh)]

    def _attend_together(self, q_nope, q_pe, rows, out, offs: list[int], seqs: list[int], lens: list[int],
                         whole: bool) -> None:
        """Fresh sequences ``seqs`` in one attention call, each padded at its end to the longest with copies of
        its own first row, which the causal mask hides from every real query (the padding rows' outputs are
        dropped). ``whole`` with equal lengths: the batch's rows in order, viewed instead of gathered."""
        B, Lmax = len(seqs), max(lens)
        if whole and min(lens) == Lmax:
            idx, valid = None, None
            take = lambda t: t.view(B, Lmax, *t.shape[1:])  # noqa: E731  [B*L, ...] -> [B, L, ...]
        else:
            j = torch.arange(Lmax, device=rows.device)
            starts = torch.tensor([offs[n] for n in seqs], device=rows.device)[:, None]
            valid = j[None, :] < torch.tensor(lens, device=rows.device)[:, None]  # [B, Lmax]
            idx = torch.where(valid, starts + j, starts)  # [B, Lmax] token rows; padding repeats the first
            take = lambda t: t[idx.flatten()].view(B, Lmax, *t.shape[1:])  # noqa: E731  [T, ...] -> [B, Lmax, ...]
        c_kv, k_pe = take(rows).split([self.latent, self.pe], dim=-1)
        o = mla_attention_naive(take(q_nope), take(q_pe), c_kv, k_pe, self.kv_b_proj.weight, self.v_dim,
                                self.scale)  # [B, Lmax, H, Dv]
        if idx is None:
            out.copy_(o.reshape(B * Lmax, *o.shape[2:]))
        else:
            out[idx[valid]] = o[valid]

    def attend(self, q_nope, q_pe, rows, decode: bool):
        """Queries ``q_nope [T, H, Dn]``, ``q_pe [T, H, Dp]`` over the latent ``rows [S, Dc + Dp]`` (the last
        ``T`` rows are the queries' own; causal) -> ``[T, H, Dv]``: absorbed for a single decode query,
        naive otherwise. The reference path and a context-parallel rank's attention call it."""
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

    def _decode(self, q_nope, q_pe, kv, block_table, lens, triton: bool):
        """Weight-absorbed attention of one query per sequence (``q_nope [n, H, Dn]``, ``q_pe [n, H, Dp]``) over
        the first ``lens [n]`` rows of its pages (``block_table [n, pages]``), the query's own row last: the
        Triton paged kernel (``triton``), or its torch twin (rows padded to the longest, masked) -> ``[n, H, Dv]``."""
        w_uk, w_uv = split_kv_b(self.kv_b_proj.weight, self.num_heads, self.nope, self.v_dim)
        q_lat = torch.einsum("nhd,hdc->nhc", q_nope, w_uk)  # absorb W_UK: [n, H, Dc]
        if triton:
            from ..ops.triton import paged_mla_decode

            o_lat = paged_mla_decode(q_lat.contiguous(), q_pe.contiguous(), kv,
                                     block_table.to(torch.int32), lens.to(torch.int32), self.scale)
        else:
            ps = kv.shape[1]
            pos = torch.arange(int(lens.max()), device=kv.device)  # [L]
            valid = pos[None, :] < lens[:, None]  # [n, L]
            rows = kv[block_table[:, pos // ps], pos % ps].to(q_lat.dtype)  # [n, L, Dc + Dp], the cache's dtype or not
            rows = rows.masked_fill(~valid[:, :, None], 0.0)  # rows past a sequence's end were never written
            c_kv, k_pe = rows.split([self.latent, self.pe], dim=-1)
            scores = torch.einsum("nhc,nlc->nhl", q_lat, c_kv) + torch.einsum("nhp,nlp->nhl", q_pe, k_pe)
            scores = (scores * self.scale).masked_fill(~valid[:, None, :], float("-inf"))
            o_lat = torch.einsum("nhl,nlc->nhc", scores.softmax(-1), c_kv)  # [n, H, Dc]
        return torch.einsum("nhc,hvc->nhv", o_lat, w_uv)  # absorb W_UV: [n, H, Dv]


def _padding_groups(lens: list[int]) -> list[list[int]]:
    """Indices of ``lens`` grouped, longest first, so that padding every group to its longest at most doubles
    its rows (one group when the lengths are alike)."""
    groups, total = [], 0
    for n in sorted(range(len(lens)), key=lambda i: -lens[i]):
        if groups and (len(groups[-1]) + 1) * lens[groups[-1][0]] <= 2 * (total + lens[n]):
            groups[-1].append(n)
            total += lens[n]
        else:
            groups.append([n])
            total = lens[n]
    return groups


def _are_last_rows(out_rows, batch: ForwardBatch) -> bool:
    """Whether ``out_rows`` is every sequence's last row, in order (the rows an engine step samples from)."""
    return (isinstance(out_rows, torch.Tensor) and out_rows.shape == (batch.num_seqs,)
            and torch.equal(out_rows, batch.cu_seqlens[1:] - 1))
