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

Speculative items (a decode request with draft tokens, ``ScheduledItem.drafts``) run as *verify*
segments of the same forward: the last committed token and the ``k`` drafts, the logits of all
``1 + k`` positions, and the state after every one of them (:class:`SpecStep`). The runner decides
acceptance (:mod:`kda_ref.spec.accept`); the scheduler, which knows where the request stops,
commits the state of the last token it keeps (:meth:`SpecStep.commit`, ``spec_state="per_step"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..memory import UnifiedMemoryPool
from ..model import ForwardBatch, HybridModel
from ..model.cache import PAD_PAGE
from ..model.output import BoundaryStates
from ..spec import AcceptResult, accept_greedy, accept_rejection
from .scheduler import SchedulerOutput


@dataclass
class SpecStep:
    """One speculative item's verify result: acceptance, logits and the per-step states."""

    result: AcceptResult
    logits: torch.Tensor  # [1 + k, vocab]: after the last committed token, then after each draft
    rows: list[int]  # per KDA layer's step states: row of the state after verified token i (i = 0..k)
    context: int  # tokens cached before the step (= ScheduledItem.start)


@dataclass
class StepOutput:
    """What one engine step's forward produced."""

    logits: torch.Tensor  # [N, vocab] fp32: the last token of every scheduled request
    token_ids: list[int | None]  # [N] the sampled next token of every request that completes, else None
    batch: ForwardBatch  # the metadata the forward ran with
    chunk_states: dict = field(default_factory=dict)  # KDA layer -> BoundaryStates (when asked for)
    errors: dict[int, str] = field(default_factory=dict)  # item index -> why sampling failed for it
    spec: dict[int, SpecStep] = field(default_factory=dict)  # item index -> its verify result
    step_states: dict = field(default_factory=dict)  # KDA layer -> BoundaryStates of the verify segments

    def commit(self, pool: UnifiedMemoryPool, n: int, j: int, slot: int) -> None:
        """``spec_state="per_step"``: make the state after verified token ``j`` of item ``n`` (the
        last committed token is 0, draft i is i) the request's active state, recurrent and conv
        window of every KDA layer together."""
        row = self.spec[n].rows[j]
        layers = [layer for layer in pool.config.kda_layer_ids if layer in self.step_states]
        pool.write_active(slot, torch.stack([self.step_states[layer].recurrent[row] for layer in layers]),
                          torch.stack([self.step_states[layer].conv[row] for layer in layers]))

    def write_slots(self, pool: UnifiedMemoryPool, n: int, slots: list[int]) -> None:
        """``spec_state="slots"``: the state after verified token t of item ``n`` goes to ``slots[t]``
        (what vLLM's recurrent kernel writes in place, one state block per position)."""
        spec = self.spec[n]
        layers = [layer for layer in pool.config.kda_layer_ids if layer in self.step_states]
        for t, row in enumerate(spec.rows):
            pool.write_active(slots[t], torch.stack([self.step_states[layer].recurrent[row] for layer in layers]),
                              torch.stack([self.step_states[layer].conv[row] for layer in layers]))

    def accepted_states(self, kept: dict[int, int]) -> dict:
        """The verify segments' step states restricted to the boundaries strictly inside what each
        item keeps (``kept[n]`` = verified tokens kept by item ``n``): what a prefix cache may save
        from a speculative step -- never a state after a rejected draft."""
        if not self.step_states:
            return {}
        out = {}
        for layer, bs in self.step_states.items():
            seq_ids, positions, rows = [], [], []
            for m, n in enumerate(bs.seq_ids.tolist()):
                spec = self.spec[n]
                keep = [i for i in range(kept.get(n, 0) - 1)]  # boundaries after tokens 0..kept-2
                seq_ids.append(n)
                positions.append(bs.positions[m][:len(keep)])
                rows.extend(spec.rows[i] for i in keep)
            idx = torch.tensor(rows, dtype=torch.long, device=bs.recurrent.device)
            out[layer] = BoundaryStates(seq_ids=bs.seq_ids, positions=positions, recurrent=bs.recurrent[idx],
                                        conv=bs.conv[idx])
        return out


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
            known = it.num_new_tokens - len(it.drafts)
            ids.extend(it.req.all_token_ids[it.start:it.start + known])
            ids.extend(it.drafts)  # a speculative item verifies its drafts after its last committed token
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
                             return_chunk_states=return_chunk_states, mixed_batch=self.mixed_batch,
                             verify_seqs=tuple(n for n, it in enumerate(items) if it.drafts))
        return torch.tensor(ids, dtype=torch.long, device=dev), batch

    @torch.no_grad()
    def run(self, sched: SchedulerOutput, return_chunk_states: bool = False) -> StepOutput:
        """Forward the scheduled tokens and sample where a request completes its known tokens; for a
        speculative item, decide how many drafts the target accepts."""
        input_ids, batch = self.build_batch(sched, return_chunk_states)
        rows = self._logit_rows(sched, batch)
        fwd = self.model.forward_batch(input_ids, batch, self.pool.tensors, on_dispatch=self.on_dispatch,
                                       logits="last" if rows is None else rows)
        logits = fwd.logits.float()
        tokens: list[int | None] = []
        errors: dict[int, str] = {}
        spec: dict[int, SpecStep] = {}
        at, step_row, last_rows = 0, 0, []  # next row of ``logits`` / of the verify segments' step states
        for n, it in enumerate(sched.items):
            nrows = len(it.drafts) + 1 if it.drafts else 1
            mine = logits[at:at + nrows]
            at += nrows
            last_rows.append(at - 1)
            tok = None
            try:  # one request's bad logits or sampling parameters must not stop the others
                if it.drafts:
                    res = self._accept(mine, it)
                    spec[n] = SpecStep(res, mine, list(range(step_row, step_row + nrows)), it.start)
                    tok = res.next_token
                elif it.completes:
                    tok = sample(mine[0], it.req.params.temperature, it.req.params.top_k, it.req.generator)
            except Exception as err:  # noqa: BLE001 -- reported on that request, not raised
                errors[n] = f"sampling failed: {err}"
            if it.drafts:
                step_row += nrows
            tokens.append(tok)
        return StepOutput(logits=logits if rows is None else logits[last_rows], token_ids=tokens, batch=batch, chunk_states=fwd.chunk_states, errors=errors,
                          spec=spec, step_states=fwd.step_states)

    @staticmethod
    def _logit_rows(sched: SchedulerOutput, batch: ForwardBatch) -> torch.Tensor | None:
        """Packed rows whose logits are needed when the step verifies drafts: every row of a verify
        segment, the last row of every other sequence (None: the last rows only)."""
        if not batch.verify_seqs:
            return None
        offs = batch.cu_seqlens.tolist()
        rows = []
        for n, it in enumerate(sched.items):
            rows.extend(range(offs[n], offs[n + 1]) if it.drafts else [offs[n + 1] - 1])
        return torch.tensor(rows, dtype=torch.long, device=batch.cu_seqlens.device)

    @staticmethod
    def _accept(logits: torch.Tensor, it) -> AcceptResult:
        if not bool(torch.isfinite(logits).all()):
            bad = int((~torch.isfinite(logits)).sum())
            raise SamplingError(f"{bad} of {logits.numel()} logits are not finite (NaN or inf)")
        p = it.req.params
        if p.temperature == 0:
            return accept_greedy(logits, it.drafts)
        return accept_rejection(logits, it.drafts, p.temperature, p.top_k, it.req.generator)


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
