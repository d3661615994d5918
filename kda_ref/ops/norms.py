"""Normalisations of the KDA layer.

* :func:`l2norm` — q/k normalisation before KDA. **eps convention (fla's):**
  ``x / sqrt(sum(x^2) + eps)`` with ``eps = 1e-6`` (fla ``fla/modules/l2norm.py`` and the
  in-kernel ``use_qk_l2norm_in_kernel``; transformers ``kimi_linear.l2norm``). Note this differs
  slightly from ``torch.nn.functional.normalize``, which divides by ``max(||x||, eps)``.
* :func:`rms_norm` — plain RMSNorm (``x * rsqrt(mean(x^2) + eps) * weight``), computed in fp32.
* :func:`rms_norm_fast` — :func:`rms_norm` for the model's fp32 decode and verify steps: no checks,
  one call into torch's ``F.rms_norm`` (its CPU decomposition runs in C++: ~3 us less per call than
  the same ops dispatched from Python, and bit-identical to them here).
* :func:`rms_norm_gated` — the KDA output norm: head-wise RMSNorm then a sigmoid output gate,
  ``y = rms_norm(o) * weight * sigmoid(gate)`` (fla ``FusedRMSNormGated(activation="sigmoid")``,
  transformers ``KimiLinearRMSNormGated``, SGLang / vLLM ``RMSNormGated``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

L2NORM_EPS = 1e-6


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """Normalise the last dimension: ``x / sqrt(sum(x^2) + eps)``, computed in fp32, returned in x.dtype."""
    xf = x.float() if x.dtype != torch.float64 else x
    return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + eps)).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension in fp32; returns x.dtype."""
    if weight.shape[-1] != x.shape[-1]:
        raise ValueError(f"weight: size {weight.shape[-1]} does not match the normalised dim {x.shape[-1]}")
    xf = x.float() if x.dtype != torch.float64 else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.to(y.dtype)).to(x.dtype)


def rms_norm_fast(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """:func:`rms_norm` for fp32 ``x [..., D]`` and ``weight [D]`` without checks (tested against it)."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Head-wise RMSNorm then ``* sigmoid(gate)``: ``x, gate: [..., D]``, ``weight: [D]``."""
    if gate.shape != x.shape:
        raise ValueError(f"gate: shape {tuple(gate.shape)} must equal the input's {tuple(x.shape)}")
    y = rms_norm(x.float() if x.dtype != torch.float64 else x, weight, eps)
    return (y * torch.sigmoid(gate.to(y.dtype))).to(x.dtype)
