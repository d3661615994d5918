"""``HybridModel``: the Kimi-Linear architecture — KDA and MLA layers mixed by a config.

Article concept ``chain.hybrid`` (``docs/article.md#s1-1``, the full execution chain of hybrid attention):

    tokens -> embed -> [ RMSNorm -> (KDA | MLA) -> + -> RMSNorm -> (dense MLP | MoE) -> + ] x L
           -> RMSNorm -> lm_head -> logits

Parameter names are the Hugging Face Kimi-Linear checkpoint's; the model allocates no cache memory.
Two paths, tested against each other: the reference and the fused decode step (the step SGLang / vLLM
capture in a CUDA graph, here eager). The public entries :meth:`HybridModel.forward` and
:meth:`HybridModel.forward_output` validate; the engine's runner calls :meth:`HybridModel.forward_batch`.
Design notes: ``docs/model.md#the-models-two-paths``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops.dispatcher import KDAKernelDispatcher
from ..ops.mxfp4 import round_to_mxfp4
from ..ops.norms import rms_norm
from .batch import DecodePlan, ForwardBatch
from .layer_state import HybridCacheTensors
from .config import ModelConfig
# the layer skeleton and its modes live in .decoder; imported here by the name callers use
from .decoder import DecodeMode, DecoderLayer, ExtendMode, LayerMode, VerifyMode, residual_stream  # noqa: F401
from .parts import FusedWeightCache, rms_norm_fast, transposed
from .kda_layer import KDAAttention, NormWeight, VerifyRows
from .mtp import MTPLayer
from .output import ForwardOutput
from .size import check_fits
from .verify_record import VerifyRecord


# norm weights initialised to 1 (by the leaf module's name)
_UNIT_NORMS = ("o_norm", "kv_a_layernorm", "q_a_layernorm", "input_layernorm", "post_attention_layernorm", "norm",
               "self_attention_res_norm", "mlp_res_norm", "output_attn_res_norm", "routed_expert_norm", "enorm", "hnorm")


class _Backbone(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        # an uninitialised table: HybridModel.init_weights (or a loaded checkpoint) writes every entry.
        # nn.Embedding's own normal_ init would, on the meta device that load_pretrained builds on, pull
        # in torch._dynamo (about 2 s of imports the first time, on the app's first page visit)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                         _weight=torch.empty(config.vocab_size, config.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = NormWeight(config.hidden_size)
        if config.attn_res_block_size:  # K3: the final depth mix before the norm (kda_ref.model.decoder)
            self.output_attn_res_norm = NormWeight(config.hidden_size)
            self.output_attn_res_proj = nn.Linear(config.hidden_size, 1, bias=False)


class HybridModel(nn.Module):
    """KDA + MLA hybrid causal LM. ``backend`` picks the KDA / MLA-decode kernels ("torch" | "triton")."""

    def __init__(self, config: ModelConfig, seed: int | None = 0, backend: str = "torch", chunk_size: int = 64,
                 fast_decode: bool = True):
        super().__init__()
        # refuse an absurd config before building anything (bytes counted unless built on the meta device)
        check_fits(config, page_size=None, count_bytes=torch.empty(0).device.type == "cpu")
        self.config = config
        # take the fused decode step for all-decode batches (see the module docstring); False runs
        # every batch through the reference path
        self.fast_decode = fast_decode
        # with a seed, init_weights sets every parameter and buffer: the modules are built on the
        # meta device (no default init drawn from the global generator only to be overwritten; the
        # tiny model builds in ~24 ms instead of ~30), then given memory where the caller builds
        home = torch.empty(0).device
        with torch.device("meta" if seed is not None else home):
            self.model = _Backbone(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            if config.num_nextn_predict_layers:  # K3's MTP layers (kda_ref.model.mtp)
                self.mtp = nn.ModuleList(MTPLayer(config, i) for i in range(config.num_nextn_predict_layers))
        self.dispatcher = KDAKernelDispatcher(backend=backend, chunk_size=chunk_size)
        self._fused = FusedWeightCache()
        if seed is not None:
            self.to_empty(device=home)
            self.init_weights(seed)

    # ---- fused-weight caches (see kda_ref.model.parts) ---------------------------------------------
    def clear_fused_weights(self) -> None:
        """Drop every cached fused weight; they are rebuilt from the parameters on next use."""
        for m in self.modules():
            cache = m.__dict__.get("_fused")
            if isinstance(cache, FusedWeightCache):
                cache.clear()

    def _apply(self, fn, recurse: bool = True):  # .to(), .float(), .cuda(), ...: parameters may be replaced
        out = super()._apply(fn, recurse)
        self.clear_fused_weights()
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        out = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self.clear_fused_weights()  # assign=True replaces the parameter objects themselves
        return out

    @property
    def backend(self) -> str:
        return self.dispatcher.backend

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Deterministic initialisation from ``seed`` (fla / transformers conventions for the gate)."""
        gen = torch.Generator().manual_seed(seed)
        std = 0.02
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 2)
            if name.endswith("A_log"):  # decay rates exp(A_log) ~ U(1, 16)
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=gen).log())
            elif name.endswith("dt_bias"):  # inverse softplus of dt ~ logU(1e-3, 1e-1)
                dt = torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=gen).exp().clamp_min(1e-4)
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif "conv1d" in name:  # depthwise conv: U(-1/sqrt(W), 1/sqrt(W)), as nn.Conv1d
                bound = 1.0 / math.sqrt(p.shape[-1])
                p.copy_(torch.empty(p.shape).uniform_(-bound, bound, generator=gen))
            elif leaf[-2] in _UNIT_NORMS:
                p.fill_(1.0)
            elif leaf[-2].endswith("_res_proj"):  # attention residuals start as a uniform mix over depth
                p.zero_()
            else:
                p.normal_(0.0, std, generator=gen)
        for name, b in self.named_buffers():  # the only buffers: the routers' score-correction biases
            if not name.endswith("e_score_correction_bias"):
                raise AssertionError(f"init_weights: no rule for the buffer {name}")  # pragma: no cover
            b.zero_()
        self._as_released()

    @torch.no_grad()
    def _as_released(self) -> None:
        """What K3's release format holds exactly: ``A_log``'s padding past the heads zero, and MXFP4
        routed experts on the MXFP4 grid (so a model saved in the release layout loads back bit-equal)."""
        for m in self.modules():
            if isinstance(m, KDAAttention) and m.A_log.dim() == 1:
                m.A_log[m.num_heads:] = 0.0
        self.round_experts_to_mxfp4()

    @torch.no_grad()
    def round_experts_to_mxfp4(self) -> int:
        """Round every routed expert's weights onto the MXFP4 grid when the config stores them in MXFP4
        (``quantization_config``), as K3's release does; returns how many tensors it rounded. Initialisation
        calls it; so does training after its last step, before :func:`~kda_ref.model.save_pretrained`
        writes the release layout (which refuses experts off the grid rather than change them)."""
        if not self.config.experts_mxfp4:
            return 0
        n = 0
        for name, p in self.named_parameters():
            if ".experts." in name:
                p.copy_(round_to_mxfp4(p))
                n += 1
        self.clear_fused_weights()
        return n

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        input_ids: torch.Tensor,
        batch: ForwardBatch | None = None,
        cache: HybridCacheTensors | None = None,
        logits: str = "all",
    ) -> torch.Tensor:
        """Run the packed tokens ``input_ids [T]`` described by ``batch``; returns the logits.

        Without ``cache`` every sequence starts from an empty state and nothing is kept (``batch``
        defaults to one sequence). With ``cache`` the states of ``batch.state_indices`` and the
        pages of ``batch.block_table`` are read and updated in place.

        ``logits``: ``"all"`` -> ``[T, vocab]``; ``"last"`` -> ``[N, vocab]`` (last token of every
        sequence); ``"none"`` -> the final hidden states ``[T, hidden]``. What the batch asks the
        KDA layers to record (chunk-start states, per-token states, gates) comes back from
        :meth:`forward_output`.
        """
        return self.forward_output(input_ids, batch, cache, logits, keep_hidden=False).logits

    def forward_output(self, input_ids: torch.Tensor, batch: ForwardBatch | None = None,
                       cache: HybridCacheTensors | None = None, logits: str = "all",
                       on_dispatch=None, keep_hidden: bool = True) -> ForwardOutput:
        """:meth:`forward`, returning a :class:`~kda_ref.model.output.ForwardOutput`: the logits and
        every KDA layer's recorded states and gates. ``on_dispatch`` is called with the
        :class:`~kda_ref.ops.dispatcher.KernelChoice` of every KDA kernel call of this forward;
        ``keep_hidden``: as :meth:`forward_batch` takes it."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 1 or input_ids.dtype not in (torch.long, torch.int32, torch.int64):
            raise ValueError("input_ids: must be a 1-D integer tensor of packed tokens")
        if input_ids.numel() == 0:
            raise ValueError("input_ids: empty")
        V = self.config.vocab_size
        if int(input_ids.min()) < 0 or int(input_ids.max()) >= V:
            raise ValueError(f"input_ids: token ids must lie in [0, {V}), got [{int(input_ids.min())}, {int(input_ids.max())}]")
        if logits not in ("all", "last", "none"):
            raise ValueError(f"logits: must be 'all', 'last' or 'none', got {logits!r}")
        if batch is None:
            batch = ForwardBatch.prefill([input_ids.numel()], device=input_ids.device)
        if batch.num_tokens != input_ids.numel():
            raise ValueError(f"batch: cu_seqlens covers {batch.num_tokens} tokens, input_ids has {input_ids.numel()}")
        if cache is not None and (batch.state_indices is None or batch.block_table is None):
            raise ValueError("batch: a cached forward needs state_indices and block_table")
        return self.forward_batch(input_ids.long(), batch, cache, logits, on_dispatch=on_dispatch,
                                  keep_hidden=keep_hidden)

    def fused_steps_enabled(self, cache: HybridCacheTensors | None) -> bool:
        """Whether a batch of the fused steps' shape (all-decode, uniform verify) would take them: fast
        decode on, a cache, no autograd, fp32 logits."""
        return (self.fast_decode and cache is not None and not torch.is_grad_enabled()
                and self.lm_head.weight.dtype == torch.float32)

    def uses_decode_step(self, batch: ForwardBatch, cache: HybridCacheTensors | None) -> bool:
        """Whether :meth:`forward_batch` runs ``batch`` through the fused decode step."""
        return self.fused_steps_enabled(cache) and not batch.probe and batch.is_decode_only

    def uses_verify_step(self, batch: ForwardBatch, cache: HybridCacheTensors | None) -> bool:
        """Whether :meth:`forward_batch` runs ``batch`` through the fused verify step (every sequence
        verifies the same number of tokens)."""
        return self.fused_steps_enabled(cache) and not batch.probe and batch.is_uniform_verify

    def forward_batch(self, input_ids: torch.Tensor, batch: ForwardBatch, cache: HybridCacheTensors | None,
                      logits: str | torch.Tensor = "last", on_dispatch=None, keep_hidden: bool = True) -> ForwardOutput:
        """:meth:`forward_output` without the input checks, for a caller that built ``input_ids [T]``
        (int64) and ``batch`` itself (the engine's runner); same results. ``logits`` may also be a
        tensor of packed-token rows: the logits of exactly those rows, in that order. ``keep_hidden=False``:
        the caller reads only the logits, so the last layer's MLP / MoE runs on the rows they need alone
        (:meth:`~kda_ref.model.decoder.DecoderLayer.forward`'s ``out_rows``) and ``hidden`` holds those rows."""
        dispatcher = self.dispatcher if on_dispatch is None else self.dispatcher.with_hook(on_dispatch)
        if self.uses_decode_step(batch, cache):
            rows = logits if isinstance(logits, torch.Tensor) else None  # one token per sequence: all rows
            hidden = self.decode_hidden(input_ids, batch.decode_plan(cache.page_size), cache, dispatcher)
            x = rms_norm_fast(hidden, self.model.norm.weight, self.config.rms_norm_eps)
            x = x if rows is None else x[rows]
            return ForwardOutput(x if logits == "none" else self._lm_head_fast(x), hidden=hidden)
        out = ForwardOutput(logits=input_ids)  # logits filled below
        rows = _rows_read(logits, batch)  # the rows the caller reads (speculative verify: a tensor), None: all
        fused = self.uses_verify_step(batch, cache)
        cut = not fused and not keep_hidden and rows is not None  # the last layer runs past attention on rows
        if fused:
            out = self.verify_step(input_ids, batch.verify_plan(cache.page_size), cache, batch.verify_keep,
                                   dispatcher, hidden=True)
            x = out.logits
        else:
            mode = ExtendMode(batch, cache, dispatcher, fused=self.fused_steps_enabled(cache) and not batch.probe)
            out.hidden = self.run_layers(self.model.embed_tokens(input_ids), mode, out, out_rows=rows if cut else None)
            x = rms_norm(out.hidden, self.model.norm.weight, self.config.rms_norm_eps)
        if rows is not None and not cut:
            x = x[rows]
        if isinstance(logits, str) and logits == "none":
            out.logits = x
        else:
            out.logits = self._lm_head_fast(x) if fused else self.lm_head(x)
        return out

    def run_layers(self, x: torch.Tensor, mode: LayerMode, out: ForwardOutput | None = None,
                   out_rows: torch.Tensor | None = None) -> torch.Tensor:
        """Every decoder layer over ``x [T, hidden]`` as ``mode`` runs it; the KDA layers' records go to
        ``out``. The one loop over the layers: the reference forward, the fused steps and a
        context-parallel rank's shard all call it. ``out_rows``: the rows returned, ``[len(out_rows), hidden]``,
        cut after the last layer's attention (:meth:`~kda_ref.model.decoder.DecoderLayer.forward`)."""
        stream = residual_stream(self.config, x)
        last = len(self.model.layers) - 1
        for i, layer in enumerate(self.model.layers):
            record = layer(stream, mode, out_rows if i == last else None)
            if out is not None:
                out.add(i, record)
        return stream.output(self.model)

    def verify_step(self, input_ids: torch.Tensor, plan: DecodePlan, cache: HybridCacheTensors, keep: VerifyRecord,
                    dispatcher: KDAKernelDispatcher, hidden: bool = False) -> ForwardOutput:
        """The uniform verify fast path: ``input_ids [N * L]``, ``L = plan.tokens`` per sequence; the logits of
        every row (or, ``hidden=True``, the final hidden states) and what ``keep`` records of every KDA
        layer (:mod:`kda_ref.model.verify_record`). No host synchronisation (a static step runs it; so do
        the engine's tree verify and the static buckets)."""
        out = ForwardOutput(logits=input_ids)
        x = F.embedding(input_ids, self.model.embed_tokens.weight)  # [N * L, hidden]
        x = self.run_layers(x, VerifyMode(plan, cache, dispatcher, keep, VerifyRows.of(plan)), out)
        out.hidden = x  # the pre-norm rows (an MTP drafter reads them)
        x = rms_norm_fast(x, self.model.norm.weight, self.config.rms_norm_eps)
        out.logits = x if hidden else self._lm_head_fast(x)
        return out

    def decode_hidden(self, input_ids: torch.Tensor, plan: DecodePlan, cache: HybridCacheTensors,
                      dispatcher: KDAKernelDispatcher) -> torch.Tensor:
        """The all-decode fast path up to the final residual stream ``[N, hidden]`` before ``model.norm``:
        ``input_ids [N]``, one token per sequence, the states updated in their slots."""
        x = F.embedding(input_ids, self.model.embed_tokens.weight)  # [N, hidden]
        return self.run_layers(x, DecodeMode(plan, cache, dispatcher))

    def final_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The fused steps' head: ``model.norm`` and ``lm_head`` of pre-norm rows ``hidden [n, d]`` -> ``[n, vocab]``
        (a static decode bucket, which keeps the pre-norm rows for an MTP drafter, calls it)."""
        return self._lm_head_fast(rms_norm_fast(hidden, self.model.norm.weight, self.config.rms_norm_eps))

    def hidden_states(self, input_ids: torch.Tensor, batch: ForwardBatch | None = None) -> torch.Tensor:
        """Stateless: the final residual stream ``[T, hidden]`` of the packed ``input_ids [T]`` before
        ``model.norm`` (with K3's attention residuals, the final mix): what ``lm_head`` reads once normed,
        and what an MTP layer takes as its previous hidden state."""
        batch = batch or ForwardBatch.prefill([input_ids.numel()], device=input_ids.device)
        x = self.model.embed_tokens(input_ids.long())
        return self.run_layers(x, ExtendMode(batch, None, self.dispatcher))

    def mtp_logits(self, input_ids: torch.Tensor, layer: int = 0) -> torch.Tensor:
        """Stateless, one sequence ``input_ids [T]``: MTP layer ``layer``'s logits ``[T - 1, vocab]``, row ``t``
        predicting the token at ``t + 2`` from the hidden state at ``t`` and the token at ``t + 1``
        (:mod:`kda_ref.model.mtp`). A model without MTP layers raises ``ValueError``."""
        n = self.config.num_nextn_predict_layers
        if not 0 <= layer < n:
            raise ValueError(f"layer: the model has {n} MTP layers (num_nextn_predict_layers), asked for {layer}")
        if input_ids.dim() != 1 or input_ids.numel() < 2:
            raise ValueError("input_ids: an MTP layer needs a 1-D sequence of at least 2 tokens")
        ids = input_ids.long()
        h = self.hidden_states(ids)
        batch = ForwardBatch.prefill([ids.numel() - 1], device=ids.device)
        return self.mtp[layer].predict(h[:-1], ids[1:], batch, self.dispatcher)[0]

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The final RMSNorm and ``lm_head`` of hidden states ``x [n, hidden]`` -> fp32 logits ``[n, vocab]``
        (a context-parallel rank computes its sequences' last tokens' logits with it)."""
        return self.lm_head(rms_norm(x, self.model.norm.weight, self.config.rms_norm_eps)).float()

    def _lm_head_fast(self, x: torch.Tensor) -> torch.Tensor:
        """``lm_head(x)`` for the fused steps: one ``mm`` with the cached ``[hidden, vocab]`` weight."""
        return torch.mm(x, self._fused.get("lm_head", lambda: [self.lm_head.weight], lambda ws: transposed(ws[0])))


def _rows_read(logits: str | torch.Tensor, batch: ForwardBatch) -> torch.Tensor | None:
    """The packed rows whose logits :meth:`HybridModel.forward_batch` returns, or ``None`` for every row
    (``"all"``, and ``"none"``, which returns the hidden states of every row)."""
    if isinstance(logits, torch.Tensor):
        return logits
    return batch.cu_seqlens[1:] - 1 if logits == "last" else None
