"""What a speculative verify step keeps of every KDA layer, so that a rejected draft can be rolled back.

A KDA state cannot roll back by truncation (``docs/article.md#s2-2``). One object per kind, asked by the
model (no strategy name compared): :data:`KEEP_STATES` (SGLang's ``intermediate_ssm``), :data:`WRITE_SLOTS`
(vLLM's one state block per position), :data:`KEEP_INPUTS` (SGLang's ReplaySSM), :data:`KEEP_CORRECTIONS`
(vLLM's RecoverSSM for Kimi K3). Which one a step uses is the rollback strategy's choice
(:class:`kda_ref.speculative.RollbackStrategy`). Design notes: ``docs/model.md#verify-records``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops.pad_rows import write_rows
from .output import BoundaryStates, LayerRecord, Trajectory


@dataclass(frozen=True)
class VerifyRecord:
    """A kind of verify record. ``keeps_step_states``: the recurrence keeps the state after every token
    (:meth:`~kda_ref.ops.dispatcher.KDAKernelDispatcher.verify_`'s ``keep_step_states``);
    ``writes_slots``: the fused verify step writes those states into the slots of
    ``DecodePlan.verify_slots`` in place and returns none; ``keeps_corrections``: the recurrence stores
    every token's correction ``u_t`` (the verify kernels' ``corrections`` buffer)."""

    name: str
    keeps_step_states: bool = True
    writes_slots: bool = False
    keeps_corrections: bool = False

    def record(self, rows, steps: torch.Tensor | None, windows, inputs: tuple, conv_pool: torch.Tensor,
               rec_pool: torch.Tensor, plan=None) -> LayerRecord | None:
        """One KDA layer's record of a verify step over ``T`` tokens: ``rows`` (the step's
        :class:`~kda_ref.model.kda_layer.VerifyRows`), ``steps [T, H, K, V]`` the state after every token,
        ``windows()`` the conv window after every token ``[T, 3D, W-1]`` (built only when asked),
        ``inputs = (x, k, v, g, beta, u)`` each token's kernel inputs and correction (``u`` ``None`` unless
        :attr:`keeps_corrections`); ``plan.verify_slots``: where :data:`WRITE_SLOTS` writes them."""
        if not self.keeps_step_states:
            x, k, v, g, beta, u = inputs
            if self.keeps_corrections:  # RecoverSSM: v and beta are already inside u
                return LayerRecord(trajectory=Trajectory(seq_ids=rows.seq_ids, x=x, k=k, g=g, u=u))
            return LayerRecord(trajectory=Trajectory(seq_ids=rows.seq_ids, x=x, k=k, g=g, v=v, beta=beta))
        if self.writes_slots and plan is not None and plan.verify_slots is not None:
            write_rows(rec_pool, plan.verify_slots, steps, plan.pad)  # every token's state into its own slot
            write_rows(conv_pool, plan.verify_slots, windows(), plan.pad)
            return None
        return LayerRecord(step_states=BoundaryStates(seq_ids=rows.seq_ids, positions=rows.positions,
                                                      recurrent=steps, conv=windows().to(conv_pool.dtype)))


KEEP_STATES = VerifyRecord("states")
WRITE_SLOTS = VerifyRecord("slots", writes_slots=True)
KEEP_INPUTS = VerifyRecord("trajectory", keeps_step_states=False)
KEEP_CORRECTIONS = VerifyRecord("corrections", keeps_step_states=False, keeps_corrections=True)
VERIFY_RECORDS = (KEEP_STATES, WRITE_SLOTS, KEEP_INPUTS, KEEP_CORRECTIONS)


def verify_record(record: VerifyRecord | str) -> VerifyRecord:
    """``record`` itself, or the record of that name (``"states"``, ``"slots"``, ``"trajectory"``,
    ``"corrections"``): what
    :class:`~kda_ref.model.batch.ForwardBatch` accepts as ``verify_keep``."""
    if isinstance(record, VerifyRecord):
        return record
    found = next((r for r in VERIFY_RECORDS if r.name == record), None)
    if found is None:
        raise ValueError(f"verify_keep: must be a VerifyRecord or one of {[r.name for r in VERIFY_RECORDS]}, "
                         f"got {record!r}")
    return found
