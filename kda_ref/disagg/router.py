"""Which prefill and which decode instance take a request.

Like SGLang's PD load balancer (``mini_lb.py::MiniLoadBalancer.select_pair`` @001c2ae0, gone from 0.5.23: a random pair
joined by a ``bootstrap_room``), :class:`Router` picks both when the request arrives, but the
least-loaded of each side; a prompt that continues a state a decode instance holds goes straight to
it (article 9.3, cross-instance reuse). Design notes:
``docs/disaggregation.md#what-is-built-2026-12-01`` (``router.py``), ``docs/disaggregation.md#cross-instance-reuse``.
"""

from __future__ import annotations

import collections


class Router:
    def __init__(self, num_prefill: int, num_decode: int, decode_caches_states: bool, history: int = 256):
        self.prefill_load = [0] * num_prefill  # requests routed to each and not yet handed off
        self.decode_load = [0] * num_decode  # requests routed to each and not yet finished
        self.alive = [True] * num_prefill
        self.caches = decode_caches_states
        # per decode instance, token sequences whose final state it holds in its prefix cache, newest last
        self._held = [collections.deque(maxlen=history) for _ in range(num_decode)]

    @staticmethod
    def _least(load: list[int], ok=None) -> int:
        cands = [i for i in range(len(load)) if ok is None or ok[i]]
        return min(cands, key=lambda i: load[i])

    def continued_on(self, ids: list[int]) -> int | None:
        """The decode instance holding a state ``ids`` continues (a strict prefix of it), else None."""
        if not self.caches:
            return None
        for j, held in enumerate(self._held):
            if any(len(t) < len(ids) and tuple(ids[:len(t)]) == t for t in held):
                return j
        return None

    def any_prefill(self) -> bool:
        return any(self.alive)

    def pick(self, ids: list[int]) -> tuple[int | None, int]:
        """``(prefill instance or None, decode instance)`` for a new request: None when the decode
        instance continues a state it holds (or no prefill instance is left)."""
        j = self.continued_on(ids)
        if j is not None or not self.any_prefill():
            j = self._least(self.decode_load) if j is None else j
            self.decode_load[j] += 1
            return None, j
        i, j = self._least(self.prefill_load, self.alive), self._least(self.decode_load)
        self.prefill_load[i] += 1
        self.decode_load[j] += 1
        return i, j

    def unpick(self, i: int | None, j: int) -> None:
        """Undo :meth:`pick`'s ``(i, j)``: the request never reached its instances (its submission failed)."""
        if i is not None:
            self.prefill_load[i] -= 1
        self.decode_load[j] -= 1

    def handed_off(self, i: int) -> None:
        self.prefill_load[i] -= 1

    def finished(self, j: int, tokens: list[int] | None) -> None:
        """A request finished on decode instance ``j``; ``tokens`` (prompt + output) when its state stays there."""
        self.decode_load[j] -= 1
        self.hold(j, tokens)

    def hold(self, j: int, tokens: list[int] | None) -> None:
        """Decode instance ``j`` now holds the state after ``tokens`` in its prefix cache."""
        if self.caches and tokens:
            self._held[j].append(tuple(tokens))
