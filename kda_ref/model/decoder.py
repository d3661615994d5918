"""A decoder layer and the modes it runs in.

One :class:`DecoderLayer` skeleton -- RMSNorm, attention (KDA or MLA), residual, RMSNorm, dense MLP or
MoE, residual -- serves every path of the model; what varies is the :class:`LayerMode` (how the
attention runs: the reference extend, the fused decode and verify steps, a context-parallel rank's
shard) and the residual stream the layer reads from and adds to (:mod:`kda_ref.model.residual`:
Kimi-Linear's plain sum or K3's attention residuals). K3's MTP layer (:mod:`kda_ref.model.mtp`) is a
decoder layer too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
import torch.nn as nn

from ..ops.activation import glu_activation
from ..ops.dispatcher import KDAKernelDispatcher
from ..ops.norms import rms_norm, rms_norm_fast
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


@dataclass
class ExtendMode(LayerMode):
    """The reference path of any batch (prefill, extend, decode, verify segments mixed): each layer's
    ``forward`` over :class:`~kda_ref.model.batch.ForwardBatch` metadata; ``cache=None`` is stateless."""

    batch: ForwardBatch
    cache: HybridCacheTensors | None
    dispatcher: KDAKernelDispatcher

    def kda(self, attn, h):
        return attn(h, self.batch, self.cache, self.dispatcher)

    def mla(self, attn, h):
        return attn(h, self.batch, self.cache, backend=self.dispatcher)


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
        return attn.decode(h, self.plan, self.cache, backend=self.dispatcher)


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
        return attn.decode(h, self.plan, self.cache, backend=self.dispatcher)


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
        if config.attn_res_block_size:  # K3's attention residuals: the two depth mixes' weights (kda_ref.model.residual)
            d = config.hidden_size
            self.self_attention_res_norm, self.mlp_res_norm = NormWeight(d), NormWeight(d)
            self.self_attention_res_proj = nn.Linear(d, 1, bias=False)  # [1, d]
            self.mlp_res_proj = nn.Linear(d, 1, bias=False)

    @property
    def ffn(self) -> nn.Module:
        """The layer's feed-forward block: the MoE, or the dense MLP of the first layers."""
        return self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp

    def forward(self, stream, mode: LayerMode) -> LayerRecord | None:
        """The layer over the residual ``stream`` (:mod:`kda_ref.model.residual`: its input read from it, its
        outputs added to it) as ``mode`` runs it -> the KDA record: RMSNorm, attention, residual, RMSNorm,
        MLP / MoE, residual (the article's execution chain)."""
        norm = rms_norm_fast if mode.fused else rms_norm
        h = norm(stream.attn_input(self), self.input_layernorm.weight, self.eps)
        h, record = mode.kda(self.self_attn, h) if self.kind == "kda" else (mode.mla(self.self_attn, h), None)
        stream.add_attn(self, h)
        h = norm(stream.mlp_input(self), self.post_attention_layernorm.weight, self.eps)
        stream.add_mlp(self, self.ffn.forward_fused(h) if mode.fused else self.ffn(h))
        return record
