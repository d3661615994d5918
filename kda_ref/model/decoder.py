"""A decoder layer, the modes it runs in, and the residual stream between layers.

One :class:`DecoderLayer` skeleton -- RMSNorm, attention (KDA or MLA), residual, RMSNorm, dense MLP or
MoE, residual -- serves every path of the model (:meth:`~kda_ref.model.HybridModel.run_layers`); what
varies is the :class:`LayerMode` and the residual stream (:func:`residual_stream`): Kimi-Linear's
:class:`PlainResidual` or K3's attention residuals, :class:`BlockAttnResidual` (:func:`attn_res_mix`).
Checked against Moonshot's ``modeling_kimi_linear.py`` (``KimiDecoderLayer._forward_attn_residual``),
vLLM ``vllm/models/kimi_k3/nvidia/ops/attn_res.py::attn_res`` and llama.cpp ``src/models/kimi-k3.cpp``.
Design notes: ``docs/model.md#the-decoder-layer-and-the-residual-stream``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
import torch.nn as nn

from .parts import glu_activation, rms_norm_fast
from ..ops.dispatcher import KDAKernelDispatcher
from ..ops.norms import rms_norm
from .batch import DecodePlan, ForwardBatch
from .layer_state import HybridCacheTensors
from .config import ModelConfig
from .kda_layer import KDAAttention, NormWeight, VerifyRows
from .mla_layer import MLAAttention
from .mlp import DenseMLP, make_moe
from .output import LayerRecord
from .verify_record import VerifyRecord


class LayerMode(ABC):
    """How a decoder layer runs: its attention call per layer kind, and whether it takes the fused paths
    (fast norms, the FFN's fused matmuls). One :class:`DecoderLayer` skeleton serves every mode -- the
    reference extend (:class:`ExtendMode`), the fused decode and verify steps (:class:`DecodeMode`,
    :class:`VerifyMode`) and a context-parallel rank's shard (``kda_ref.context_parallel.forward.ShardMode``)."""

    fused: bool = False

    @abstractmethod
    def kda(self, attn: KDAAttention, h: torch.Tensor) -> tuple[torch.Tensor, LayerRecord | None]:
        """A KDA layer's attention over the normed ``h [T, hidden]``: ``([T, hidden], its record or None)``."""

    @abstractmethod
    def mla(self, attn: MLAAttention, h: torch.Tensor) -> torch.Tensor:
        """An MLA layer's attention over the normed ``h [T, hidden]`` -> ``[T, hidden]``."""

    def mla_rows(self, attn: MLAAttention, h: torch.Tensor, out_rows) -> torch.Tensor:
        """:meth:`mla`'s output at the rows ``out_rows`` alone -> ``[len(out_rows), hidden]``: every row's KV is
        written; a mode whose attention can skip the other rows' queries overrides it (:class:`ExtendMode`)."""
        return self.mla(attn, h)[out_rows]


@dataclass
class ExtendMode(LayerMode):
    """The reference path of any batch (prefill, extend, decode, verify segments mixed): each layer's
    ``forward`` over :class:`~kda_ref.model.batch.ForwardBatch` metadata; ``cache=None`` is stateless.
    ``fused=True`` (the engine's steps, :meth:`~kda_ref.model.HybridModel.forward_batch`) runs the same walk
    over the fused weights of the decode step: one matmul for a KDA layer's input projections, the FFN's
    gate|up matmuls, the MoE's tokens grouped by expert; tested against ``fused=False``."""

    batch: ForwardBatch
    cache: HybridCacheTensors | None
    dispatcher: KDAKernelDispatcher
    fused: bool = False  # the engine's prefill / extend: the fused projections, norms and FFN (fp32, no autograd)

    def kda(self, attn, h):
        return attn(h, self.batch, self.cache, self.dispatcher, fused=self.fused)

    def mla(self, attn, h):
        return attn(h, self.batch, self.cache, backend=self.dispatcher)

    def mla_rows(self, attn, h, out_rows):
        return attn(h, self.batch, self.cache, backend=self.dispatcher, out_rows=out_rows)


@dataclass
class DecodeMode(LayerMode):
    """The fused all-decode step: one token per sequence, states updated in their slots in place."""

    plan: DecodePlan
    cache: HybridCacheTensors
    dispatcher: KDAKernelDispatcher
    fused: bool = True

    def kda(self, attn, h):
        return attn.decode(h, self.plan, self.cache, self.dispatcher), None

    def mla(self, attn, h):
        return attn.decode(h, self.plan, self.cache, self.dispatcher)


@dataclass
class VerifyMode(LayerMode):
    """The fused uniform verify step: ``plan.tokens`` tokens per sequence from its committed state, each
    KDA layer keeping what ``keep`` (a :class:`~kda_ref.model.verify_record.VerifyRecord`) asks."""

    plan: DecodePlan
    cache: HybridCacheTensors
    dispatcher: KDAKernelDispatcher
    keep: VerifyRecord
    rows: VerifyRows
    fused: bool = True

    def kda(self, attn, h):
        return attn.verify(h, self.plan, self.cache, self.dispatcher, self.keep, self.rows)

    def mla(self, attn, h):  # MLA's decode attends every query of the step causally over the cached rows
        return attn.decode(h, self.plan, self.cache, self.dispatcher)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int, kind: str | None = None):
        super().__init__()
        self.layer_idx = layer_idx
        self.kind = kind or config.layer_types[layer_idx]  # an MTP layer past the last says its own
        self.eps = config.rms_norm_eps
        self.input_layernorm = NormWeight(config.hidden_size)
        self.post_attention_layernorm = NormWeight(config.hidden_size)
        self.self_attn = KDAAttention(config, layer_idx) if self.kind == "kda" else MLAAttention(config, layer_idx)
        if config.is_moe_layer(layer_idx):
            self.block_sparse_moe = make_moe(config)
        else:
            self.mlp = DenseMLP(config.hidden_size, config.intermediate_size, glu_activation(config))
        if config.attn_res_block_size:  # K3's attention residuals: the two depth mixes' weights (the residual stream, below)
            d = config.hidden_size
            self.self_attention_res_norm, self.mlp_res_norm = NormWeight(d), NormWeight(d)
            self.self_attention_res_proj = nn.Linear(d, 1, bias=False)  # [1, d]
            self.mlp_res_proj = nn.Linear(d, 1, bias=False)

    @property
    def ffn(self) -> nn.Module:
        """The layer's feed-forward block: the MoE, or the dense MLP of the first layers."""
        return self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp

    def forward(self, stream, mode: LayerMode, out_rows=None) -> LayerRecord | None:
        """The layer over the residual ``stream`` (:func:`residual_stream`: its input read from it, its
        outputs added to it) as ``mode`` runs it -> the KDA record: RMSNorm, attention, residual, RMSNorm,
        MLP / MoE, residual (the article's execution chain). ``out_rows`` (an index of rows, for the last
        layer): attention runs over every row, for the KV and the recurrent state it writes, and only those
        rows go on to the MLP / MoE, since nothing reads the others' outputs -- llama.cpp's
        ``build_inp_out_ids`` (``src/models/llama.cpp::llm_build_llama``, commit ``4add2b49``); vLLM runs every
        row through every layer and takes ``hidden_states[logits_indices]`` after
        (``vllm/v1/worker/gpu_model_runner.py::GPUModelRunner.execute_model``, 0.32.0)."""
        norm = rms_norm_fast if mode.fused else rms_norm
        h = norm(stream.attn_input(self), self.input_layernorm.weight, self.eps)
        record = None
        if self.kind == "kda":
            h, record = mode.kda(self.self_attn, h)
            h = h if out_rows is None else h[out_rows]
        elif out_rows is None:
            h = mode.mla(self.self_attn, h)
        else:  # an MLA layer may compute the kept rows' queries alone
            h = mode.mla_rows(self.self_attn, h, out_rows)
        if out_rows is not None:
            stream.keep_rows(out_rows)
        stream.add_attn(self, h)
        h = norm(stream.mlp_input(self), self.post_attention_layernorm.weight, self.eps)
        stream.add_mlp(self, self.ffn.forward_fused(h) if mode.fused else self.ffn(h))
        return record


