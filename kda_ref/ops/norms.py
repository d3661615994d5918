"""Normalisations of the KDA layer.

* :func:`l2norm` — q/k normalisation before KDA, fla's eps convention ``x / sqrt(sum(x^2) + eps)``,
  ``eps = 1e-6`` (fla ``fla/modules/l2norm.py``, ``use_qk_l2norm_in_kernel``; transformers ``kimi_linear.l2norm``).
* :func:`rms_norm` — plain RMSNorm in fp32; the fused steps call torch's ``F.rms_norm``
  (:func:`kda_ref.model.parts.rms_norm_fast`, tested against this one).
* :func:`rms_norm_gated` — the KDA output norm, ``y = rms_norm(o) * weight * sigmoid(gate)`` (fla
  ``FusedRMSNormGated(activation="sigmoid")``, transformers ``KimiLinearRMSNormGated``; SGLang and vLLM use
  fla's ``FusedRMSNormGated`` too). Design notes: ``docs/kda.md#gates-norms-and-the-short-convolution``.
"""

from __future__ import annotations

import torch

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


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Head-wise RMSNorm then ``* sigmoid(gate)``: ``x, gate: [..., D]``, ``weight: [D]``."""
    if gate.shape != x.shape:
        raise ValueError(f"gate: shape {tuple(gate.shape)} must equal the input's {tuple(x.shape)}")
    y = rms_norm(x.float() if x.dtype != torch.float64 else x, weight, eps)
    return (y * torch.sigmoid(gate.to(y.dtype))).to(x.dtype)
