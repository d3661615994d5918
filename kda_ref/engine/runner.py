"""``ModelRunner``: turns a scheduler decision into ONE varlen forward and samples the results.

Article concept ``varlen.metadata``: the batch is the packed new tokens of every scheduled
request plus, per request, ``cu_seqlens``, the tokens already cached (``context_lens``), its KDA
state slot (``state_indices``) and its MLA pages (``block_table``) — SGLang's ``ForwardBatch``
built by ``ScheduleBatch.get_model_worker_batch``, vLLM's ``GPUModelRunner._prepare_inputs``.
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
        ids, lens, ctx, slots = [], [], [], []
        for it in items:
            toks = it.req.all_token_ids[it.start:it.start + it.num_new_tokens]
            ids.extend(toks)
            lens.append(it.num_new_tokens)
            ctx.append(it.start)
            slots.append(it.req.slot)
        max_pages = max(len(it.req.pages) for it in items)
        table = torch.full((len(items), max_pages), PAD_PAGE, dtype=torch.long)
        for n, it in enumerate(items):
            table[n, :len(it.req.pages)] = torch.tensor(it.req.pages)
        dev = self.device
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.long, device=dev)
        batch = ForwardBatch(cu_seqlens=cu, context_lens=torch.tensor(ctx, device=dev),
                             state_indices=torch.tensor(slots, device=dev), block_table=table.to(dev),
                             return_chunk_states=return_chunk_states)
        return torch.tensor(ids, dtype=torch.long, device=dev), batch

    @torch.no_grad()
    def run(self, sched: SchedulerOutput, return_chunk_states: bool = False) -> tuple[torch.Tensor, ForwardBatch]:
        """Forward the scheduled tokens; returns the last-token logits ``[N, vocab]`` (fp32) and the batch
        (whose ``chunk_states`` hold the chunk-start checkpoints when asked for)."""
        input_ids, batch = self.build_batch(sched, return_chunk_states)
        logits = self.model(input_ids, batch, self.pool.tensors, logits="last")
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
