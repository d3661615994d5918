"""The parts a model variant swaps inside a layer, each chosen once, when the layer is built; and the
fused weights the fast path builds from a layer's parameters.

Each Kimi K3 switch of :class:`~kda_ref.model.config.ModelConfig` is one part object with the same methods
in both variants, picked in ``__init__`` by :func:`kda_parts`, :func:`mla_parts` or :func:`glu_activation`
(vLLM instead writes ``vllm/models/kimi_k3/nvidia/kda.py::KimiK3DeltaAttention`` beside
``vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py::KimiGatedDeltaNetAttention`` in 0.32.0,
``layers/kda.py::KimiDeltaAttention`` before). :class:`FusedWeightCache` holds the merged
projections (SGLang ``fused_qkvbfg_a_proj`` / ``fused_fg_b_proj``; vLLM ``gate_up_proj``, ``FusedMoE``'s
``w13_weight`` / ``w2_weight``), rebuilt when a source parameter changes; call
:meth:`HybridModel.clear_fused_weights` after swapping a parameter's ``.data`` by hand.
Design notes: ``docs/model.md#model-parts``, ``docs/model.md#fused-weights``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops.gate import kda_gate, kda_gate_lowerbound
from ..ops.norms import rms_norm
from .config import ModelConfig


# ---- fused weights (module docstring) ----------------------------------------------------------------
class FusedWeightCache:
    """``key -> tensor`` derived from some parameters; see the module docstring."""

    def __init__(self) -> None:
        # key -> (sources, their versions when built, value)
        self._entries: dict[str, tuple[Sequence[torch.Tensor], list[int], torch.Tensor]] = {}

    def get(self, key: str, sources: Callable[[], Sequence[torch.Tensor]],
            build: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        """``build(sources())`` (a tensor or a tuple of tensors), cached under ``key`` until one of those sources
        is written in place."""
        hit = self._entries.get(key)
        if hit is not None and torch.compiler.is_compiling():
            return hit[2]  # traced code reads the value cached before tracing (version counters are host state)
        if hit is not None:  # a plain loop: this runs a few dozen times a decode step
            for t, version in zip(hit[0], hit[1]):
                if t._version != version:
                    break
            else:
                return hit[2]
        srcs = tuple(sources())
        with torch.no_grad():  # a tensor, or a tuple of tensors built together
            value = build(srcs)
            if isinstance(value, tuple):  # a tuple of tensors, or a NamedTuple of them (a layer's fused weights)
                value = type(value)(*(v.detach() if isinstance(v, torch.Tensor) else v for v in value)) \
                    if hasattr(value, "_fields") else tuple(v.detach() for v in value)
            else:
                value = value.detach()
        self._entries[key] = (srcs, [t._version for t in srcs], value)
        return value

    def clear(self) -> None:
        self._entries.clear()


def transposed(w: torch.Tensor) -> torch.Tensor:
    """``[out, in]`` -> contiguous ``[in, out]``, the operand of ``x @ W^T`` as a plain ``mm``."""
    return w.t().contiguous()


def rms_norm_fast(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The fused steps' RMSNorm: :func:`kda_ref.ops.norms.rms_norm` for fp32 ``x [..., D]`` and ``weight [D]``,
    without its checks, as one call into torch's ``F.rms_norm`` (its CPU decomposition runs in C++: ~3 us
    less per call than the same ops dispatched from Python, and bit-identical to them here; tested against
    the reference in ``tests/test_decode_fast_path.py``)."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


class NormWeight(nn.Module):
    """An RMSNorm's weight under the checkpoint's ``*norm.weight`` name."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


# ---- KDA: the forget gate ---------------------------------------------------------------------------
class ForgetGate(ABC):
    """How a KDA layer turns ``f = f_b(f_a(x))`` into the per-channel log decay ``g`` (fla ``fused_kda_gate``)."""

    @abstractmethod
    def reference(self, raw: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, head_dim: int) -> torch.Tensor:
        """``raw [T, H*K]`` (any dtype, autograd), ``a_log [H]``, ``dt_bias [H*K]`` -> ``g [T, H, K]`` fp32."""

    @abstractmethod
    def fused_(self, f: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor) -> torch.Tensor:
        """``f [T, H, K]`` fp32, overwritten; ``a = exp(A_log) [H, 1]``, ``dt_bias [H, K]`` -> ``g`` (``f`` itself)."""


