"""The KDA layer of Kimi-Linear: projections, short conv, gates, KDA, gated norm, output projection.

Article concept ``sglang.kda_layer`` (section 6.2, "``KimiK3DeltaAttention`` is more than matmuls")
and ``sglang.radix_linear_attention_forward`` (section 6.3): every KDA layer goes through one entry,
:meth:`KDAAttention.forward`, which reads and writes the layer's two states (recurrent and conv) in
the cache by ``state_indices`` and hands the phase to the :class:`~kda_ref.ops.KDAKernelDispatcher`
— the analogue of SGLang's ``RadixLinearAttention.forward`` and vLLM's
``KimiDeltaAttention._forward`` (``vllm/model_executor/layers/kda.py``).

Forward, per token (Kimi Linear tech report Eq. 10; parameter names are the Hugging Face
checkpoint's):

    q, k, v = SiLU(ShortConv(W_q x)), SiLU(ShortConv(W_k x)), SiLU(ShortConv(W_v x))
    q, k    = l2norm(q), l2norm(k)                       (per head, eps 1e-6 as fla)
    g       = -exp(A_log) * softplus(f_b(f_a(x)) + dt_bias)      per-channel log decay
    beta    = sigmoid(b_proj(x))
    o       = KDA(q, k, v, g, beta)                      (state S [H, K, V] carried across calls)
    y       = o_proj( RMSNorm_head(o) * o_norm.weight * sigmoid(g_b(g_a(x))) )
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops.dispatcher import KDAKernelDispatcher, KDAPhase
from ..ops.gate import kda_gate
from ..ops.norms import l2norm, rms_norm_gated
from ..ops.short_conv import causal_conv1d, causal_conv1d_update
from .batch import ForwardBatch
from .cache import HybridCacheTensors
from .config import ModelConfig


class ShortConvWeight(nn.Module):
    """Holds a depthwise conv weight ``[D, 1, W]`` under the checkpoint's ``*_conv1d.weight`` name."""

    def __init__(self, dim: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, 1, width))


class NormWeight(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


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
        self.A_log = nn.Parameter(torch.empty(1, 1, self.num_heads, 1))
        self.dt_bias = nn.Parameter(torch.empty(dim))
        self.f_a_proj = nn.Linear(c.hidden_size, self.head_dim, bias=False)
        self.f_b_proj = nn.Linear(self.head_dim, dim, bias=False)
        self.b_proj = nn.Linear(c.hidden_size, self.num_heads, bias=False)
        self.g_a_proj = nn.Linear(c.hidden_size, self.head_dim, bias=False)
        self.g_b_proj = nn.Linear(self.head_dim, dim, bias=False)
        self.o_norm = NormWeight(self.head_dim)
        self.o_proj = nn.Linear(dim, c.hidden_size, bias=False)

    def conv_weight(self) -> torch.Tensor:
        """The three depthwise kernels fused into one ``[3D, W]`` (channels ordered q | k | v)."""
        return torch.cat([self.q_conv1d.weight, self.k_conv1d.weight, self.v_conv1d.weight], dim=0).squeeze(1)

    def gates(self, x: torch.Tensor):
        """``x [T, hidden]`` -> ``(g [T, H, K] fp32 log decay, beta [T, H])``."""
        g = kda_gate(self.f_b_proj(self.f_a_proj(x)), self.A_log, self.dt_bias, head_dim=self.head_dim)
        beta = torch.sigmoid(self.b_proj(x).float())
        return g, beta

    def _split_heads(self, qkv: torch.Tensor):
        # [t, 3D] -> three [1, t, H, D] tensors; q and k l2-normalised per head
        H, D = self.num_heads, self.head_dim
        q, k, v = qkv.unflatten(-1, (3, H, D)).unbind(-3)
        return l2norm(q)[None], l2norm(k)[None], v[None]

    def forward(self, x: torch.Tensor, batch: ForwardBatch, cache: HybridCacheTensors | None,
                dispatcher: KDAKernelDispatcher) -> torch.Tensor:
        """``x [T, hidden]`` packed as ``batch.cu_seqlens`` -> ``[T, hidden]``."""
        T = x.shape[0]
        qkv = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)  # [T, 3D]
        g, beta = self.gates(x)
        if batch.probe:
            batch.probes[self.layer_idx] = {"g": g.detach(), "beta": beta.detach()}
        w = self.conv_weight()
        if cache is None:  # stateless: every sequence starts from zero state, nothing is kept
            y, _ = causal_conv1d(qkv, w, cu_seqlens=batch.cu_seqlens)
            q, k, v = self._split_heads(y)
            o = dispatcher.run_stateless(q, k, v, g[None], beta[None], cu_seqlens=batch.cu_seqlens,
                                         layer=self.layer_idx)
        else:
            o = torch.zeros(1, T, self.num_heads, self.head_dim, dtype=x.dtype, device=x.device)
            li = cache.kda_index[self.layer_idx]
            for grp in batch.phase_groups():
                o[0, grp.token_ids] = self._forward_group(grp, qkv, g, beta, w, batch, cache, li, dispatcher)
        gate = self.g_b_proj(self.g_a_proj(x)).unflatten(-1, (self.num_heads, self.head_dim))  # [T, H, D]
        out = rms_norm_gated(o[0], gate, self.o_norm.weight, self.eps)
        return self.o_proj(out.flatten(-2))

    def _forward_group(self, grp, qkv, g, beta, w, batch, cache, li, dispatcher):
        slots = batch.state_indices[grp.seq_ids]
        has_init = batch.has_initial_state[grp.seq_ids]
        conv_pool, rec_pool = cache.conv[li], cache.recurrent[li]
        x_g = qkv[grp.token_ids]
        prev = conv_pool[slots] * has_init.to(conv_pool.dtype).view(-1, 1, 1)  # [n, 3D, W-1]
        if grp.phase is KDAPhase.DECODE:
            y, new_conv = causal_conv1d_update(x_g, prev, w)
        else:
            y, new_conv = causal_conv1d(x_g, w, cu_seqlens=grp.cu_seqlens, conv_state=prev)
        if grp.phase is not KDAPhase.VERIFY:
            conv_pool.index_copy_(0, slots, new_conv.to(conv_pool.dtype))
        q, k, v = self._split_heads(y)
        want_chunks = batch.return_chunk_states and grp.phase is KDAPhase.EXTEND
        res = dispatcher(grp.phase, q, k, v, g[grp.token_ids][None], beta[grp.token_ids][None],
                         state_pool=rec_pool, state_indices=slots, cu_seqlens=grp.cu_seqlens,
                         has_initial_state=has_init, return_chunk_states=want_chunks, layer=self.layer_idx)
        if want_chunks or grp.phase is KDAPhase.VERIFY:
            self._record_boundaries(grp, x_g, prev, res, batch, dispatcher.chunk_size)
        return res.o[0]

    def _record_boundaries(self, grp, x_g, prev, res, batch, C):
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
        entry = {"seq_ids": grp.seq_ids, "positions": positions, "conv": torch.cat(convs)}
        if grp.phase is KDAPhase.VERIFY:
            batch.step_states[self.layer_idx] = {**entry, "recurrent": res.step_states[0]}
        else:
            batch.chunk_states[self.layer_idx] = {**entry, "recurrent": res.chunk_states[0]}
