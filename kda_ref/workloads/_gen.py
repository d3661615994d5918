"""Building blocks for the generators: parameter resolution and validation, seeded token and
structure sources, and turning draft requests (with arrival times) into a :class:`Workload`."""

from __future__ import annotations

import hashlib
import heapq
import math
import random

import torch

from .core import MAX_ARRIVAL_S, Workload, WorkloadError, WorkloadRequest, WorkloadTypeError

SCALES = ("tiny", "large")
MIN_THINK_S = 1e-3  # a dependent request arrives at least this long after its parent
_ARRIVAL_DECIMALS = 6  # arrival times are rounded to the microsecond (short, exact JSON)


# ---------------------------------------------------------------------------- parameters
def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_int(name: str, v, lo: int) -> int:
    if not _is_int(v):
        raise WorkloadTypeError(f"{name}: expected an integer, got {type(v).__name__} {v!r}")
    if v < lo:
        raise WorkloadError(f"{name}: must be >= {lo}, got {v}")
    return int(v)


def check_range(name: str, v, lo: int) -> list[int]:
    """An int ``n`` (exactly n) or a pair ``(lo, hi)`` (uniform in [lo, hi]); returns ``[lo, hi]``."""
    if _is_int(v):
        a = b = v
    elif isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_int(x) for x in v):
        a, b = v
    else:
        raise WorkloadTypeError(f"{name}: expected an integer or a pair of integers (lo, hi), "
                                f"got {v!r}")
    if a < lo:
        raise WorkloadError(f"{name}: must be >= {lo}, got {v!r}")
    if a > b:
        raise WorkloadError(f"{name}: lower bound {a} is above upper bound {b}")
    return [int(a), int(b)]


