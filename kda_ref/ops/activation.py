"""The gated activations of the feed-forward blocks: ``act(gate, up)``, an object chosen by ``hidden_act``.

* :class:`SiluAndMul` -- Kimi-Linear's SwiGLU: ``silu(gate) * up``.
* :class:`SituAndMul` -- Kimi K3's SiTU (``hidden_act: situ``): the gate's SiLU with its linear part
  soft-clipped, and the up projection soft-clipped too::

      situ(gate, up) = beta * tanh(gate / beta) * sigmoid(gate) * linear_beta * tanh(up / linear_beta)

  with ``beta = activation_situ_beta`` (K3: 4.0; 1.0 when unset) and ``linear_beta =
  activation_situ_linear_beta`` (K3: 25.0; no clip of ``up`` when unset). As both grow it becomes
  SwiGLU; bounded, it keeps a 7168-wide MLP's activations inside what a low-precision matmul holds.
  Computed in fp32, cast back. K3 uses it in every MLP: the dense first layer, the shared experts and
  every routed expert. Checked against Moonshot's ``modeling_kimi_linear.py::SituAndMul`` (as vLLM
  ``vllm/models/kimi_k3/nvidia/model.py`` and llama.cpp ``src/models/kimi-k3.cpp::kimi_k3_situ`` apply it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


class SiluAndMul:
    """``silu(gate) * up`` (SwiGLU)."""

    def __call__(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up

    def fused_(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The same value, written into ``gate``'s memory (the fused steps' temporaries)."""
        return F.silu(gate).mul_(up)


@dataclass(frozen=True)
class SituAndMul:
    """K3's SiTU-GLU (module docstring)."""

    beta: float = 1.0
    linear_beta: float | None = None

    def __call__(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        g, u = gate.float(), up.float()
        a = self.beta * torch.tanh(g / self.beta) * torch.sigmoid(g)
        if self.linear_beta is not None:
            u = self.linear_beta * torch.tanh(u / self.linear_beta)
        return (a * u).to(gate.dtype)

    def fused_(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return self(gate, up)


def glu_activation(config) -> SiluAndMul | SituAndMul:
    """The activation ``config.hidden_act`` names (``"silu"`` or ``"situ"`` with its two betas)."""
    if config.hidden_act == "situ":
        return SituAndMul(config.activation_situ_beta or 1.0, config.activation_situ_linear_beta)
    return SiluAndMul()
