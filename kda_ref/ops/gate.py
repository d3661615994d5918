"""KDA decay gate: raw gate projection -> per-step, per-channel log decay ``g``.

Article concept ``kda.gate`` (fine-grained, per-channel forgetting: alpha_t = exp(g_t) in (0, 1]^K).

* :func:`kda_gate` — the softplus gate used by Kimi-Linear-48B:
  ``g = -exp(A_log[h]) * softplus(g_raw + dt_bias)`` (fla ``fla/ops/kda/gate.py::naive_kda_gate``,
  transformers ``KimiLinearForgetGate``; vLLM 0.32.0 fuses it into its KDA kernels, which take ``raw_g``,
  ``A_log`` and ``dt_bias``; its older ``layers/fla/ops/kda.py`` had ``fused_kda_gate``).
* :func:`kda_gate_lowerbound` — the "safe" gate of newer models, bounded in ``[lower_bound, 0)``:
  ``g = lower_bound * sigmoid(exp(A_log[h]) * (g_raw + dt_bias))`` (fla ``naive_kda_lowerbound_gate``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check_gate(g_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor | None, head_dim: int | None):
    if g_raw.dim() < 2:
        raise ValueError(f"g_raw: must be [..., HV * K] or [..., HV, K], got shape {tuple(g_raw.shape)}")
    HV = A_log.numel()
    if HV == 0:
        raise ValueError("A_log: must hold one value per head")
    flat = g_raw.shape[-1] if head_dim is not None else g_raw.shape[-2] * g_raw.shape[-1]
    if flat % HV:
        raise ValueError(f"A_log: {HV} heads do not divide the gate width {flat}")
    if dt_bias is not None and dt_bias.numel() != flat:
        raise ValueError(f"dt_bias: must have HV * K = {flat} elements (one per channel), got {dt_bias.numel()}")
    return HV, flat // HV


def _heads(g_raw: torch.Tensor, A_log, dt_bias, head_dim):
    """[..., HV*K] (with head_dim) or [..., HV, K] -> fp32 [..., HV, K] plus A_log as [HV, 1]."""
    HV, K = _check_gate(g_raw, A_log, dt_bias, head_dim)
    x = g_raw.float()
    if head_dim is not None:
        if K != head_dim:
            raise ValueError(f"head_dim: {head_dim} does not match gate width / heads = {K}")
        x = x.unflatten(-1, (HV, K))  # [..., HV*K] -> [..., HV, K]
    if dt_bias is not None:
        x = x + dt_bias.float().view(HV, K)
    return x, A_log.float().reshape(HV, 1)


def kda_gate(g_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor | None = None, head_dim: int | None = None):
    """Softplus gate. ``g_raw: [..., HV, K]`` (or ``[..., HV*K]`` with ``head_dim``); ``A_log``: HV
    values in any shape (the checkpoint stores ``[1, 1, HV, 1]``); ``dt_bias``: ``HV*K`` values.
    Returns float32 ``[..., HV, K]``, all ``<= 0``."""
    x, A_log = _heads(g_raw, A_log, dt_bias, head_dim)
    return -A_log.exp() * F.softplus(x)


def kda_gate_lowerbound(
    g_raw: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor | None = None,
    lower_bound: float = -5.0,
    head_dim: int | None = None,
):
    """Lower-bounded ("safe") gate in ``[lower_bound, 0)``; same shapes as :func:`kda_gate`."""
    if not lower_bound < 0:
        raise ValueError(f"lower_bound: must be negative, got {lower_bound}")
    x, A_log = _heads(g_raw, A_log, dt_bias, head_dim)
    return lower_bound * torch.sigmoid(A_log.exp() * x)
