"""The KDA layer of Kimi-Linear: projections, short conv, gates, KDA, gated norm, output projection.

Article concept ``sglang.kda_layer`` (``docs/article.md#s6-2``, "``KimiK3DeltaAttention`` is more than matmuls")
and ``sglang.radix_linear_attention_forward`` (``docs/article.md#s6-3``): every KDA layer goes through one entry,
:meth:`KDAAttention.forward`, which reads and writes the layer's recurrent and conv states by ``state_indices``
and hands the phase to the :class:`~kda_ref.ops.KDAKernelDispatcher` -- SGLang ``RadixLinearAttention.forward``,
vLLM ``vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py::KimiGatedDeltaNetAttention._forward`` (0.32.0);
K3's gates as in vLLM ``vllm/models/kimi_k3/nvidia/kda.py::KimiK3DeltaAttention``. :meth:`KDAAttention.decode` / :meth:`KDAAttention.verify`
are the fused fast paths (SGLang ``KimiDeltaAttention.forward_qkvbfg_fused``), tested against ``forward``.
Design notes (the equations, K3's two changed lines, the two forms): ``docs/model.md#the-kda-layer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops.dispatcher import KDAKernelDispatcher, KDAPhase
from ..ops.kda_recurrent import segment_corrections
from ..ops.norms import L2NORM_EPS, l2norm, rms_norm_gated
from ..ops.pad_rows import gather_rows
from ..ops.short_conv import causal_conv1d, causal_conv1d_update, causal_conv1d_update_
from .batch import DecodePlan, ForwardBatch
from .layer_state import HybridCacheTensors
from .config import ModelConfig
from .output import BoundaryStates, GateProbe, LayerRecord, Trajectory
from .parts import FusedWeightCache, NormWeight, kda_parts, rms_norm_fast, transposed
from .verify_record import KEEP_STATES, VerifyRecord


class ShortConvWeight(nn.Module):
    """Holds a depthwise conv weight ``[D, 1, W]`` under the checkpoint's ``*_conv1d.weight`` name."""

    def __init__(self, dim: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, 1, width))


def conv_windows(prev: torch.Tensor, x: torch.Tensor, boundaries: torch.Tensor) -> torch.Tensor:
    """Conv states at token boundaries of one sequence segment.

    ``prev [D, W-1]`` is the state before the segment, ``x [L, D]`` its inputs; the state at
    boundary ``p`` (after ``p`` tokens of the segment) is the last W-1 inputs seen:
    ``cat(prev, x)[p : p + W - 1]``. Returns ``[len(boundaries), D, W-1]``.
    """
    Wm1 = prev.shape[1]
    full = torch.cat([prev.t(), x.to(prev.dtype)], dim=0)  # [W-1 + L, D]
    rows = boundaries[:, None] + torch.arange(Wm1, device=x.device)  # [nb, W-1]
    return full[rows].transpose(1, 2)  # [nb, W-1, D] -> [nb, D, W-1]


class KDAFusedWeights(NamedTuple):
    """One KDA layer's fast-path weights (:meth:`KDAAttention.fused_weights`), SGLang's fused layout."""

    in_proj: torch.Tensor  # [hidden, 3D + H + K + G]: q | k | v | b | f_a | g_a (G = K; SGLang fused_qkvbfg_a_proj)
    #                        or, with K3's full-rank gate, q | k | v | b | f_a | g (G = D; vLLM's K3 in_proj_qkvgfab
    #                        fuses the same six as q | k | v | g | f_a | b)
    fg_b: torch.Tensor  # [2, K, D]: f_b and g_b stacked for one batched matmul (SGLang fused_fg_b_proj); [1, K, D]
    #                     (f_b alone) with a full-rank gate
    conv: torch.Tensor  # [3D, W]: the three depthwise kernels (SGLang qkv_conv1d, vLLM 0.32.0 conv1d), each tap's
    #                     column contiguous
    a: torch.Tensor  # exp(A_log) [H, 1] fp32: the forget gate's constants
    dt_bias: torch.Tensor  # [H, K] fp32
    o_proj: torch.Tensor  # o_proj.weight^T [D, hidden]


class KDAAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        c = config
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = c.linear_num_heads, c.linear_head_dim
        self.eps = c.rms_norm_eps
        dim = c.kda_dim
        self.q_proj = nn.Linear(c.hidden_size, dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, dim, bias=False)
        self.q_conv1d = ShortConvWeight(dim, c.short_conv_kernel_size)
        self.k_conv1d = ShortConvWeight(dim, c.short_conv_kernel_size)
        self.v_conv1d = ShortConvWeight(dim, c.short_conv_kernel_size)
        # Kimi-Linear ships A_log as [1, 1, H, 1]; K3's release as a [K] vector (zero-padded past the H
        # values used: vLLM kimi_k3/nvidia/kda.py::a_log_weight_loader takes the first H)
        self.A_log = nn.Parameter(torch.empty(max(self.num_heads, self.head_dim)) if c.is_k3
                                  else torch.empty(1, 1, self.num_heads, 1))
        self.dt_bias = nn.Parameter(torch.empty(dim))
        self.f_a_proj = nn.Linear(c.hidden_size, self.head_dim, bias=False)
        self.f_b_proj = nn.Linear(self.head_dim, dim, bias=False)
        self.b_proj = nn.Linear(c.hidden_size, self.num_heads, bias=False)
        # the parts Kimi K3 swaps, chosen here once (kda_ref.model.parts): the forget gate (softplus or
        # bounded) and the output gate's projection (g_a -> g_b, or K3's full-rank g_proj)
        self.forget_gate, self.out_gate = kda_parts(c)
        self.out_gate.build(self, c.hidden_size, dim, self.head_dim)
        self.o_norm = NormWeight(self.head_dim)
        self.o_proj = nn.Linear(dim, c.hidden_size, bias=False)
        self._fused = FusedWeightCache()  # derived from the parameters above; not in the state dict

    def conv_weight(self) -> torch.Tensor:
        """The three depthwise kernels fused into one ``[3D, W]`` (channels ordered q | k | v)."""
        return torch.cat([self.q_conv1d.weight, self.k_conv1d.weight, self.v_conv1d.weight], dim=0).squeeze(1)

    # ---- fused weights of the fast path (SGLang's layout, built from the checkpoint's names) -------
    def fused_weights(self) -> "KDAFusedWeights":
        """Every weight of the fast path (:class:`KDAFusedWeights`), built together from the checkpoint's
        parameters and cached as one entry: a decode step checks them once per layer, and any of them
        written in place rebuilds all."""
        return self._fused.get("fused", self._fused_sources, self._build_fused)

    def _fused_sources(self) -> list[torch.Tensor]:
        """In :meth:`_build_fused`'s order: the six input projections, f_b (and g_b), the three conv kernels,
        ``A_log``, ``dt_bias``, ``o_proj``."""
        ins = [m.weight for m in (self.q_proj, self.k_proj, self.v_proj, self.b_proj, self.f_a_proj,
                                  self.out_gate.in_proj(self))]
        fg_b = [m.weight for m in (self.f_b_proj, *self.out_gate.second(self))]
        return ins + fg_b + [self.q_conv1d.weight, self.k_conv1d.weight, self.v_conv1d.weight, self.A_log,
                             self.dt_bias, self.o_proj.weight]

    def _build_fused(self, ws) -> "KDAFusedWeights":
        H, K = self.num_heads, self.head_dim
        n_fg = len(ws) - 12  # f_b, and g_b unless the gate is full-rank
        fg_b, (qc, kc, vc, a_log, dt_bias, o_proj) = ws[6:6 + n_fg], ws[6 + n_fg:]
        return KDAFusedWeights(
            in_proj=transposed(torch.cat(ws[:6], dim=0)),
            fg_b=torch.stack([w.t() for w in fg_b]).contiguous(),
            # each tap's column contiguous (a [W, 3D] tensor seen transposed), as the per-tap update reads it
            conv=transposed(torch.cat([qc, kc, vc], dim=0).squeeze(1)).t(),
            a=a_log.float().reshape(-1)[:H].reshape(H, 1).exp(), dt_bias=dt_bias.float().reshape(H, K),
            o_proj=transposed(o_proj))

    def a_log_heads(self) -> torch.Tensor:
        """``A_log``'s ``H`` values, one per head, whatever shape it ships in (K3's padded ``[K]`` included)."""
        return self.A_log.reshape(-1)[:self.num_heads]

    # ---- the reference form (one call per checkpoint projection; autograd, any dtype) ----------------
    def project(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, hidden]`` -> the short conv's inputs ``[T, 3D]``, channels ``q_proj(x) | k_proj(x) | v_proj(x)``
        (the layout of :meth:`conv_weight` and of the cached conv windows)."""
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)

    def gates(self, x: torch.Tensor):
        """``x [T, hidden]`` -> ``(g [T, H, K] fp32 log decay, beta [T, H])``."""
        raw = self.f_b_proj(self.f_a_proj(x))
        g = self.forget_gate.reference(raw, self.a_log_heads(), self.dt_bias, self.head_dim)
        beta = torch.sigmoid(self.b_proj(x).float())
        return g, beta

    def conv_heads(self, qkv: torch.Tensor, w: torch.Tensor, cu_seqlens: torch.Tensor | None,
                   conv_state: torch.Tensor | None = None):
        """The short conv (SiLU) of :meth:`project`'s ``qkv [T, 3D]`` with ``w`` (:meth:`conv_weight`), the
        sequences packed as ``cu_seqlens`` and continuing ``conv_state [N, 3D, W-1]`` (zeros when None), then
        :meth:`split_heads`: ``(q, k, v [1, T, H, K], the conv windows after each sequence [N, 3D, W-1])``.
        ``cu_seqlens=None``: one token per sequence from ``conv_state`` (the decode update)."""
        if cu_seqlens is None:
            y, new_conv = causal_conv1d_update(qkv, conv_state, w)
        else:
            y, new_conv = causal_conv1d(qkv, w, cu_seqlens=cu_seqlens, conv_state=conv_state)
        return (*self.split_heads(y), new_conv)

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """KDA's output ``o [T, H, V]`` of the layer's input ``x [T, hidden]`` -> ``[T, hidden]``:
        ``o_proj(RMSNorm_head(o) * o_norm.weight * sigmoid(gate(x)))``, the gate K3's full-rank ``g_proj(x)``
        or Kimi-Linear's ``g_b(g_a(x))``."""
        gate = self.out_gate.reference(self, x).unflatten(-1, (self.num_heads, self.head_dim))  # [T, D] -> [T, H, D]
        return self.o_proj(rms_norm_gated(o, gate, self.o_norm.weight, self.eps).flatten(-2))

    # ---- the fused form (fp32, no autograd: the decode and verify steps) ---------------------------
    def project_fused(self, x: torch.Tensor, w: "KDAFusedWeights"):
        """:meth:`project`, :meth:`gates` and the output gate's projection over the fused weights: one matmul
        for the six input projections, one batched matmul for f_b / g_b (f_b alone, one matmul, with K3's
        full-rank gate, whose ``g_proj`` rides in the first). ``x [T, hidden]`` fp32 ->
        ``(qkv [T, 3D], g [T, H, K], beta [T, H], gate [T, D])`` (``gate``: :meth:`output_fused`'s input)."""
        T = x.shape[0]
        H, K, D = self.num_heads, self.head_dim, self.num_heads * self.head_dim
        proj = torch.mm(x, w.in_proj)  # [T, hidden] @ [hidden, 3D + H + K + G]
        qkv, b, tail = proj.split([3 * D, H, proj.shape[1] - 3 * D - H], dim=-1)  # [T, 3D], [T, H], [T, K + G]
        f, gate = self.out_gate.fused(tail, w.fg_b)  # f_b(f_a(x)) [T, D], the gate's logits [T, D]
        # the forget gate (the layer's ForgetGate: Kimi-Linear's softplus or K3's bounded sigmoid), in place
        g = self.forget_gate.fused_(f.view(T, H, K), w.a, w.dt_bias)  # [T, H, K] log decay
        beta = torch.sigmoid(b)  # [T, H]
        return qkv, g, beta, gate

    def heads_fused(self, y: torch.Tensor):
        """The short conv's output ``y [T, 3D]`` (after SiLU) -> ``q, k, v [T, H, K]`` (views), ``q`` and ``k``
        l2-normalised per head (fla's eps): :meth:`split_heads` for the fused steps."""
        T = y.shape[0]
        H, K, D = self.num_heads, self.head_dim, self.num_heads * self.head_dim
        qk = y[:, :2 * D].view(T, 2, H, K)
        qk = qk * qk.pow(2).sum(-1, keepdim=True).add_(L2NORM_EPS).rsqrt_()  # l2norm per head
        return qk[:, 0], qk[:, 1], y[:, 2 * D:].view(T, H, K)

    def output_fused(self, o: torch.Tensor, gate: torch.Tensor, w: "KDAFusedWeights") -> torch.Tensor:
        """:meth:`output` for the fused steps: ``o [T, H, V]`` (or ``[..., H, V]`` over ``T`` rows) and
        :meth:`project_fused`'s ``gate [T, D]`` -> ``[T, hidden]`` (gated head-wise RMSNorm, then o_proj)."""
        T, H, K = gate.shape[0], self.num_heads, self.head_dim
        out = rms_norm_fast(o.reshape(T, H, -1), self.o_norm.weight, self.eps).mul_(torch.sigmoid(gate.view(T, H, K)))
        return torch.mm(out.view(T, H * K), w.o_proj)

    def _new_probe(self, g: torch.Tensor, beta: torch.Tensor) -> GateProbe:
        T, H, D = g.shape[0], self.num_heads, self.head_dim
        k = torch.zeros(T, H, D, dtype=g.dtype, device=g.device)  # filled per phase group
        return GateProbe(g=g.detach(), beta=beta.detach(), k=k, v=torch.zeros_like(k))

    def split_heads(self, qkv: torch.Tensor):
        """The short conv's output ``[t, 3D]`` -> ``q, k, v`` as three ``[1, t, H, D]`` tensors, ``q`` and ``k``
        l2-normalised per head (the reference path, a context-parallel rank and the probes call it)."""
        H, D = self.num_heads, self.head_dim
        heads = qkv.unflatten(-1, (3, H, D))  # [t, 3D] -> [t, 3, H, D]
        qk = l2norm(heads[:, :2])  # q and k in one pass: [t, 2, H, D]
        return qk[None, :, 0], qk[None, :, 1], heads[None, :, 2]

    def forward(self, x: torch.Tensor, batch: ForwardBatch, cache: HybridCacheTensors | None,
                dispatcher: KDAKernelDispatcher, fused: bool = False) -> tuple[torch.Tensor, LayerRecord | None]:
        """``x [T, hidden]`` packed as ``batch.cu_seqlens`` -> ``([T, hidden], record)``; ``record``
        holds what the batch asked this layer to keep (chunk-start / per-token states, gates), or
        is ``None``. ``fused``: the projections and the output through the fused form's weights
        (:meth:`project_fused`, :meth:`output_fused`; fp32 without autograd: the engine's extend steps)."""
        T = x.shape[0]
        if fused:
            fw = self.fused_weights()
            qkv, g, beta, gate = self.project_fused(x, fw)  # [T, 3D], [T, H, K], [T, H], [T, D]
        else:
            qkv, (g, beta), gate = self.project(x), self.gates(x), None  # [T, 3D], ([T, H, K], [T, H])
        record = LayerRecord(probe=self._new_probe(g, beta) if batch.probe else None)
        w = fw.conv if fused else self.conv_weight()  # [3D, W]
        if cache is None:  # stateless: every sequence starts from zero state, nothing is kept
            q, k, v, _ = self.conv_heads(qkv, w, batch.cu_seqlens)
            _fill_probe(record.probe, slice(None), k, v)
            o = dispatcher.run_stateless(q, k, v, g[None], beta[None], cu_seqlens=batch.cu_seqlens,
                                         layer=self.layer_idx)
        else:
            li = cache.kda_index[self.layer_idx]
            groups = batch.phase_groups()
            if len(groups) == 1:  # one phase: the group is the whole batch in order, no gather or scatter
                o = self._forward_group(groups[0], qkv, g, beta, w, batch, cache, li, dispatcher, record,
                                        rows=slice(None))[None]
            else:
                o = torch.zeros(1, T, self.num_heads, self.head_dim, dtype=x.dtype, device=x.device)
                for grp in groups:
                    o[0, grp.token_ids] = self._forward_group(grp, qkv, g, beta, w, batch, cache, li, dispatcher, record)
        has = any(x is not None for x in (record.probe, record.chunk_states, record.step_states, record.trajectory))
        return self.output_fused(o[0], gate, fw) if fused else self.output(o[0], x), record if has else None

    def decode(self, x: torch.Tensor, plan: DecodePlan, cache: HybridCacheTensors,
               dispatcher: KDAKernelDispatcher) -> torch.Tensor:
        """Fast path of an all-decode step: ``x [N, hidden]`` fp32, one token per sequence -> ``[N, hidden]``.

        Same math as :meth:`forward` (tested against it), in fewer and larger ops: one matmul for the
        six input projections, one batched matmul for f_b / g_b, the conv window and the recurrent
        state updated in their pool slots in place (:func:`~kda_ref.ops.short_conv.causal_conv1d_update_`,
        :meth:`~kda_ref.ops.dispatcher.KDAKernelDispatcher.decode_`).
        """
        li, w = cache.kda_index[self.layer_idx], self.fused_weights()
        qkv, g, beta, gate = self.project_fused(x, w)  # [N, 3D], [N, H, K], [N, H], [N, D]
        y = causal_conv1d_update_(qkv, cache.conv[li], plan.state_indices, w.conv, plan.slot_range,
                                  pad=plan.pad)  # [N, 3D]
        q, k, v = self.heads_fused(y)
        o = dispatcher.decode_(q, k, v, g, beta, state_pool=cache.recurrent[li], state_indices=plan.state_indices,
                               cu_seqlens=plan.cu_seqlens, slot_range=plan.slot_range,
                               layer=self.layer_idx, pad=plan.pad)  # [N, H, V]
        return self.output_fused(o, gate, w)

    def verify(self, x: torch.Tensor, plan: DecodePlan, cache: HybridCacheTensors, dispatcher: KDAKernelDispatcher,
               keep: VerifyRecord = KEEP_STATES, rows: VerifyRows | None = None) -> tuple[torch.Tensor, LayerRecord]:
        """Fast path of a speculative verify step: ``x [N * L, hidden]`` fp32, every sequence verifying
        ``L = plan.tokens`` tokens from its committed state, which is read first and written only by a
        record that writes slots (:data:`~kda_ref.model.verify_record.WRITE_SLOTS`, when the committed
        slot is among the ones the step writes). Same math and record as :meth:`forward` on a verify batch
        (tested against it): what ``keep`` (a :class:`~kda_ref.model.verify_record.VerifyRecord`) keeps.
        ``rows``: the step's :class:`VerifyRows`, the same for every layer (built here when not given).
        Design notes: ``docs/spec_decode.md#the-fused-verify-step``.
        """
        T = x.shape[0]
        L = plan.tokens
        N = T // L
        H, K, D = self.num_heads, self.head_dim, self.num_heads * self.head_dim
        li, w = cache.kda_index[self.layer_idx], self.fused_weights()
        qkv, g, beta, gate = self.project_fused(x, w)  # [T, 3D], [T, H, K], [T, H], [T, D]
        conv_pool = cache.conv[li]
        y, windows = self._verify_conv(qkv.view(N, L, 3 * D), plan, conv_pool, w.conv)  # [N, L, 3D]
        W = conv_pool.shape[2] + 1
        q, k, v = self.heads_fused(F.silu(y).view(T, 3 * D))
        per_seq = lambda t: t.reshape(N, L, *t.shape[1:])  # noqa: E731  [T, ...] -> [N, L, ...]
        u = (torch.empty(N, L, *v.shape[1:], dtype=torch.float32, device=x.device)
             if keep.keeps_corrections else None)  # [N, L, HV, V]: RecoverSSM's corrections, written by the kernel
        o, steps = dispatcher.verify_(per_seq(q), per_seq(k), per_seq(v), per_seq(g), per_seq(beta),
                                      state_pool=cache.recurrent[li], state_indices=plan.state_indices,
                                      keep_step_states=keep.keeps_step_states, layer=self.layer_idx,
                                      pad=plan.pad, slot_range=plan.slot_range, parents=plan.parents,
                                      corrections=u)  # [N, L, H, V]
        rows = VerifyRows.of(plan) if rows is None else rows
        record = keep.record(rows, None if steps is None else steps.reshape(T, H, K, -1),
                             lambda: windows().reshape(T, 3 * D, W - 1),
                             (qkv, k, v, g, beta, None if u is None else u.view(T, *u.shape[2:])), conv_pool,
                             cache.recurrent[li], plan)
        return self.output_fused(o, gate, w), record

    def _verify_conv(self, qkv: torch.Tensor, plan: DecodePlan, conv_pool: torch.Tensor, w: torch.Tensor):
        """The short conv of a verify step: each sequence's window in ``conv_pool`` (read, not written) and its
        ``L`` inputs ``qkv [N, L, 3D]`` -> ``(y [N, L, 3D] before SiLU, windows)``; ``windows()`` gives the conv
        window after every token ``[N, L, 3D, W-1]``, built only when a record keeps it. ``w``: the fused conv
        kernels ``[3D, W]``."""
        N, L, _ = qkv.shape
        W = w.shape[1]
        if plan.slot_range is not None and not plan.pad:  # the slots are one run: a view, no gather
            prev = conv_pool.narrow(0, *plan.slot_range)
        else:
            prev = gather_rows(conv_pool, plan.state_indices) if plan.pad else conv_pool.index_select(0, plan.state_indices)
        full = torch.cat([prev.transpose(1, 2).to(qkv.dtype), qkv], dim=1)  # [N, W-1+L, 3D]
        if plan.conv_index is None:  # a chain: token t's inputs are full[t : t + W]
            y = full[:, W - 1:] * w[:, W - 1]  # y_t = sum_i w_i * full[t + i]
            for i in range(W - 1):
                y.addcmul_(full[:, i:i + L], w[:, i])
            # the window after token t is full[t + 1 : t + W]: [N, L, 3D, W-1] (unfold's windows 1 .. L)
            return y, lambda: full.unfold(1, W - 1, 1)[:, 1:]
        taps = full[:, plan.conv_index]  # a tree: token t's inputs along its own branch: [N, L, W, 3D]
        y = (taps * w.t()).sum(2)  # sum_i w_i * taps[:, :, i]
        return y, lambda: taps[:, :, 1:].transpose(2, 3)  # [N, L, 3D, W-1] after each token

    def _forward_group(self, grp, qkv, g, beta, w, batch, cache, li, dispatcher, record: LayerRecord, rows=None):
        """One phase group's conv and kernel -> its output ``[t, H, V]``. ``rows``: where its tokens sit in the
        batch (``grp.token_ids``, or ``slice(None)`` when the group is the whole batch in order)."""
        rows = grp.token_ids if rows is None else rows
        slots = batch.state_indices[grp.seq_ids]
        has_init = batch.has_initial_state[grp.seq_ids]
        conv_pool, rec_pool = cache.conv[li], cache.recurrent[li]
        x_g = qkv[rows]
        prev = conv_pool[slots].masked_fill_(~has_init.view(-1, 1, 1), 0.0)  # [n, 3D, W-1]; zeros, NaN or not
        q, k, v, new_conv = self.conv_heads(x_g, w, None if grp.phase is KDAPhase.DECODE else grp.cu_seqlens, prev)
        if grp.phase is not KDAPhase.VERIFY:
            conv_pool.index_copy_(0, slots, new_conv.to(conv_pool.dtype))
        _fill_probe(record.probe, rows, k, v)
        want_chunks = batch.return_chunk_states and grp.phase is KDAPhase.EXTEND
        keep = batch.verify_keep
        replay = grp.phase is KDAPhase.VERIFY and not keep.keeps_step_states
        g_g, beta_g = g[rows], beta[rows]
        res = dispatcher(grp.phase, q, k, v, g_g[None], beta_g[None],
                         state_pool=rec_pool, state_indices=slots, cu_seqlens=grp.cu_seqlens,
                         has_initial_state=has_init, return_chunk_states=want_chunks, layer=self.layer_idx,
                         keep_step_states=not replay or keep.keeps_corrections)
        if replay and keep.keeps_corrections:  # RecoverSSM: each token's correction, read off the states
            init = rec_pool[slots].masked_fill_(~has_init.view(-1, 1, 1, 1), 0.0)  # [n, HV, K, V]
            u = segment_corrections(res.step_states[0], init, grp.cu_seqlens, k[0], v[0], g_g, beta_g)
            record.trajectory = Trajectory(seq_ids=grp.seq_ids, x=x_g.detach(), k=k[0].detach(), g=g_g.detach(), u=u)
        elif replay:  # ReplaySSM: keep each token's inputs, not its state
            record.trajectory = Trajectory(seq_ids=grp.seq_ids, x=x_g.detach(), k=k[0].detach(), v=v[0].detach(),
                                           g=g_g.detach(), beta=beta_g.detach())
        elif want_chunks or grp.phase is KDAPhase.VERIFY:
            states = self._boundary_states(grp, x_g, prev, res, batch, dispatcher.chunk_size)
            if grp.phase is KDAPhase.VERIFY:
                record.step_states = states
            else:
                record.chunk_states = states
        return res.o[0]

    def _boundary_states(self, grp, x_g, prev, res, batch, C) -> BoundaryStates:
        """Pair every recorded recurrent state with the conv window of the same boundary."""
        offs = grp.cu_seqlens.tolist()
        convs, positions = [], []
        for j in range(len(offs) - 1):
            L = offs[j + 1] - offs[j]
            if grp.phase is KDAPhase.VERIFY:
                b = torch.arange(1, L + 1, device=x_g.device)  # after every token
            else:
                b = torch.arange(0, L, C, device=x_g.device)  # chunk starts
            convs.append(conv_windows(prev[j], x_g[offs[j]:offs[j + 1]], b))
            positions.append(int(batch.context_lens[grp.seq_ids[j]]) + b)
        recurrent = res.step_states[0] if grp.phase is KDAPhase.VERIFY else res.chunk_states[0]
        return BoundaryStates(seq_ids=grp.seq_ids, positions=positions, recurrent=recurrent, conv=torch.cat(convs))


@dataclass(frozen=True)
class VerifyRows:
    """What every KDA layer's record of one uniform verify step shares: the sequences (``seq_ids
    [N]``) and, per sequence, the boundaries its per-token states sit at (``positions``: ``N`` tensors
    ``[L]``, the tokens before each state). Built once per step from the plan, on the device (no host
    synchronisation: a static step runs it)."""

    seq_ids: torch.Tensor
    positions: list[torch.Tensor]

    @classmethod
    def of(cls, plan: DecodePlan) -> "VerifyRows":
        N, L, dev = plan.state_indices.shape[0], plan.tokens, plan.state_indices.device
        after = plan.context_lens[:, None] + torch.arange(1, L + 1, device=dev)  # [N, L]
        return cls(seq_ids=torch.arange(N, device=dev), positions=list(after.unbind(0)))


def _fill_probe(probe: GateProbe | None, token_ids, k: torch.Tensor, v: torch.Tensor) -> None:
    """Copy one group's keys and values ``[1, t, H, D]`` into the probe's rows ``token_ids``."""
    if probe is not None:
        probe.k[token_ids] = k[0].detach().to(probe.k.dtype)
        probe.v[token_ids] = v[0].detach().to(probe.v.dtype)
