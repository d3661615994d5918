"""What one engine step's forward produced: :class:`StepOutput` (data, frozen) and its verify results.

The runner (:mod:`kda_ref.engine.runner`) builds it; the scheduler's ``postprocess`` reads it; nothing in
it writes the pool. A speculative item's verify leaves a :class:`SpecStep` (acceptance, the logits of its
``1 + k`` positions, where its per-token states are). The rollback strategy's commit
(:class:`~kda_ref.speculative.RollbackStrategy`) returns what it did as a :class:`Commit` -- the slot a
request continues from, the states a ReplaySSM fold computed -- instead of writing into this output or
into the requests; the speculative half of the scheduler (:class:`~kda_ref.engine.spec_steps.Speculation`)
applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import torch

from ..memory import UnifiedMemoryPool
from ..model import ForwardBatch
from ..model.output import BoundaryStates
from ..speculative import AcceptResult, Commit
from .static_decode import StaticStepInfo
from .tree_verify import TreeStep


@dataclass(frozen=True)
class SpecStep:
    """One speculative item's verify result: acceptance, logits and the per-step states."""

    result: AcceptResult
    logits: torch.Tensor  # [1 + k, vocab]: after the last committed token, then after each draft
    rows: list[int]  # per KDA layer's step states: row of the state after verified token i (i = 0..k)
    context: int  # tokens cached before the step (= ScheduledItem.start)
    # spec_state="slots" through the fused verify step: the slots the step wrote the state after verified
    # token i into, in place (then there are no step states for this item); None otherwise
    slots: list[int] | None = None


@dataclass(frozen=True)
class StepOutput:
    """What one engine step's forward produced."""

    logits: torch.Tensor  # [N, vocab] fp32: the last token of every scheduled request
    token_ids: list[int | None]  # [N] the sampled next token of every request that completes, else None
    make_batch: Callable[[], ForwardBatch]  # the metadata the forward ran with (built on demand: the tracer)
    chunk_states: dict = field(default_factory=dict)  # KDA layer -> BoundaryStates (when asked for)
    errors: dict[int, str] = field(default_factory=dict)  # item index -> why sampling failed for it
    spec: dict[int, SpecStep] = field(default_factory=dict)  # item index -> its verify result
    step_states: dict = field(default_factory=dict)  # KDA layer -> BoundaryStates of the verify segments
    trajectories: dict = field(default_factory=dict)  # KDA layer -> Trajectory of the verify segments (replay)
    static: StaticStepInfo | None = None  # the bucket a static-shape decode step ran as
    tree: dict[int, TreeStep] = field(default_factory=dict)  # item index -> its verified draft tree
    # a static verify step that kept per-token records: ``fold(kept, slots)`` commits the kept tokens of the
    # step's items into their slots as one bucket step (ModelRunner.fold_records: ReplaySSM, RecoverSSM)
    fold: Callable[[dict[int, int], dict[int, int]], dict | None] | None = None
    # [T, hidden]: the main forward's final residual stream before model.norm, one row per packed token in the
    # items' order (None after a context-parallel prefill or a tree-only step): what a drafter
    # that reads the target's hidden states observes (kda_ref.engine.spec_steps.Speculation.observe)
    hidden: torch.Tensor | None = None

    @cached_property
    def batch(self) -> ForwardBatch:
        """The step's :class:`ForwardBatch` (a static step's is built when first asked for: only the
        tracer reads it)."""
        return self.make_batch()

    def verified_states(self, n: int, layers: list[int], upto: int | None = None,
                        pool: UnifiedMemoryPool | None = None,
                        recomputed: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The states after verified tokens ``0 .. upto-1`` of item ``n``, all KDA layers:
        ``(recurrent [L, layers, H, K, V], conv [L, layers, 3D, W-1])``, from the verify's per-token
        states, from the slots the step wrote them into (``pool``), or what the commit computed
        (``recomputed``, its :class:`Commit`'s: a ReplaySSM fold, RecoverSSM's closed form). Read only: the rollback strategies and
        :meth:`accepted_states` call it."""
        if recomputed and n in recomputed:
            rec = torch.stack([recomputed[n][layer][0] for layer in layers], dim=1)
            conv = torch.stack([recomputed[n][layer][1] for layer in layers], dim=1)
            return rec[:upto], conv[:upto]
        if self.spec[n].slots is not None:  # written into the request's slots by the step: read them there
            t, idx = pool.tensors, torch.tensor(self.spec[n].slots[:upto], dtype=torch.long)
            assert layers == list(t.kda_index), "the pools hold every KDA layer, in order"
            return t.recurrent[:, idx].transpose(0, 1), t.conv[:, idx].transpose(0, 1)  # [upto, layers, ...] copies
        idx = torch.tensor(self.spec[n].rows[:upto], dtype=torch.long)
        rec = torch.stack([self.step_states[layer].recurrent[idx] for layer in layers], dim=1)
        conv = torch.stack([self.step_states[layer].conv[idx] for layer in layers], dim=1)
        return rec, conv

    def accepted_states(self, kept: dict[int, int], pool: UnifiedMemoryPool, commit: Commit | None = None) -> dict:
        """The states strictly inside what each item keeps (``kept[n]`` verified tokens), as
        :class:`~kda_ref.model.output.BoundaryStates` per KDA layer: what a prefix cache may save
        from a speculative step -- never a state after a rejected draft (``commit``: the strategy's, for
        the states its commit computed)."""
        recomputed = commit.recomputed if commit is not None else {}
        items = [(n, k) for n, k in kept.items() if k > 1]
        if not items or not (self.step_states or recomputed or any(self.spec[n].slots for n, _ in items)):
            return {}
        layers = list(pool.config.kda_layer_ids)
        per = {n: self.verified_states(n, layers, k - 1, pool, recomputed) for n, k in items}
        out = {}
        for i, layer in enumerate(layers):
            out[layer] = BoundaryStates(
                seq_ids=torch.tensor([n for n, _ in items], dtype=torch.long),
                positions=[torch.arange(1, k) + self.spec[n].context for n, k in items],
                recurrent=torch.cat([per[n][0][:, i] for n, _ in items]),
                conv=torch.cat([per[n][1][:, i] for n, _ in items]))
        return out
