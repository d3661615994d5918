"""Random KDA inputs in fla's layout, shared by the kernel tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def make_kda_inputs(B, T, H, K, V, HV=None, dtype=torch.float32, gate_scale=1.0, seed=0, norm=True):
    """q, k (l2-normalised), v, g = -softplus(randn) * gate_scale, beta in (0, 1)."""
    HV = HV or H
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64)
    k = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64)
    if norm:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    v = torch.randn(B, T, HV, V, generator=gen, dtype=torch.float64)
    g = -F.softplus(torch.randn(B, T, HV, K, generator=gen, dtype=torch.float64)) * gate_scale
    beta = torch.rand(B, T, HV, generator=gen, dtype=torch.float64)
    return tuple(x.to(dtype) for x in (q, k, v, g, beta))


def make_state(N, HV, K, V, seed=1, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(N, HV, K, V, generator=gen, dtype=torch.float64).to(dtype) * 0.5
