"""``NgramDrafter``: prompt-lookup drafting, no draft model.

The drafter looks for the request's last ``n`` tokens earlier in its own tokens (prompt and output
so far), for ``n`` from ``prompt_lookup_max`` down to ``prompt_lookup_min``, and proposes the
tokens that followed that earlier occurrence. vLLM's ``NgramProposer``
(``vllm/v1/spec_decode/ngram_proposer.py``) drafts the same way; which occurrence wins is ours:
the most recent one, because recent text repeats most in chat and code.

The lookup is an index kept per request (:class:`NgramIndex`): every n-gram that has a token after
it, mapped to its latest start. Each step adds the n-grams the new tokens completed, so a proposal
costs a few dictionary lookups instead of a scan of the whole sequence (a scan took ~120 us per
step for a 300-token request here, about 4% of a decode step; vLLM compiles its scan with numba).
:func:`latest_match` is the scan, kept as the readable reference the index is tested against.
"""

from __future__ import annotations


def latest_match(tokens: list[int], n: int) -> int | None:
    """The latest start ``i < len(tokens) - n`` with ``tokens[i:i+n]`` equal to the last ``n`` tokens
    (so at least one token follows it), or None: the reference scan."""
    T = len(tokens)
    suffix = tokens[T - n:]
    for i in range(T - n - 1, -1, -1):
        if tokens[i:i + n] == suffix:
            return i
    return None


class NgramIndex:
    """``n-gram -> latest start`` over one request's tokens, for every ``n`` in ``[min_n, max_n]``,
    holding only n-grams that a token follows. Tokens only ever grow; :meth:`sync` adds what is new
    and rebuilds from scratch when the tokens are not an extension of what it indexed."""

    def __init__(self, min_n: int, max_n: int):
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []  # what is indexed (a copy)
        self.latest: dict[tuple[int, ...], int] = {}

    def sync(self, tokens: list[int]) -> None:
        done = len(self.tokens)
        if len(tokens) < done or tokens[:done] != self.tokens:  # not an extension: start over
            self.tokens, self.latest, done = [], {}, 0
        self.tokens.extend(tokens[done:])
        # token e (the end, exclusive) now follows the n-grams ending at e - 1: start e - n
        for e in range(max(done, 1), len(tokens)):
            for n in range(self.min_n, min(self.max_n, e) + 1):
                self.latest[tuple(tokens[e - n:e])] = e - n

    def match(self, n: int) -> int | None:
        """:func:`latest_match` of the indexed tokens."""
        T = len(self.tokens)
        if n > T - 1:
            return None
        return self.latest.get(tuple(self.tokens[T - n:]))


class NgramDrafter:
    def __init__(self, min_n: int = 1, max_n: int = 4):
        if min_n < 1 or max_n < min_n:
            raise ValueError(f"prompt_lookup_min / prompt_lookup_max: need 1 <= min <= max, got {min_n}, {max_n}")
        self.min_n, self.max_n = min_n, max_n
        self._index: dict[int, NgramIndex] = {}  # seq_id -> its index

    def release(self, seq_id: int) -> None:
        """Drop the request's index (it is rebuilt if the request drafts again)."""
        self._index.pop(seq_id, None)

    def propose(self, seq_id: int, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens to follow ``tokens`` (``[]`` when no suffix n-gram recurs)."""
        if k < 1:
            return []
        index = self._index.get(seq_id)
        if index is None:
            index = self._index[seq_id] = NgramIndex(self.min_n, self.max_n)
        index.sync(tokens)
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            i = index.match(n)
            if i is not None:
                return tokens[i + n:i + n + k]
        return []
