"""``RollbackStrategy``: how a request's KDA state survives a rejected draft -- one object per strategy.

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``). A verify step runs ``1 + k`` tokens
(the last committed token and ``k`` drafts) from the committed state; the target keeps ``kept`` of them.
A KV cache would truncate; a KDA state must instead become the state after exactly the kept tokens.
Each strategy answers, for the engine (which never compares their names):

* :attr:`~RollbackStrategy.record` -- what the verify forward keeps per KDA layer
  (:mod:`kda_ref.model.verify_record`);
* :meth:`~RollbackStrategy.extra_slots` -- the state slots a request holds besides its active one,
  reserved at admission;
* :meth:`~RollbackStrategy.commit` -- the commit of every verified item's kept run into its slot;
* :meth:`~RollbackStrategy.rollback_bytes` -- the storage it keeps for rollback in a step;
* :attr:`~RollbackStrategy.supports_trees` -- whether a draft tree can be verified with it;
* the states it offers the prefix caches after the commit (every strategy can give the states inside
  the kept run: :meth:`kda_ref.engine.runner.StepOutput.accepted_states` reads them where it left them).

The three of the references:

* :class:`PerStepStates` (``spec_state="per_step"``): the verify keeps the state after every token
  (SGLang's ``intermediate_ssm`` buffers); the commit copies the kept one into the request's slot;
* :class:`StateSlots` (``"slots"``): each request owns ``1 + k`` slots; the verify writes token t's state
  into slot t (vLLM's ``spec_state_indices_tensor``); the commit only switches the active slot;
* :class:`ReplaySSM` (``"replay"``): the verify keeps each token's inputs; the commit folds the kept
  tokens into the committed state (SGLang's ReplaySSM; in fixed shapes after a static verify step).

A strategy is a public policy hook: ``LLM(speculative=..., spec_state=MyStrategy())`` takes any
subclass (the app's broken-rollback demonstration commits the state after *every* draft that way).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from ..model.verify_record import KEEP_INPUTS, KEEP_STATES, WRITE_SLOTS, VerifyRecord
from .replay import replay, replay_conv


class RollbackStrategy(ABC):
    name: str = ""  # the spec_state it implements (traces, docs)
    record: VerifyRecord = KEEP_STATES
    supports_trees: bool = False  # a tree's siblings each need their parent's state

    def extra_slots(self, k: int) -> int:
        """State slots a request holds besides its active one, reserved at admission."""
        return 0

    @abstractmethod
    def commit(self, pool, out, kept: dict[int, int], requests: dict, fold=None) -> None:
        """Make each verified item ``n`` continue from the state after its ``kept[n]`` verified tokens
        (the last committed token is token 0). ``out``: the step's
        :class:`~kda_ref.engine.runner.StepOutput`; ``requests[n]``: item ``n``'s request; ``fold``: the
        runner's fixed-shape fold (:meth:`kda_ref.engine.runner.ModelRunner.fold_replay`), for the
        strategies that fold."""

    def rollback_bytes(self, pool, out, verified: dict[int, int], running: list) -> int:
        """Bytes this step keeps for rollback: ``verified[n]`` tokens of item ``n`` verified, ``running``
        the running requests. Default: the state after every verified token, during the step."""
        return sum(verified.values()) * pool.sizes.state_bytes


def write_state(pool, out, n: int, j: int, slot: int) -> None:
    """The state after verified token ``j`` of item ``n`` into ``slot`` (every KDA layer): from the
    verify's per-token states, or from what a fold or replay left (``out.replayed``)."""
    if n in out.replayed:
        layers = list(pool.config.kda_layer_ids)
        rec, conv = out.verified_states(n, layers, j + 1)
        pool.write_active(slot, rec[j], conv[j])
    else:  # one row of each layer's per-token states, copied layer by layer: nothing stacked
        row, st = out.spec[n].rows[j], out.step_states
        pool.write_active_layers(slot, ((st[layer].recurrent[row], st[layer].conv[row])
                                        for layer in pool.config.kda_layer_ids))


class PerStepStates(RollbackStrategy):
    name = "per_step"
    record = KEEP_STATES
    supports_trees = True

    def commit(self, pool, out, kept, requests, fold=None):
        for n, k in kept.items():
            write_state(pool, out, n, k - 1, requests[n].slot)


class StateSlots(RollbackStrategy):
    name = "slots"
    record = WRITE_SLOTS

    def extra_slots(self, k: int) -> int:
        return k  # vLLM allocates num_spec + 1 state blocks per request

    def commit(self, pool, out, kept, requests, fold=None):
        for n, k in kept.items():
            req = requests[n]
            if out.spec[n].slots is None:  # a step mixing this verify with other work returned the states
                rec, conv = out.verified_states(n, list(pool.config.kda_layer_ids))  # [1 + k, layers, ...]
                pool.write_actives(req.spec_slots[:rec.shape[0]], rec, conv)
            req.slot = req.spec_slots[k - 1]  # continue from the slot of the last kept token: nothing copied

    def rollback_bytes(self, pool, out, verified, running):
        return sum(len(r.spec_slots) for r in running) * pool.sizes.state_bytes  # held all the time


class ReplaySSM(RollbackStrategy):
    name = "replay"
    record = KEEP_INPUTS

    def commit(self, pool, out, kept, requests, fold=None):
        slots = {n: requests[n].slot for n in kept}
        folded = fold(out, kept, slots) if fold is not None and out.static_fold else None
        if folded is not None:  # one fixed-shape bucket step wrote the slots and gave the kept states
            out.replayed.update(folded)
            return
        for n, k in kept.items():
            out.replayed[n] = _replay_item(pool, out, n, k, slots[n])
            write_state(pool, out, n, k - 1, slots[n])

    def rollback_bytes(self, pool, out, verified, running):
        per_token = sum(tr.bytes_per_token() for tr in out.trajectories.values())  # inputs, no states
        return sum(verified.values()) * per_token


def _replay_item(pool, out, n: int, kept: int, slot: int) -> dict:
    """Item ``n``'s ``kept`` tokens folded from its inputs over the state in ``slot`` (read, not written):
    every KDA layer's states and conv windows after each of them (:func:`kda_ref.speculative.replay`)."""
    t = pool.tensors
    rows = torch.tensor(out.spec[n].rows[:kept], dtype=torch.long)
    states = {}
    for layer in pool.config.kda_layer_ids:
        tr, li = out.trajectories[layer], t.kda_index[layer]
        steps = replay(t.recurrent[li, slot], tr.k[rows], tr.v[rows], tr.g[rows], tr.beta[rows], all_steps=True)
        states[layer] = (steps, replay_conv(t.conv[li, slot], tr.x[rows]))
    return states


STRATEGIES: dict[str, RollbackStrategy] = {s.name: s for s in (PerStepStates(), StateSlots(), ReplaySSM())}


def rollback_strategy(state: str | RollbackStrategy) -> RollbackStrategy:
    """The strategy named ``state`` (``"per_step"``, ``"slots"``, ``"replay"``), or ``state`` itself."""
    if isinstance(state, RollbackStrategy):
        return state
    if not isinstance(state, str) or state not in STRATEGIES:
        raise ValueError(f"spec_state: must be one of {tuple(STRATEGIES)} or a RollbackStrategy, got {state!r}")
    return STRATEGIES[state]
