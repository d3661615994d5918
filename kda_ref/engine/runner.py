"""``ModelRunner``: turns a scheduler decision into ONE varlen forward and samples the results.

Article concept ``varlen.metadata``: the batch is the packed new tokens of every scheduled
request plus, per request, ``cu_seqlens``, the tokens already cached (``context_lens``), its KDA
state slot (``state_indices``) and its MLA pages (``block_table``) — SGLang's ``ForwardBatch``
built by ``ScheduleBatch.get_model_worker_batch``, vLLM's ``GPUModelRunner._prepare_inputs``.

The runner builds every tensor of the batch from host lists in one ``torch.tensor`` call each and
calls :meth:`HybridModel.forward_batch` (no re-validation of what it just built); an all-decode
batch then takes the model's fused decode step.
"""

from __future__ import annotations

import torch

from ..model import ForwardBatch, HybridModel
from ..model.cache import PAD_PAGE
from ..memory import UnifiedMemoryPool
from .scheduler import SchedulerOutput


class ModelRunner:
    def __init__(self, model: HybridModel, pool: UnifiedMemoryPool):
        self.model = model
        self.pool = pool
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
                             return_chunk_states=return_chunk_states)
        return torch.tensor(ids, dtype=torch.long, device=dev), batch

    @torch.no_grad()
    def run(self, sched: SchedulerOutput, return_chunk_states: bool = False) -> tuple[torch.Tensor, ForwardBatch]:
        """Forward the scheduled tokens; returns the last-token logits ``[N, vocab]`` (fp32) and the batch
        (whose ``chunk_states`` hold the chunk-start checkpoints when asked for)."""
        input_ids, batch = self.build_batch(sched, return_chunk_states)
        logits = self.model.forward_batch(input_ids, batch, self.pool.tensors, logits="last")
        return logits.float(), batch


def sample(logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator | None) -> int:
    """Greedy when ``temperature == 0``, else softmax sampling (optionally top-k) with ``generator``."""
    if temperature == 0:
        return int(torch.argmax(logits))
    scaled = logits / temperature
    if top_k > 0:
        kth = torch.topk(scaled, min(top_k, scaled.numel())).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))