def check_float(name: str, v, lo: float, strict: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise WorkloadTypeError(f"{name}: expected a number, got {type(v).__name__} {v!r}")
    v = float(v)
    if not math.isfinite(v) or (v <= lo if strict else v < lo):
        raise WorkloadError(f"{name}: must be a finite number {'>' if strict else '>='} {lo}, "
                            f"got {v}")
    return v


def check_choice(name: str, v, options: tuple[str, ...]) -> str:
    if v not in options:
        raise WorkloadError(f"{name}: must be one of {list(options)}, got {v!r}")
    return v


# kind -> checker; every generator parameter has one of these kinds
KINDS = {
    "count": lambda n, v: check_int(n, v, 1),
    "count0": lambda n, v: check_int(n, v, 0),
    "len": lambda n, v: check_range(n, v, 1),
    "len0": lambda n, v: check_range(n, v, 0),
    "rate": lambda n, v: check_float(n, v, 0.0, strict=True),
    "time": lambda n, v: check_float(n, v, 0.0, strict=False),
    "order": lambda n, v: check_choice(n, v, ("bfs", "dfs")),
}


def resolve(family: str, spec: dict, defaults: dict, given: dict, *, seed, num_requests,
            vocab_size, scale, session_count: str | None = None) -> dict:
    """Validate the common arguments, fill ``None`` parameters from the scale's defaults and check
    every parameter. ``session_count`` names the parameter that sets how many sessions there are:
    it stays ``None`` (= as many sessions as ``num_requests`` needs) when ``num_requests`` is given
    and it is not."""
    if not _is_int(seed):
        raise WorkloadTypeError(f"seed: expected an integer, got {type(seed).__name__} {seed!r}")
    if num_requests is not None:
        check_int("num_requests", num_requests, 1)
    check_int("vocab_size", vocab_size, 1)
    check_choice("scale", scale, SCALES)
    params = {"scale": scale, "vocab_size": vocab_size, "num_requests": num_requests}
    for name, kind in spec.items():
        v = given[name]
        if v is None:
            if name == session_count and num_requests is not None:
                params[name] = None
                continue
            v = defaults[scale][name]
        params[name] = KINDS[kind](name, v)
    return params


# ---------------------------------------------------------------------------- randomness
def _derive(family: str, seed: int, what: str) -> str:
    return f"kda_ref.workloads:{family}:{seed}:{what}"


class Source:
    """Seeded randomness for one workload: ``rng`` (``random.Random``) for the structure (lengths,
    choices, arrival gaps) and a ``torch.Generator`` for token ids, drawn in large chunks so that
    millions of tokens cost milliseconds."""

    CHUNK = 1 << 18

    def __init__(self, family: str, seed: int, vocab_size: int):
        self.rng = random.Random(_derive(family, seed, "structure"))  # str seeds hash via SHA-512
        tseed = int.from_bytes(hashlib.sha256(_derive(family, seed, "tokens").encode()).digest()[:8],
                               "little")
        self.gen = torch.Generator().manual_seed(tseed)
        self.vocab = vocab_size
        self._buf: list[int] = []
        self._pos = 0
        self._next_gap: float | None = None  # drawn by peek_gap, returned by the next gap

    def tokens(self, n: int) -> tuple[int, ...]:
        """``n`` fresh token ids, uniform in ``[0, vocab_size)``."""
        if n <= 0:
            return ()
        if self._pos + n > len(self._buf):
            rest = self._buf[self._pos:]
            fresh = torch.randint(0, self.vocab, (max(self.CHUNK, n),), generator=self.gen)
            self._buf = rest + fresh.tolist()
            self._pos = 0
        out = tuple(self._buf[self._pos:self._pos + n])
        self._pos += n
        return out

    def length(self, r: list[int]) -> int:
        return r[0] if r[0] == r[1] else self.rng.randint(r[0], r[1])

    def span(self, r: list[int]) -> tuple[int, ...]:
        """Fresh tokens, as many as a draw from the length range ``r``."""
        return self.tokens(self.length(r))

    def gap(self, rate_per_s: float) -> float:
        """Poisson inter-arrival time (the one :meth:`peek_gap` drew, if it did)."""
        g = self.peek_gap(rate_per_s)
        self._next_gap = None
        return g

    def peek_gap(self, rate_per_s: float) -> float:
        """The next :meth:`gap`, drawn now and kept for it: where a family decides whether another session
        starts (its start time) before starting it. The draws keep their order."""
        if self._next_gap is None:
            self._next_gap = self.rng.expovariate(rate_per_s)
        return self._next_gap

    def think(self, think_time_s: float) -> float:
        """Delay between a request and the dependent one that follows it (exponential with mean
        ``think_time_s``, at least :data:`MIN_THINK_S`)."""
        t = self.rng.expovariate(1.0 / think_time_s) if think_time_s > 0 else 0.0
        return max(MIN_THINK_S, t)


# ---------------------------------------------------------------------------- drafts -> Workload
class Drafts:
    """Requests as generated (in generation order), before sorting by arrival."""

    def __init__(self):
        self.arrival: list[float] = []
        self.prompt: list[tuple] = []
        self.output: list[tuple] = []
        self.session: list[str] = []
        self.parent: list[int | None] = []
        self._earliest: list[float] | None = None  # the n earliest arrivals, negated (a max-heap): nth_arrival
        self._n = 0

    def __len__(self) -> int:
        return len(self.arrival)

    def nth_arrival(self, n: int) -> float:
        """The ``n``-th earliest arrival so far (``n <= len(self)``), kept up to date by :meth:`add` once
        asked (a heap of the ``n`` earliest), so that a family asking it before every session pays once."""
        if self._earliest is None or self._n != n:
            self._earliest, self._n = [-a for a in heapq.nsmallest(n, self.arrival)], n
            heapq.heapify(self._earliest)
        return -self._earliest[0]

    def add(self, arrival: float, prompt: tuple, output: tuple, session: str,
            parent: int | None = None) -> int:
        arrival = round(arrival, _ARRIVAL_DECIMALS)
        if not 0 <= arrival <= MAX_ARRIVAL_S:  # the bound load() holds files to; nan and inf fail it too
            raise WorkloadError(f"arrival_s: a request would arrive at {arrival:.6g} s, past the {MAX_ARRIVAL_S:.0e} s "
                                f"a workload may span; raise rate_per_s or lower think_time_s")
        if parent is not None and arrival <= self.arrival[parent]:  # pragma: no cover - invariant
            raise AssertionError("a dependent request must arrive after its parent")
        self.arrival.append(arrival)
        if self._earliest is not None and arrival < -self._earliest[0]:
            heapq.heapreplace(self._earliest, -arrival)
        self.prompt.append(prompt)
        self.output.append(output)
        self.session.append(session)
        self.parent.append(parent)
        return len(self.arrival) - 1

    def finish(self, family: str, seed: int, params: dict, cap: int | None) -> Workload:
        """Sort by arrival (ties: generation order), keep the first ``cap``, renumber parents."""
        arr = self.arrival
        order = sorted(range(len(arr)), key=lambda i: (arr[i], i))
        if cap is not None:
            order = order[:cap]
        new_id = {old: new for new, old in enumerate(order)}
        reqs = []
        for new, old in enumerate(order):
            p = self.parent[old]
            reqs.append(WorkloadRequest(new, arr[old], self.prompt[old], self.output[old],
                                        self.session[old], None if p is None else new_id[p]))
        return Workload(family, seed, params, reqs)