# ---- the residual stream (module docstring) ----------------------------------------------------------
def attn_res_mix(partial: torch.Tensor, blocks: list[torch.Tensor], proj_w: torch.Tensor, norm_w: torch.Tensor,
                 eps: float) -> torch.Tensor:
    """The depth mix of ``blocks`` (``n`` tensors ``[T, d]``) and the running sum ``partial [T, d]``
    (last): ``sum_s softmax_s(<rmsnorm(v_s), norm_w * proj_w>) * v_s`` per token -> ``[T, d]``."""
    v = torch.stack([*blocks, partial]).float()  # [n + 1, T, d]
    normed = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    w = norm_w.float() * proj_w.float().reshape(-1)  # [d]: the two tensors act only as a product
    p = torch.softmax((normed * w).sum(-1), dim=0)  # [n + 1, T]
    return (p[..., None] * v).sum(0).to(partial.dtype)


class PlainResidual:
    """Kimi-Linear's residual stream: one running sum ``x``."""

    def __init__(self, x: torch.Tensor):
        self.x = x

    def attn_input(self, layer) -> torch.Tensor:
        return self.x

    def add_attn(self, layer, out: torch.Tensor) -> None:
        self.x = self.x + out

    def mlp_input(self, layer) -> torch.Tensor:
        return self.x

    def add_mlp(self, layer, out: torch.Tensor) -> None:
        self.x = self.x + out

    def keep_rows(self, rows) -> None:
        self.x = self.x[rows]

    def output(self, model) -> torch.Tensor:
        return self.x


