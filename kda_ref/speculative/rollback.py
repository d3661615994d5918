"""The rollback strategies of the references (registered by name in :data:`~kda_ref.speculative.config.STRATEGIES`).

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``); the interface is
:class:`~kda_ref.speculative.strategy.RollbackStrategy`. :class:`PerStepStates` (``"per_step"``, SGLang's
``intermediate_ssm`` buffers), :class:`StateSlots` (``"slots"``, vLLM's ``spec_state_indices_tensor``),
:class:`ReplaySSM` (``"replay"``); RecoverSSM lives in :mod:`.recoverssm`. Any subclass may be passed as
``spec_state=``. Design notes: ``docs/spec_decode.md#rollback-strategies``.
"""

from __future__ import annotations

from ..model.verify_record import KEEP_INPUTS, KEEP_STATES, WRITE_SLOTS
from .recoverssm import RecoverSSM
from .replay import replay
from .strategy import NOTHING, Commit, RollbackStrategy, commit_recomputed, trajectory_bytes, write_state

__all__ = ["Commit", "NOTHING", "RollbackStrategy", "write_state", "PerStepStates", "StateSlots", "ReplaySSM",
           "RecoverSSM", "PER_STEP", "SLOTS", "REPLAY", "RECOVER", "replay_record_bytes"]


def replay_record_bytes(cfg) -> int:
    """ReplaySSM's record of one token, all KDA layers, fp32: the conv input (``q | k | v`` projections)
    and ``k``, ``v``, ``g`` (``H x K`` each) and ``beta`` (``H``)."""
    H, K, n = cfg.linear_num_heads, cfg.linear_head_dim, len(cfg.kda_layer_ids)
    return n * 4 * (3 * H * K + H * K + H * K + H * K + H)


class PerStepStates(RollbackStrategy):
    name = "per_step"
    record = KEEP_STATES
    supports_trees = True

    def commit(self, pool, out, kept, requests):
        for n, k in kept.items():
            write_state(pool, out, n, k - 1, requests[n].slot)
        return NOTHING


class StateSlots(RollbackStrategy):
    name = "slots"
    record = WRITE_SLOTS

    def extra_slots(self, k: int) -> int:
        return k  # vLLM allocates num_spec + 1 state blocks per request

    def commit(self, pool, out, kept, requests):
        for n in kept:
            req = requests[n]
            if out.spec[n].slots is None:  # a step mixing this verify with other work returned the states
                rec, conv = out.verified_states(n, list(pool.config.kda_layer_ids))  # [1 + k, layers, ...]
                pool.write_actives(req.spec_slots[:rec.shape[0]], rec, conv)
        # each request continues from the slot of its last kept token: nothing copied
        return Commit(slots={n: requests[n].spec_slots[k - 1] for n, k in kept.items()})

    def rollback_bytes(self, pool, out, verified, running):
        return sum(len(r.spec_slots) for r in running) * pool.sizes.state_bytes  # held all the time


class ReplaySSM(RollbackStrategy):
    name = "replay"
    record = KEEP_INPUTS

    def commit(self, pool, out, kept, requests):
        return commit_recomputed(pool, out, kept, {n: requests[n].slot for n in kept}, _fold)

    def rollback_bytes(self, pool, out, verified, running):
        return trajectory_bytes(out, verified)  # inputs, no states

    def request_bytes(self, cfg, k, state_bytes):
        return (1 + k) * replay_record_bytes(cfg)


def _fold(state, tr, rows):
    """The states after each of a request's kept tokens, folded from their inputs
    (:func:`kda_ref.speculative.replay.replay`)."""
    return replay(state, tr.k[rows], tr.v[rows], tr.g[rows], tr.beta[rows], all_steps=True)


# the strategies :data:`~kda_ref.speculative.config.STRATEGIES` registers by name
PER_STEP, SLOTS, REPLAY, RECOVER = PerStepStates(), StateSlots(), ReplaySSM(), RecoverSSM()
