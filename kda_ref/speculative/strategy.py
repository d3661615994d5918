"""The interface every speculative rollback strategy implements: :class:`RollbackStrategy`, and the
:class:`Commit` its commit returns.

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``). A verify step runs ``1 + k`` tokens from the
committed state and the target keeps ``kept``; each strategy answers, for the engine (which never compares
names): what the verify keeps (``record``), the slots reserved at admission (``extra_slots``), the commit of a
kept run (``commit``: writes the pool, never the step's output or the requests), its rollback bytes, tree support.
Design notes: ``docs/spec_decode.md#rollback-strategies``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from ..model.verify_record import KEEP_STATES, VerifyRecord
from .replay import replay_conv


@dataclass(frozen=True)
class Commit:
    """What a strategy's commit did, for the engine to apply
    (:meth:`kda_ref.engine.spec_steps.Speculation.commit`): ``slots``, the slot item ``n``'s request
    continues from where that changed (``"slots"``: the slot of its last kept token; its other slots stay
    its own); ``recomputed``, the states the commit computed instead of reading them from the verify
    (ReplaySSM's fold, RecoverSSM's closed form: item -> {KDA layer: (states [kept], windows [kept])}),
    which the offer of the states inside the kept run to the prefix cache reads."""

    slots: dict[int, int] = field(default_factory=dict)
    recomputed: dict[int, dict] = field(default_factory=dict)


NOTHING = Commit()  # a commit that only wrote the pool


class RollbackStrategy(ABC):
    name: str = ""  # the spec_state it implements (traces, docs)
    record: VerifyRecord = KEEP_STATES
    supports_trees: bool = False  # a tree's siblings each need their parent's state

    def extra_slots(self, k: int) -> int:
        """State slots a request holds besides its active one, reserved at admission."""
        return 0

    @abstractmethod
    def commit(self, pool, out, kept: dict[int, int], requests: dict) -> Commit:
        """Make each verified item ``n`` continue from the state after its ``kept[n]`` verified tokens
        (the last committed token is token 0): write the pool, and return what else changed as a
        :class:`Commit` (:data:`NOTHING` when nothing did). ``out``: the step's
        :class:`~kda_ref.engine.step_output.StepOutput` (read only); ``requests[n]``: item ``n``'s
        request (read only)."""

    def rollback_bytes(self, pool, out, verified: dict[int, int], running: list) -> int:
        """Bytes this step keeps for rollback: ``verified[n]`` tokens of item ``n`` verified, ``running``
        the running requests. Default: the state after every verified token, during the step."""
        return sum(verified.values()) * pool.sizes.state_bytes

    def request_bytes(self, cfg, k: int, state_bytes: int) -> int:
        """Rollback storage of one request verifying ``k`` drafts of a model of config ``cfg`` (a
        :class:`~kda_ref.model.ModelConfig`), ``state_bytes`` one state of all its KDA layers (recurrent
        state and conv window). Default: a state after each of the ``1 + k`` verified tokens."""
        return (1 + k) * state_bytes


def write_state(pool, out, n: int, j: int, slot: int, recomputed: dict | None = None) -> None:
    """The state after verified token ``j`` of item ``n`` into ``slot`` (every KDA layer): from the
    verify's per-token states, or from what the commit computed (``recomputed``: a fold, a closed form)."""
    if recomputed and n in recomputed:
        layers = list(pool.config.kda_layer_ids)
        rec, conv = out.verified_states(n, layers, j + 1, recomputed=recomputed)
        pool.write_active(slot, rec[j], conv[j])
    else:  # one row of each layer's per-token states, copied layer by layer: nothing stacked
        row, st = out.spec[n].rows[j], out.step_states
        pool.write_active_layers(slot, ((st[layer].recurrent[row], st[layer].conv[row])
                                        for layer in pool.config.kda_layer_ids))


def trajectory_bytes(out, verified: dict[int, int]) -> int:
    """Bytes of the per-token records (:class:`~kda_ref.model.output.Trajectory`) a verify step kept for
    ``verified[n]`` tokens of each item: ReplaySSM's and RecoverSSM's :meth:`RollbackStrategy.rollback_bytes`."""
    per_token = sum(tr.bytes_per_token() for tr in out.trajectories.values())
    return sum(verified.values()) * per_token


def recompute_kept(pool, out, n: int, kept: int, slot: int, states_after) -> dict:
    """Item ``n``'s ``kept`` verified tokens rebuilt from the verify's per-token records over the committed
    state in ``slot`` (read, not written): every KDA layer's states and conv windows after each of them,
    ``{layer: (states [kept, HV, K, V], windows [kept, 3D, W-1])}``. ``states_after(state, record, rows)``
    is the strategy's rebuild of the states (ReplaySSM: the recurrence again; RecoverSSM: a closed form);
    the conv windows are the last ``W - 1`` conv inputs either way (vLLM's conv compaction)."""
    t = pool.tensors
    rows = torch.tensor(out.spec[n].rows[:kept], dtype=torch.long)
    states = {}
    for layer in pool.config.kda_layer_ids:
        tr, li = out.trajectories[layer], t.kda_index[layer]
        states[layer] = (states_after(t.recurrent[li, slot], tr, rows), replay_conv(t.conv[li, slot], tr.x[rows]))
    return states


def commit_recomputed(pool, out, kept: dict[int, int], slots: dict[int, int], states_after) -> Commit:
    """The commit of a strategy that keeps per-token records (ReplaySSM, RecoverSSM): every item's kept
    states rebuilt by ``states_after`` (:func:`recompute_kept`), the one after its last kept token written
    into ``slots[n]``; the rebuilt states go back in the :class:`Commit` for the prefix cache. After a
    static verify step the step output's ``fold`` does it as one fixed-shape bucket step instead (it
    rebuilds from whichever records the verify kept: inputs, or corrections)."""
    folded = out.fold(kept, slots) if out.fold is not None else None
    if folded is not None:  # one bucket step wrote the slots and gave the kept states
        return Commit(recomputed=folded)
    rebuilt = {n: recompute_kept(pool, out, n, k, slots[n], states_after) for n, k in kept.items()}
    for n, k in kept.items():
        write_state(pool, out, n, k - 1, slots[n], rebuilt)
    return Commit(recomputed=rebuilt)