class BlockAttnResidual:
    """K3's attention residuals over blocks of ``block_size`` layers (module docstring). ``layer``
    arguments are :class:`~kda_ref.model.model.DecoderLayer` objects (their ``layer_idx`` and
    ``*_res_*`` weights); ``output``'s ``model`` is the backbone (``output_attn_res_*``)."""

    def __init__(self, x: torch.Tensor, block_size: int, eps: float):
        self.partial: torch.Tensor | None = x  # the running sum of the current block (the embedding at first)
        self.blocks: list[torch.Tensor] = []  # the completed blocks' sums, oldest first
        self.block_size, self.eps = block_size, eps

    def attn_input(self, layer) -> torch.Tensor:
        h = attn_res_mix(self.partial, self.blocks, layer.self_attention_res_proj.weight,
                         layer.self_attention_res_norm.weight, self.eps) if self.blocks else self.partial
        if layer.layer_idx % self.block_size == 0:  # a block starts: bank the running sum
            self.blocks.append(self.partial)
            self.partial = None
        return h

    def add_attn(self, layer, out: torch.Tensor) -> None:
        self.partial = out if self.partial is None else self.partial + out

    def mlp_input(self, layer) -> torch.Tensor:
        return attn_res_mix(self.partial, self.blocks, layer.mlp_res_proj.weight, layer.mlp_res_norm.weight, self.eps)

    def add_mlp(self, layer, out: torch.Tensor) -> None:
        self.partial = self.partial + out

    def keep_rows(self, rows) -> None:
        if self.partial is not None:  # None when the layer started a block: its attention output begins it
            self.partial = self.partial[rows]
        self.blocks = [b[rows] for b in self.blocks]

    def output(self, model) -> torch.Tensor:
        return attn_res_mix(self.partial, self.blocks, model.output_attn_res_proj.weight,
                            model.output_attn_res_norm.weight, self.eps)


def residual_stream(config, x: torch.Tensor) -> PlainResidual | BlockAttnResidual:
    """The stream ``config`` asks for, starting from the embeddings ``x [T, d]``."""
    if config.attn_res_block_size:
        return BlockAttnResidual(x, config.attn_res_block_size, config.rms_norm_eps)
    return PlainResidual(x)
