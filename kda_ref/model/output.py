"""Typed results of a forward pass: the logits, and what the KDA layers recorded on the way.

Flags of the :class:`~kda_ref.model.batch.ForwardBatch` ask a forward of :class:`~kda_ref.model.HybridModel`
to keep more than logits: chunk-start states (``return_chunk_states``; SGLang's tracked ``h``, vLLM's
former ``mamba_cache_mode="all"``), per-token states or a :class:`Trajectory` (``verify``), gates (``probe``).
Each KDA layer returns a :class:`LayerRecord`; the model gathers them into one :class:`ForwardOutput`
keyed by model layer index. Nothing is written into the batch object. Design notes: ``docs/model.md#forward-outputs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class BoundaryStates:
    """One KDA layer's states at token boundaries inside a forward.

    Boundaries are listed sequence by sequence (the order of ``seq_ids``), each sequence's in
    increasing position; ``recurrent[r]`` and ``conv[r]`` describe the same boundary ``r`` (the
    boundary-consistency rule: recurrent state and conv window taken after the same token)."""

    seq_ids: torch.Tensor  # [n] batch positions of the sequences that recorded
    positions: list[torch.Tensor]  # n tensors: the absolute token boundaries of each (tokens before the state)
    recurrent: torch.Tensor  # [nb, HV, K, V] fp32, nb = total number of boundaries
    conv: torch.Tensor  # [nb, 3D, W-1] the short-conv window (last W-1 q|k|v inputs) at each boundary

    def __len__(self) -> int:
        return self.recurrent.shape[0]


@dataclass
class GateProbe:
    """One KDA layer's per-token kernel inputs over a forward's packed tokens: the gates, and the
    key and value each token wrote (after the short conv; keys l2-normalised), so a reader can
    replay or invert the recurrence (:func:`kda_ref.state_trace.recover_backwards`)."""

    g: torch.Tensor  # [T, H, K] fp32 per-channel log decay
    beta: torch.Tensor  # [T, H] write strength
    k: torch.Tensor  # [T, H, K] l2-normalised keys
    v: torch.Tensor  # [T, H, V] values


@dataclass
class Trajectory:
    """One KDA layer's per-token record of the verify segments of a forward, kept instead of per-token
    states, from which the state after any prefix of a segment can be rebuilt:

    * ReplaySSM's (the ``KEEP_INPUTS`` record): the short conv's input row and the recurrence's
      ``k, v, g, beta`` -- folded through the recurrence again after acceptance;
    * RecoverSSM's (``KEEP_CORRECTIONS``): the conv input row, ``k``, ``g`` and the correction ``u`` the
      recurrence wrote, ``u_t = beta_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)`` -- summed in closed form
      after acceptance (:mod:`kda_ref.speculative.recoverssm`); ``v`` and ``beta`` are not needed.

    Rows are in the order of the segments' tokens (sequence by sequence, as ``seq_ids``)."""

    seq_ids: torch.Tensor  # [n] batch positions of the verify sequences
    x: torch.Tensor  # [T, 3D] conv inputs (q | k | v projections before the short conv)
    k: torch.Tensor  # [T, H, K] l2-normalised keys
    g: torch.Tensor  # [T, HV, K] log decay
    v: torch.Tensor | None = None  # [T, HV, V] values (ReplaySSM)
    beta: torch.Tensor | None = None  # [T, HV] (ReplaySSM)
    u: torch.Tensor | None = None  # [T, HV, V] fp32 corrections (RecoverSSM)

    FIELDS = ("x", "k", "g", "v", "beta", "u")  # the per-token tensors, in a fixed order

    def tensors(self) -> list[torch.Tensor]:
        """The per-token tensors it holds, in :attr:`FIELDS` order (a captured step's outputs)."""
        return [t for t in (getattr(self, f) for f in self.FIELDS) if t is not None]

    def map(self, fn, seq_ids: torch.Tensor | None = None) -> "Trajectory":
        """The same record with ``fn`` applied to every per-token tensor (a static step's live rows)."""
        kept = {f: fn(getattr(self, f)) for f in self.FIELDS if getattr(self, f) is not None}
        return Trajectory(seq_ids=self.seq_ids if seq_ids is None else seq_ids, **kept)

    def bytes_per_token(self) -> int:
        return sum(t[0].numel() * t.element_size() for t in self.tensors())


@dataclass
class LayerRecord:
    """What one KDA layer recorded in one forward (``None`` where it was not asked)."""

    chunk_states: BoundaryStates | None = None
    step_states: BoundaryStates | None = None
    trajectory: Trajectory | None = None
    probe: GateProbe | None = None


@dataclass
class ForwardOutput:
    """The result of :meth:`HybridModel.forward_batch` / :meth:`HybridModel.forward_output`."""

    logits: torch.Tensor  # "all": [T, vocab]; "last": [N, vocab]; "none": final hidden states [T, hidden]
    chunk_states: dict[int, BoundaryStates] = field(default_factory=dict)  # KDA layer -> chunk-start states
    step_states: dict[int, BoundaryStates] = field(default_factory=dict)  # KDA layer -> per-token states (verify)
    probes: dict[int, GateProbe] = field(default_factory=dict)  # KDA layer -> gates (probe)
    trajectories: dict[int, Trajectory] = field(default_factory=dict)  # KDA layer -> verify records (Replay/RecoverSSM)
    # [T, hidden]: the final residual stream of every packed token before model.norm (what an MTP layer reads,
    # kda_ref.model.mtp), set by the forward paths and the static buckets (the step's own tensor, no copy)
    hidden: torch.Tensor | None = None
    # [2, rows] int64, when the step computed it (a static step, kda_ref.engine.static_decode): the greedy
    # token of every logits row, and 1 where the row is all finite -- read back with one host transfer
    greedy: torch.Tensor | None = None

    def add(self, layer: int, record: LayerRecord | None) -> None:
        if record is None:
            return
        if record.chunk_states is not None:
            self.chunk_states[layer] = record.chunk_states
        if record.step_states is not None:
            self.step_states[layer] = record.step_states
        if record.probe is not None:
            self.probes[layer] = record.probe
        if record.trajectory is not None:
            self.trajectories[layer] = record.trajectory
