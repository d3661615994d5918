"""Feed-forward blocks of Kimi-Linear and Kimi K3: a dense gated MLP and the MoE.

MoE: Moonlight / DeepSeek-V3 style sigmoid router with a shared expert (vLLM 0.32.0
``vllm/models/kimi_k3/nvidia/model.py::KimiMoE``, which serves Kimi-Linear too); K3's SiTU activation and
latent MoE (Moonshot's ``KimiSparseMoeBlock``; vLLM ``vllm/models/kimi_k3/nvidia/model.py::KimiMoE``; llama.cpp
``src/models/kimi-k3.cpp::build_latent_moe``). ``forward`` is the readable reference; ``forward_fused``
the decode step's fast path (vLLM ``gate_up_proj`` and ``FusedMoE``'s ``w13`` / ``w2`` stacks, the shared
expert folded in as SGLang's shared-experts fusion does), tested against it.
Design notes: ``docs/model.md#feed-forward-blocks``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops.norms import rms_norm
from .config import ModelConfig
from .parts import FusedWeightCache, NormWeight, SiluAndMul, glu_activation, rms_norm_fast, transposed


class DenseMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act=None):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.act = act or SiluAndMul()  # act(gate, up): SwiGLU, or K3's SiTU
        self._fused = FusedWeightCache()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x), self.up_proj(x)))

    def fused_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(gate_up [H, 2I], down [I, H])``, transposed for ``x @ W``: gate_proj's columns then
        up_proj's (vLLM / SGLang ``gate_up_proj``, a ``MergedColumnParallelLinear``)."""
        return self._fused.get("gate_up_down", lambda: [self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight],
                               lambda ws: (transposed(torch.cat(ws[:2], dim=0)), transposed(ws[2])))

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` with gate and up as one matmul: ``x [T, H] -> [T, H]``."""
        gate_up, down = self.fused_weights()
        gate, up = torch.mm(x, gate_up).chunk(2, dim=-1)  # [T, 2I] -> 2 x [T, I]
        return torch.mm(self.act.fused_(gate, up), down)


class Expert(nn.Module):
    def __init__(self, hidden: int, inter: int, act=None):
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False)  # gate
        self.w3 = nn.Linear(hidden, inter, bias=False)  # up
        self.w2 = nn.Linear(inter, hidden, bias=False)  # down
        self.act = act or SiluAndMul()
        self._fused = FusedWeightCache()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.act(self.w1(x), self.w3(x)))

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` with gate and up as one matmul (``[H, 2I]``: w1's columns, then w3's), fp32 without
        autograd: ``x [n, H] -> [n, H]``. :meth:`MoE.forward_fused` calls it on the tokens routed here."""
        gate_up = self._fused.get("gate_up", lambda: [self.w1.weight, self.w3.weight],
                                  lambda ws: transposed(torch.cat(ws, dim=0)))
        down = self._fused.get("down", lambda: [self.w2.weight], lambda ws: transposed(ws[0]))
        gate, up = torch.mm(x, gate_up).chunk(2, dim=-1)  # [n, 2I] -> 2 x [n, I]
        return torch.mm(self.act.fused_(gate, up), down)


class Router(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.weight = nn.Parameter(torch.empty(c.num_experts, c.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(c.num_experts))
        self.top_k, self.n_group, self.topk_group = c.num_experts_per_token, c.num_expert_group, c.topk_group
        self.renormalize, self.scaling = c.moe_renormalize, c.routed_scaling_factor

    def forward(self, x: torch.Tensor):
        """``x [T, hidden]`` -> ``(weights [T, k] fp32, expert ids [T, k])``."""
        return self.route(F.linear(x.float(), self.weight.float()).sigmoid())

    def route(self, scores: torch.Tensor):
        """Sigmoid ``scores [T, E]`` (fp32) -> ``(weights [T, k], expert ids [T, k])``."""
        choice = scores + self.e_score_correction_bias.float()
        if self.n_group > 1:
            T, E = choice.shape
            grouped = choice.view(T, self.n_group, E // self.n_group)  # [T, E] -> [T, groups, E/groups]
            group_score = grouped.topk(min(2, E // self.n_group), dim=-1).values.sum(-1)
            keep = torch.zeros_like(group_score).scatter_(1, group_score.topk(self.topk_group, dim=-1).indices, 1.0)
            choice = choice.masked_fill(~keep.bool().repeat_interleave(E // self.n_group, dim=1), float("-inf"))
        ids = choice.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, ids)
        if self.renormalize:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return weights * self.scaling, ids


class MoE(nn.Module):
    """Kimi-Linear's MoE: the router, the routed experts and the shared expert all read ``x [T, hidden]``.
    :class:`LatentMoE` (K3) changes what the experts read and return; :func:`make_moe` picks one."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.act = glu_activation(c)
        self.gate = Router(c)
        self.experts = nn.ModuleList(Expert(c.expert_input_size, c.moe_intermediate_size, self.act)
                                     for _ in range(c.num_experts))
        self.shared_experts = DenseMLP(c.hidden_size, c.moe_intermediate_size * c.num_shared_experts, self.act) \
            if c.num_shared_experts > 0 else None
        self.eps = c.rms_norm_eps
        self._fused = FusedWeightCache()

    # up to this many tokens, run every expert on every token with batched matmuls and mask the
    # routing: fewer, larger ops than gathering per expert (decode batches are a few tokens)
    dense_max_tokens = 64

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = self.gate(x)  # the router reads the full-width x, latent MoE or not
        z = self.expert_input(x)  # what the experts read
        if x.shape[0] <= self.dense_max_tokens:
            out = self._dense(z, weights, ids)
        else:
            out = self._routed(z, weights, ids)
        out = self.expert_output(out, rms_norm)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out

    def expert_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the routed experts read: ``x`` itself here (K3's latent MoE: a narrower projection)."""
        return x

    def expert_output(self, y: torch.Tensor, norm) -> torch.Tensor:
        """The routed experts' combined output ``y`` at the model's width: ``y`` itself here (K3's latent MoE
        normalises it with ``norm`` and projects it up)."""
        return y

    def _dense(self, x, weights, ids):
        E = len(self.experts)
        # [T, k] routing -> dense [T, E] weights (0 for experts a token does not use)
        dense = torch.zeros(x.shape[0], E, dtype=x.dtype, device=x.device).scatter(1, ids, weights.to(x.dtype))
        w1 = torch.stack([e.w1.weight for e in self.experts])  # [E, I, H]
        w3 = torch.stack([e.w3.weight for e in self.experts])
        w2 = torch.stack([e.w2.weight for e in self.experts])  # [E, H, I]
        h = self.act(torch.einsum("th,eih->eti", x, w1), torch.einsum("th,eih->eti", x, w3))  # [E, T, I]
        y = torch.einsum("eti,ehi->eth", h, w2)  # [E, T, H]
        return torch.einsum("eth,te->th", y, dense)

    def _fused_mlps(self) -> list[tuple[nn.Linear, nn.Linear, nn.Linear]]:
        """``(gate, up, down)`` of every expert, then of the shared expert, which reads the experts' input."""
        m = [(e.w1, e.w3, e.w2) for e in self.experts]
        if self.shared_experts is not None:
            s = self.shared_experts
            m.append((s.gate_proj, s.up_proj, s.down_proj))
        return m

    def _fused_router(self) -> list[torch.Tensor]:
        """The router's weight when it rides in the experts' first matmul (it reads the same ``x``)."""
        return [self.gate.weight]

    def fused_expert_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(w13 [H, E + 2(E*I + Is)], w2 [E*I + Is, H])``, transposed for ``x @ W``, every expert's
        block followed by the shared expert's (``Is`` its width, 0 without one): w13 holds the router's
        E columns, then all gate columns (w1 / gate_proj), then all up columns (w3 / up_proj); w2 the
        matching down rows. (The router rides along in the same matmul: fp32 only, as the fast path.)
        :class:`LatentMoE` leaves the router and the shared expert out."""
        def sources():  # the router's rows, every gate, every up, then every down (one cache entry for both)
            mlps = self._fused_mlps()
            return self._fused_router() + [m[0].weight for m in mlps] + [m[1].weight for m in mlps] + \
                [m[2].weight for m in mlps]

        def build(ws):
            n = len(self._fused_mlps())  # the last n sources are the down projections
            return transposed(torch.cat(ws[:-n], dim=0)), transposed(torch.cat(ws[-n:], dim=1))

        return self._fused.get("w13_w2", sources, build)

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` in two matmuls for small batches: ``x [T, H] -> [T, H]``.

        Every token runs every expert and the shared expert; the routing weight scales each expert's
        block of the intermediate activation (0 for experts a token does not use, 1 for the shared
        one) before the one down-projection sums them. Larger batches take the routed reference.
        """
        T = x.shape[0]
        if T > self.dense_max_tokens:
            return self._grouped(x)
        E, I = len(self.experts), self.experts[0].w1.out_features
        w13, w2 = self.fused_expert_weights()
        logits, gate, up = self._fused_in(x, w13)  # [T, E], [T, S], [T, S]
        weights, ids = self.gate.route(logits.sigmoid())  # [T, k]
        h = self.act.fused_(gate, up)  # [T, S]
        dense = torch.zeros(T, E, dtype=x.dtype, device=x.device).scatter_(1, ids, weights)  # [T, E]
        h[:, :E * I].view(T, E, I).mul_(dense.unsqueeze(-1))  # routing weight per expert block
        return self._fused_out(torch.mm(h, w2), x)

    def _grouped(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward_fused` for many tokens (a prefill step): the token-expert pairs sorted by expert once
        and gathered in that order in one pass, each expert's contiguous rows through
        :meth:`Expert.forward_fused`, the weighted results added back to their tokens in one pass, the shared
        expert's fused MLP beside. The grouping vLLM's ``fused_moe`` and SGLang's ``moe_align_block_size``
        do on a GPU, as one sort and a loop over the experts. ``x [T, H] -> [T, H]``."""
        weights, ids = self.gate(x)  # [T, k] each
        z = self.expert_input(x)
        flat = ids.flatten()  # [T*k] token-major
        order = flat.argsort(stable=True)  # the pairs grouped by expert, tokens ascending within one
        counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
        tok, w = order // ids.shape[1], weights.flatten()[order].to(z.dtype).unsqueeze(1)
        zs = z.index_select(0, tok)  # [T*k, H]: every pair's input, grouped by expert
        ys = torch.empty_like(zs)
        start = 0
        for e, n in enumerate(counts):
            if n:
                rows = slice(start, start + n)
                torch.mul(self.experts[e].forward_fused(zs[rows]), w[rows], out=ys[rows])
            start += n
        out = self.expert_output(torch.zeros_like(z).index_add_(0, tok, ys), rms_norm_fast)
        return out + self.shared_experts.forward_fused(x) if self.shared_experts is not None else out

    def _fused_in(self, x: torch.Tensor, w13: torch.Tensor):
        """``x [T, H]`` -> the router's logits and the experts' gate and up columns, one matmul."""
        S = (w13.shape[1] - len(self.experts)) // 2  # E*I + Is
        return torch.mm(x, w13).split([len(self.experts), S, S], dim=-1)  # [T, E + 2S] -> router | gate | up

    def _fused_out(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The down projection's sum ``y [T, H]`` (the shared expert already in it) -> the block's output."""
        return y

    def _routed(self, x, weights, ids):
        out = torch.zeros_like(x)
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            y = self.experts[e](x[tok]) * weights[tok, slot, None].to(x.dtype)
            out = out.index_add(0, tok, y)
        return out


class LatentMoE(MoE):
    """Kimi K3's latent MoE (``routed_expert_hidden_size``): the router and the shared expert read ``x``,
    the routed experts ``routed_expert_down_proj(x)``, a narrower latent ``[T, R]``; their weighted sum is
    RMS-normed (``latent_moe_use_norm``) and projected back up by ``routed_expert_up_proj`` (Moonshot's
    ``KimiSparseMoeBlock``; vLLM ``vllm/models/kimi_k3/nvidia/model.py::KimiMoE``). The fast path adds one
    matmul in front (router and down projection together) and the shared expert's own fused MLP behind."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        c = config
        self.routed_expert_down_proj = nn.Linear(c.hidden_size, c.routed_expert_hidden_size, bias=False)
        self.routed_expert_up_proj = nn.Linear(c.routed_expert_hidden_size, c.hidden_size, bias=False)
        self.routed_expert_norm = NormWeight(c.routed_expert_hidden_size) if c.latent_moe_use_norm else None

    def expert_input(self, x):
        return self.routed_expert_down_proj(x)  # [T, H] -> [T, R]

    def expert_output(self, y, norm):
        if self.routed_expert_norm is not None:
            y = norm(y, self.routed_expert_norm.weight, self.eps)
        return self.routed_expert_up_proj(y)  # [T, R] -> [T, H]

    def _fused_mlps(self):
        return [(e.w1, e.w3, e.w2) for e in self.experts]  # the shared expert reads x, not the latent

    def _fused_router(self):
        return []  # the router reads x: it rides with the down projection (_fused_in)

    def _fused_in(self, x, w13):
        # [H, E + R]: the router's columns and routed_expert_down_proj's, one matmul of x
        latent_in = self._fused.get("latent_in", lambda: [self.gate.weight, self.routed_expert_down_proj.weight],
                                    lambda ws: transposed(torch.cat(ws, dim=0)))
        logits, z = torch.mm(x, latent_in).split([len(self.experts), w13.shape[0]], dim=-1)
        gate, up = torch.mm(z, w13).chunk(2, dim=-1)  # [T, R] @ [R, 2S] -> gate | up
        return logits, gate, up

    def _fused_out(self, y, x):
        if self.routed_expert_norm is not None:  # expert_output, inlined on the decode path
            y = rms_norm_fast(y, self.routed_expert_norm.weight, self.eps)
        out = self.routed_expert_up_proj(y)  # [T, R] -> [T, H]
        return out + self.shared_experts.forward_fused(x) if self.shared_experts is not None else out


def make_moe(config: ModelConfig) -> MoE:
    """The MoE block ``config`` describes: :class:`LatentMoE` with ``routed_expert_hidden_size``, else :class:`MoE`."""
    return LatentMoE(config) if config.routed_expert_hidden_size is not None else MoE(config)
