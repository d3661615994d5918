"""Kimi K3's multi-token-prediction (MTP) layer: a decoder layer that predicts the token after next.

DeepSeek-V3's MTP as K3 ships it (``num_nextn_predict_layers``; vLLM
``vllm/models/kimi_k3/nvidia/mtp.py::KimiK3MultiTokenPredictorLayer``, tokenspeed
``runtime/models/kimi_k3_nextn.py::KimiK3ModelNextN``): from the main model's hidden state ``h_t`` (before
``model.norm``) and the embedding of the token at ``t + 1`` it predicts the token at ``t + 2``. It is an
MLA layer (no recurrent state), stored as ``model.layers.{num_hidden_layers + i}.*`` and held as ``mtp.{i}.*``.
Design notes: ``docs/model.md#the-mtp-layer``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from ..ops.dispatcher import KDAKernelDispatcher
from ..ops.norms import rms_norm
from .batch import DecodePlan, ForwardBatch
from .layer_state import HybridCacheTensors
from .config import ModelConfig
from .decoder import DecoderLayer, ExtendMode, LayerMode, PlainResidual
from .kda_layer import NormWeight
from .parts import rms_norm_fast


class SharedHead(nn.Module):
    """The MTP layer's own final norm and vocabulary projection (``shared_head.norm`` / ``.head``)."""

    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.norm = NormWeight(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)


class MTPLayer(DecoderLayer):
    """MTP layer ``index`` (0-based) of ``config`` (module docstring)."""

    def __init__(self, config: ModelConfig, index: int):
        super().__init__(config, config.num_hidden_layers + index, kind="mla")
        d, V = config.hidden_size, config.vocab_size
        self.embed_tokens = nn.Embedding(V, d, _weight=torch.empty(V, d))
        self.enorm, self.hnorm = NormWeight(d), NormWeight(d)
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.shared_head = SharedHead(d, V)

    def predict(self, hidden: torch.Tensor, next_ids: torch.Tensor, batch: ForwardBatch,
                dispatcher: KDAKernelDispatcher, cache=None, last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``hidden [T, d]`` (the main model's pre-norm output at positions ``t``) and ``next_ids [T]`` (the
        tokens at ``t + 1``), packed as ``batch`` -> ``(logits [T, vocab]`` for the tokens at ``t + 2``, the
        layer's own hidden states ``[T, d])``. Stateless without ``cache``; with it (a cache holding this
        layer's KV, :class:`~kda_ref.model.RequestCache` with ``mla_layers``) the rows attend over the rows
        cached before them and are written into it, as a decode step of the main model does -- through the
        fused decode / verify path when the batch has that shape (rows after a cached context, the same
        number per sequence: a drafter's step), the reference extend otherwise (tested against each other).
        ``last_only`` (a batch of one sequence): see :meth:`predict_step`."""
        if last_only and len(batch.seq_lens) != 1:
            raise ValueError(f"last_only: keeps one sequence's last row, but the batch has {len(batch.seq_lens)}")
        mode = self.fused_mode(batch, cache, dispatcher)
        # the reference extend takes the last row as a tensor of rows, so an MLA layer computes that query alone
        rows = None if not last_only else slice(-1, None) if mode is not None else batch.cu_seqlens[1:] - 1
        return self._predict(hidden, next_ids, mode or ExtendMode(batch, cache, dispatcher), fused=mode is not None,
                             out_rows=rows)

    def predict_step(self, hidden: torch.Tensor, next_ids: torch.Tensor, plan: DecodePlan, cache: HybridCacheTensors,
                     dispatcher: KDAKernelDispatcher, last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`predict`'s fused draft step with the step's ``plan`` given (``plan.tokens`` rows of one
        sequence after its cached rows): no host work and no data-dependent shape, so it can run as a compiled
        fixed-shape step (:class:`~kda_ref.speculative.mtp_drafter.StaticDraft`). ``last_only``: every row's
        KV is written, but the MoE and the head run on the last row alone (``DecoderLayer.forward``'s ``out_rows``), and
        the logits and hidden state returned are that row's (``[1, vocab]``, ``[1, d]``)."""
        return self._predict(hidden, next_ids, DraftStepMode(plan, cache, dispatcher), fused=True,
                             out_rows=slice(-1, None) if last_only else None)

    def _predict(self, hidden, next_ids, mode: LayerMode, fused: bool, out_rows=None) -> tuple[torch.Tensor, torch.Tensor]:
        norm = rms_norm_fast if fused else rms_norm
        e = norm(self.embed_tokens(next_ids), self.enorm.weight, self.eps)
        h = norm(hidden, self.hnorm.weight, self.eps)
        stream = PlainResidual(self.eh_proj(torch.cat([e, h], dim=-1)))  # [T, 2d] -> [T, d]
        DecoderLayer.forward(self, stream, mode, out_rows=out_rows)
        x = stream.x
        return self.shared_head.head(norm(x, self.shared_head.norm.weight, self.eps)), x

    @staticmethod
    def fused_mode(batch: ForwardBatch, cache, dispatcher) -> "DraftStepMode | None":
        """The fused mode :meth:`predict` runs a cached draft step in -- the decode shape (one row per
        sequence after a cached context) or the uniform-verify shape (the same number of rows each) --
        or ``None`` for the reference extend (stateless, a request's first rows, autograd recording).
        :meth:`predict` asks it; the tests ask it which path a drafter's steps take."""
        if cache is None or torch.is_grad_enabled():
            return None
        if batch.is_decode_only:
            return DraftStepMode(batch.decode_plan(cache.page_size), cache, dispatcher)
        lens = batch.seq_lens
        if lens and lens[0] > 1 and all(L == lens[0] for L in lens) and all(c > 0 for c in batch.context_lens.tolist()):
            return DraftStepMode(replace(batch, verify=True).verify_plan(cache.page_size), cache, dispatcher)
        return None


@dataclass
class DraftStepMode(LayerMode):
    """An MTP layer's draft step in the fused path: its MLA attends over the rows its own cache holds and
    the step's, as the main model's decode / verify steps do (``plan``: their :class:`DecodePlan`)."""

    plan: DecodePlan
    cache: HybridCacheTensors
    dispatcher: KDAKernelDispatcher
    fused: bool = True

    def kda(self, attn, h):
        raise ValueError("an MTP layer is an MLA layer")

    def mla(self, attn, h):
        return attn.decode(h, self.plan, self.cache, self.dispatcher)
