"""Feed-forward blocks of Kimi-Linear: a dense SwiGLU MLP and the MoE.

MoE (Moonlight / DeepSeek-V3 style, as in the Kimi-Linear checkpoint and vLLM
``vllm/model_executor/models/kimi_linear.py``): a sigmoid router whose *selection* adds
``e_score_correction_bias`` but whose *weights* use the raw sigmoid scores, optional group-limited
top-k, renormalisation, ``routed_scaling_factor``, plus an always-on shared expert. Expert weights
use the checkpoint names ``experts.{j}.w1`` (gate), ``w3`` (up), ``w2`` (down).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig


class DenseMLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Expert(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False)  # gate
        self.w3 = nn.Linear(hidden, inter, bias=False)  # up
        self.w2 = nn.Linear(inter, hidden, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


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
        scores = F.linear(x.float(), self.weight.float()).sigmoid()  # [T, E]
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
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.gate = Router(c)
        self.experts = nn.ModuleList(Expert(c.hidden_size, c.moe_intermediate_size) for _ in range(c.num_experts))
        self.shared_experts = DenseMLP(c.hidden_size, c.moe_intermediate_size * c.num_shared_experts) \
            if c.num_shared_experts > 0 else None

    # up to this many tokens, run every expert on every token with batched matmuls and mask the
    # routing: fewer, larger ops than gathering per expert (decode batches are a few tokens)
    dense_max_tokens = 64

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = self.gate(x)
        if x.shape[0] <= self.dense_max_tokens:
            out = self._dense(x, weights, ids)
        else:
            out = self._routed(x, weights, ids)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out

    def _dense(self, x, weights, ids):
        E = len(self.experts)
        # [T, k] routing -> dense [T, E] weights (0 for experts a token does not use)
        dense = torch.zeros(x.shape[0], E, dtype=x.dtype, device=x.device).scatter(1, ids, weights.to(x.dtype))
        w1 = torch.stack([e.w1.weight for e in self.experts])  # [E, I, H]
        w3 = torch.stack([e.w3.weight for e in self.experts])
        w2 = torch.stack([e.w2.weight for e in self.experts])  # [E, H, I]
        h = F.silu(torch.einsum("th,eih->eti", x, w1)) * torch.einsum("th,eih->eti", x, w3)  # [E, T, I]
        y = torch.einsum("eti,ehi->eth", h, w2)  # [E, T, H]
        return torch.einsum("eth,te->th", y, dense)

    def _routed(self, x, weights, ids):
        out = torch.zeros_like(x)
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            y = self.experts[e](x[tok]) * weights[tok, slot, None].to(x.dtype)
            out = out.index_add(0, tok, y)
        return out
