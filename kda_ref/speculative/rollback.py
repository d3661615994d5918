"""``RollbackStrategy``: how a request's KDA state survives a rejected draft -- one object per strategy.

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``). A verify step runs ``1 + k`` tokens
(the last committed token and ``k`` drafts) from the committed state; the target keeps ``kept`` of them.
A KV cache would truncate; a KDA state must instead become the state after exactly the kept tokens.
Each strategy answers, for the engine (which never compares their names):

* :attr:`~RollbackStrategy.record` -- what the verify forward keeps per KDA layer
  (:mod:`kda_ref.model.verify_record`);
* :meth:`~RollbackStrategy.extra_slots` -- the state slots a request holds besides its active one,
  reserved at admission;
* :meth:`~RollbackStrategy.commit` -- the commit of every verified item's kept run into its slot,
  returning what it did as a :class:`Commit` (the slot a request continues from, the states a fold
  computed): it writes the pool, never the step's output or the requests;
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
ReplaySSM's fixed-shape fold after a static verify step is the step output's own ``fold`` (the runner
attaches it), so no engine object has to be handed to a strategy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from ..model.verify_record import KEEP_INPUTS, KEEP_STATES, WRITE_SLOTS, VerifyRecord
from .replay import replay, replay_conv


@dataclass(frozen=True)
class Commit:
    """What a strategy's commit did, for the engine to apply
    (:meth:`kda_ref.engine.speculation.Speculation.commit`): ``slots``, the slot item ``n``'s request
    continues from where that changed (``"slots"``: the slot of its last kept token; its other slots stay
    its own); ``replayed``, the states a ReplaySSM fold computed (item -> {KDA layer: (states [kept],
    windows [kept])}), which the offer of the states inside the kept run to the prefix cache reads."""

    slots: dict[int, int] = field(default_factory=dict)
    replayed: dict[int, dict] = field(default_factory=dict)


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


def write_state(pool, out, n: int, j: int, slot: int, replayed: dict | None = None) -> None:
    """The state after verified token ``j`` of item ``n`` into ``slot`` (every KDA layer): from the
    verify's per-token states, or from what a fold or replay computed (``replayed``)."""
    if replayed and n in replayed:
        layers = list(pool.config.kda_layer_ids)
        rec, conv = out.verified_states(n, layers, j + 1, replayed=replayed)
        pool.write_active(slot, rec[j], conv[j])
    else:  # one row of each layer's per-token states, copied layer by layer: nothing stacked
        row, st = out.spec[n].rows[j], out.step_states
        pool.write_active_layers(slot, ((st[layer].recurrent[row], st[layer].conv[row])
                                        for layer in pool.config.kda_layer_ids))


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
        slots = {n: requests[n].slot for n in kept}
        folded = out.fold(kept, slots) if out.fold is not None else None
        if folded is not None:  # one fixed-shape bucket step wrote the slots and gave the kept states
            return Commit(replayed=folded)
        replayed = {n: _replay_item(pool, out, n, k, slots[n]) for n, k in kept.items()}
        for n, k in kept.items():
            write_state(pool, out, n, k - 1, slots[n], replayed)
        return Commit(replayed=replayed)

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
