"""``ModelRunner``: turns a scheduler decision into ONE varlen forward and samples the results.

Article concept ``varlen.metadata``: the batch is the packed new tokens of every scheduled
request plus, per request, ``cu_seqlens``, the tokens already cached (``context_lens``), its KDA
state slot (``state_indices``) and its MLA pages (``block_table``) — SGLang's ``ForwardBatch``
built by ``ScheduleBatch.get_model_worker_batch``, vLLM's ``GPUModelRunner._prepare_inputs``.

The runner builds every tensor of the batch from host lists in one ``torch.tensor`` call each,
calls :meth:`HybridModel.forward_batch` (no re-validation of what it just built; an all-decode
batch takes the model's fused decode step), and samples the next token of every request whose
known tokens are now all cached (nano-vllm's ``ModelRunner.run`` returns sampled ids the same way).
The engine's trace hook (``on_dispatch``) travels with each forward call, so engines that share a
model never record each other's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..memory import UnifiedMemoryPool
from ..model import ForwardBatch, HybridModel
from ..model.cache import PAD_PAGE
from .scheduler import SchedulerOutput


@dataclass
class StepOutput:
    """What one engine step's forward produced."""

    logits: torch.Tensor  # [N, vocab] fp32: the last token of every scheduled request
    token_ids: list[int | None]  # [N] the sampled next token of every request that completes, else None
    batch: ForwardBatch  # the metadata the forward ran with
    chunk_states: dict = field(default_factory=dict)  # KDA layer -> BoundaryStates (when asked for)
    errors: dict[int, str] = field(default_factory=dict)  # item index -> why sampling failed for it


class ModelRunner:
    def __init__(self, model: HybridModel, pool: UnifiedMemoryPool, on_dispatch=None, mixed_batch: str = "chunk"):
        self.model = model
        self.pool = pool
        self.mixed_batch = mixed_batch  # how a step mixing decodes and prefill chunks runs (ForwardBatch)
        self.on_dispatch = on_dispatch  # this engine's kernel trace hook, passed with every forward
        self.device = next(model.parameters()).device

    def build_batch(self, sched: SchedulerOutput, return_chunk_states: bool = False) -> tuple[torch.Tensor, ForwardBatch]:
        items = sched.items
        ids, cu, ctx, slots = [], [0], [], []
        for it in items:
            ids.extend(it.req.all_token_ids[it.start:it.start + it.num_new_tokens])
            cu.append(cu[-1] + it.num_new_tokens)
            ctx.append(it.start)
            slots.append(it.req.slot)
        max_pages = max(len(it.req.pages) for it in items)
        table = [list(it.req.pages) + [PAD_PAGE] * (max_pages - len(it.req.pages)) for it in items]  # [N, max_pages]
        dev = self.device
        batch = ForwardBatch(cu_seqlens=torch.tensor(cu, dtype=torch.long, device=dev),
                             context_lens=torch.tensor(ctx, dtype=torch.long, device=dev),
                             state_indices=torch.tensor(slots, dtype=torch.long, device=dev),
                             block_table=torch.tensor(table, dtype=torch.long, device=dev),
                             return_chunk_states=return_chunk_states, mixed_batch=self.mixed_batch)
        return torch.tensor(ids, dtype=torch.long, device=dev), batch

    @torch.no_grad()
    def run(self, sched: SchedulerOutput, return_chunk_states: bool = False) -> StepOutput:
        """Forward the scheduled tokens and sample where a request completes its known tokens."""
        input_ids, batch = self.build_batch(sched, return_chunk_states)
        fwd = self.model.forward_batch(input_ids, batch, self.pool.tensors, logits="last", on_dispatch=self.on_dispatch)
        logits = fwd.logits.float()
        tokens: list[int | None] = []
        errors: dict[int, str] = {}
        for n, it in enumerate(sched.items):
            tok = None
            if it.completes:
                try:  # one request's bad logits or sampling parameters must not stop the others
                    tok = sample(logits[n], it.req.params.temperature, it.req.params.top_k, it.req.generator)
                except Exception as err:  # noqa: BLE001 -- reported on that request, not raised
                    errors[n] = f"sampling failed: {err}"
            tokens.append(tok)
        return StepOutput(logits=logits, token_ids=tokens, batch=batch, chunk_states=fwd.chunk_states, errors=errors)


class SamplingError(ValueError):
    """The logits or the distribution of one request cannot be sampled (NaN / inf)."""


def sample(logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator | None) -> int:
    """Greedy when ``temperature == 0``, else softmax sampling (optionally top-k) with ``generator``.

    Non-finite logits raise :class:`SamplingError` instead of returning an arbitrary token (``argmax``
    of a NaN row is index 0; ``multinomial`` of NaN probabilities raises deep inside torch)."""
    if not bool(torch.isfinite(logits).all()):
        bad = int((~torch.isfinite(logits)).sum())
        raise SamplingError(f"{bad} of {logits.numel()} logits are not finite (NaN or inf)")
    if temperature == 0:
        return int(torch.argmax(logits))
    scaled = logits / temperature
    if top_k > 0:
        kth = torch.topk(scaled, min(top_k, scaled.numel())).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if not bool(torch.isfinite(probs).all()):
        raise SamplingError(f"temperature {temperature!r} turns the logits into a non-finite distribution")
    return int(torch.multinomial(probs, 1, generator=generator))