class SoftplusForgetGate(ForgetGate):
    """Kimi-Linear: ``g = -exp(A_log) * softplus(f + dt_bias)``, unbounded below."""

    def reference(self, raw, a_log, dt_bias, head_dim):
        return kda_gate(raw, a_log, dt_bias, head_dim=head_dim)

    def fused_(self, f, a, dt_bias):
        return F.softplus(f.add_(dt_bias)).mul_(a.neg())  # -(s a) = s (-a) exactly; a is [H, 1]


class BoundedForgetGate(ForgetGate):
    """Kimi K3: ``g = lower_bound * sigmoid(exp(A_log) * (f + dt_bias))``, in ``[lower_bound, 0)``
    (fla ``naive_kda_lowerbound_gate``; vLLM ``KimiK3DeltaAttention``)."""

    def __init__(self, lower_bound: float):
        self.lower_bound = lower_bound

    def reference(self, raw, a_log, dt_bias, head_dim):
        return kda_gate_lowerbound(raw, a_log, dt_bias, self.lower_bound, head_dim=head_dim)

    def fused_(self, f, a, dt_bias):
        return torch.sigmoid(f.add_(dt_bias).mul_(a)).mul_(self.lower_bound)


# ---- KDA: the output gate's projection of x ----------------------------------------------------------
class KDAOutputGate(ABC):
    """The projection of ``x`` that gates KDA's normalised output (``sigmoid(gate)``), ``[T, H*K]``."""

    @abstractmethod
    def build(self, layer: nn.Module, hidden: int, dim: int, head_dim: int) -> None:
        """Create the gate's parameters on ``layer`` under the checkpoint's names."""

    @abstractmethod
    def in_proj(self, layer: nn.Module) -> nn.Linear:
        """The projection of ``x`` that joins the layer's fused input matmul (its output width: ``G``)."""

    @abstractmethod
    def second(self, layer: nn.Module) -> list[nn.Linear]:
        """The projections applied after :meth:`in_proj` (``[g_b_proj]``, or none)."""

    @abstractmethod
    def reference(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``x [T, hidden]`` -> the gate's logits ``[T, H*K]``, one call per checkpoint projection."""

    @abstractmethod
    def fused(self, tail: torch.Tensor, fg_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The fused input matmul's last columns ``tail [T, K + G]`` (``f_a(x)`` then :meth:`in_proj`'s) and
        the stacked second projections ``fg_b [1 + len(second), K, D]`` (``f_b`` first) -> ``(f_b(f_a(x))
        [T, D], the gate's logits [T, D])``."""


class LowRankOutputGate(KDAOutputGate):
    """Kimi-Linear: ``g_b_proj(g_a_proj(x))`` through the head dim (SGLang fuses ``g_b`` with ``f_b``:
    ``fused_fg_b_proj``)."""

    def build(self, layer, hidden, dim, head_dim):
        layer.g_a_proj = nn.Linear(hidden, head_dim, bias=False)
        layer.g_b_proj = nn.Linear(head_dim, dim, bias=False)

    def in_proj(self, layer):
        return layer.g_a_proj

    def second(self, layer):
        return [layer.g_b_proj]

    def reference(self, layer, x):
        return layer.g_b_proj(layer.g_a_proj(x))

    def fused(self, tail, fg_b):
        T, K = tail.shape[0], fg_b.shape[1]
        fg_a = tail.view(T, 2, K).transpose(0, 1)  # f_a | g_a, adjacent columns: [2, T, K], a view
        f, gate = torch.bmm(fg_a, fg_b).unbind(0)  # [2, T, K] @ [2, K, D] -> [2, T, D]: one batched matmul
        return f, gate


class FullRankOutputGate(KDAOutputGate):
    """Kimi K3: one ``g_proj [H*K, hidden]`` (``use_full_rank_gate``; vLLM's ``in_proj_qkvgfab`` fuses it
    with the other input projections)."""

    def build(self, layer, hidden, dim, head_dim):
        layer.g_proj = nn.Linear(hidden, dim, bias=False)

    def in_proj(self, layer):
        return layer.g_proj

    def second(self, layer):
        return []

    def reference(self, layer, x):
        return layer.g_proj(x)

    def fused(self, tail, fg_b):
        f_a, gate = tail.split([fg_b.shape[1], tail.shape[1] - fg_b.shape[1]], dim=-1)  # [T, K], [T, D]
        return torch.mm(f_a, fg_b[0]), gate  # f_b(f_a(x)); the gate is g_proj(x), already in the fused matmul


def kda_parts(config: ModelConfig) -> tuple[ForgetGate, KDAOutputGate]:
    """A KDA layer's forget gate and output gate, from ``gate_lower_bound`` and ``use_full_rank_gate``."""
    lb = config.gate_lower_bound
    forget = SoftplusForgetGate() if lb is None else BoundedForgetGate(lb)
    return forget, FullRankOutputGate() if config.use_full_rank_gate else LowRankOutputGate()


# ---- MLA: the query -----------------------------------------------------------------------------------
class MLAQuery(ABC):
    """How an MLA layer projects ``x`` to its queries ``[T, H*(Dn+Dp)]``."""

    @abstractmethod
    def build(self, layer: nn.Module, hidden: int, q_width: int) -> None:
        """Create the query's parameters on ``layer`` under the checkpoint's names."""

    @abstractmethod
    def in_proj(self, layer: nn.Module) -> nn.Linear:
        """The projection of ``x`` that joins the layer's fused input matmul."""

    @abstractmethod
    def reference(self, layer: nn.Module, x: torch.Tensor, eps: float) -> torch.Tensor:
        """``x [T, hidden]`` -> ``[T, H*(Dn+Dp)]``, one call per checkpoint projection."""

    @abstractmethod
    def finish_fused(self, layer: nn.Module, q: torch.Tensor, eps: float, q_b: torch.Tensor | None) -> torch.Tensor:
        """:meth:`in_proj`'s columns of the fused matmul -> the queries ``[T, H*(Dn+Dp)]`` (``q_b``: the layer's
        fused ``q_b_proj`` weight, when it has one)."""


class PlainQuery(MLAQuery):
    """Kimi-Linear: one ``q_proj``."""

    def build(self, layer, hidden, q_width):
        layer.q_proj = nn.Linear(hidden, q_width, bias=False)

    def in_proj(self, layer):
        return layer.q_proj

    def reference(self, layer, x, eps):
        return layer.q_proj(x)

    def finish_fused(self, layer, q, eps, q_b):
        return q


class LoRAQuery(MLAQuery):
    """Kimi K3 (DeepSeek-V3's q-LoRA): ``q_b_proj(RMSNorm(q_a_proj(x)))`` through ``q_lora_rank``."""

    def __init__(self, rank: int):
        self.rank = rank

    def build(self, layer, hidden, q_width):
        layer.q_a_proj = nn.Linear(hidden, self.rank, bias=False)
        layer.q_a_layernorm = NormWeight(self.rank)
        layer.q_b_proj = nn.Linear(self.rank, q_width, bias=False)

    def in_proj(self, layer):
        return layer.q_a_proj

    def reference(self, layer, x, eps):
        return layer.q_b_proj(rms_norm(layer.q_a_proj(x), layer.q_a_layernorm.weight, eps))

    def finish_fused(self, layer, q, eps, q_b):
        return torch.mm(rms_norm_fast(q, layer.q_a_layernorm.weight, eps), q_b)


# ---- MLA: the output gate -----------------------------------------------------------------------------
class MLAOutputGate(ABC):
    """What multiplies MLA's output ``o [T, H*Dv]`` before ``o_proj``."""

    @abstractmethod
    def build(self, layer: nn.Module, hidden: int, width: int) -> None:
        """Create the gate's parameters on ``layer`` (none for :class:`NoOutputGate`)."""

    @abstractmethod
    def in_projs(self, layer: nn.Module) -> list[nn.Linear]:
        """The gate's projections of ``x`` that join the fused input matmul (``[g_proj]`` or none)."""

    @abstractmethod
    def reference(self, layer: nn.Module, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``o [T, H*Dv]`` gated by the layer's input ``x [T, hidden]``."""

    @abstractmethod
    def fused(self, o: torch.Tensor, logits: list[torch.Tensor]) -> torch.Tensor:
        """``o [T, H*Dv]`` gated by :meth:`in_projs`' columns of the fused matmul (``logits``)."""


class NoOutputGate(MLAOutputGate):
    """Kimi-Linear: ``o_proj(o)``."""

    def build(self, layer, hidden, width):
        pass

    def in_projs(self, layer):
        return []

    def reference(self, layer, o, x):
        return o

    def fused(self, o, logits):
        return o


class SigmoidOutputGate(MLAOutputGate):
    """Kimi K3: ``o * sigmoid(g_proj(x))`` before ``o_proj`` (Moonshot's ``KimiMLAAttention``; vLLM
    ``kimi_k3/nvidia/mla.py::_gate_sigmoid_mul``)."""

    def build(self, layer, hidden, width):
        layer.g_proj = nn.Linear(hidden, width, bias=False)

    def in_projs(self, layer):
        return [layer.g_proj]

    def reference(self, layer, o, x):
        return o * torch.sigmoid(layer.g_proj(x))

    def fused(self, o, logits):
        return o * torch.sigmoid(logits[0])


def mla_parts(config: ModelConfig) -> tuple[MLAQuery, MLAOutputGate]:
    """An MLA layer's query and output gate, from ``q_lora_rank`` and ``mla_use_output_gate``."""
    query = LoRAQuery(config.q_lora_rank) if config.q_lora_rank else PlainQuery()
    return query, SigmoidOutputGate() if config.mla_use_output_gate else NoOutputGate()


# ---- the MLP's gated activation ----------------------------------------------------------------------
# K3's SiTU (``hidden_act: situ``) is the gate's SiLU with its linear part
# soft-clipped, and the up projection soft-clipped too::
#
#     situ(gate, up) = beta * tanh(gate / beta) * sigmoid(gate) * linear_beta * tanh(up / linear_beta)
#
# with ``beta = activation_situ_beta`` (K3: 4.0; 1.0 when unset) and ``linear_beta =
# activation_situ_linear_beta`` (K3: 25.0; no clip of ``up`` when unset). As both grow it becomes
# SwiGLU; bounded, it keeps a 7168-wide MLP's activations inside what a low-precision matmul holds.
# Computed in fp32, cast back. K3 uses it in every MLP: the dense first layer, the shared experts and
# every routed expert. Checked against Moonshot's ``modeling_kimi_linear.py::SituAndMul`` (as vLLM
# ``vllm/models/kimi_k3/nvidia/model.py`` and llama.cpp ``src/models/kimi-k3.cpp::kimi_k3_situ`` apply it).


class SiluAndMul:
    """``silu(gate) * up`` (SwiGLU)."""

    def __call__(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up

    def fused_(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The same value, written into ``gate``'s memory (the fused steps' temporaries: a view of the
        gate-and-up matmul's output, which nothing else reads)."""
        return F.silu(gate, inplace=True).mul_(up)


@dataclass(frozen=True)
class SituAndMul:
    """K3's SiTU-GLU (the comment above :class:`SiluAndMul`)."""

    beta: float = 1.0
    linear_beta: float | None = None

    def __call__(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        g, u = gate.float(), up.float()
        a = self.beta * torch.tanh(g / self.beta) * torch.sigmoid(g)
        if self.linear_beta is not None:
            u = self.linear_beta * torch.tanh(u / self.linear_beta)
        return (a * u).to(gate.dtype)

    fused_ = __call__  # the same function (no in-place form): one call on the decode path, not two


def glu_activation(config) -> SiluAndMul | SituAndMul:
    """The activation ``config.hidden_act`` names (``"silu"`` or ``"situ"`` with its two betas)."""
    if config.hidden_act == "situ":
        return SituAndMul(config.activation_situ_beta or 1.0, config.activation_situ_linear_beta)
    return SiluAndMul()
