"""``NgramDrafter``: prompt-lookup drafting, no draft model.

The request's last ``n`` tokens (``prompt_lookup_max`` down to ``prompt_lookup_min``) are looked up earlier in
its own tokens, the most recent occurrence first (vLLM takes the longest match and, among equals, the
earliest), through a per-request index (:class:`NgramIndex`);
:func:`latest_match` is the reference scan the index is tested against. vLLM:
``vllm/v1/spec_decode/ngram_proposer.py::NgramProposer``. Design notes: ``docs/spec_decode.md#prompt-lookup``.
"""

from __future__ import annotations

from ..utils.limits import MAX_PROMPT_LOOKUP
from .drafter import Drafter
from .tree import DraftTree


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
    """``min_n``-gram -> the starts of its occurrences that a token follows (ascending), over one
    request's tokens. Tokens only ever grow; :meth:`sync` adds what is new and rebuilds from scratch
    when the tokens are not an extension of what it indexed."""

    def __init__(self, min_n: int, max_n: int):
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []  # what is indexed (a copy)
        self.starts: dict[tuple[int, ...], list[int]] = {}

    def sync(self, tokens: list[int]) -> None:
        done = len(self.tokens)
        if len(tokens) < done or tokens[:done] != self.tokens:  # not an extension: start over
            self.tokens, self.starts, done = [], {}, 0
        self.tokens.extend(tokens[done:])
        n = self.min_n
        # token e (exclusive end) follows the min_n-gram ending at e - 1, which starts at e - n
        for e in range(max(done, n), len(tokens)):
            self.starts.setdefault(tuple(tokens[e - n:e]), []).append(e - n)

    def _occurrences(self):
        """``(n, start)`` for every earlier occurrence of the last ``min_n`` tokens (with a token after
        it), latest first, ``n`` its match with the suffix extended backwards up to ``max_n``."""
        t, lo, T = self.tokens, self.min_n, len(self.tokens)
        if T - 1 < lo:
            return
        for i in reversed(self.starts.get(tuple(t[T - lo:]), ())):
            m = lo  # extend the match backwards: t[i - (m - lo) : i + lo] == t[T - m :]
            while m < self.max_n and i - (m - lo) > 0 and t[i - (m - lo) - 1] == t[T - m - 1]:
                m += 1
            yield m, i - (m - lo)

    def longest_match(self) -> tuple[int, int] | None:
        """``(n, start)``: the longest suffix length ``n`` in ``[min_n, max_n]`` that occurred earlier
        with a token after it, and the latest such occurrence -- what :func:`latest_match` gives for
        ``n = max_n, max_n - 1, ...``, the first that exists -- or None."""
        best = None
        for m, start in self._occurrences():  # the latest first
            if best is None or m > best[0]:  # a tie keeps the later occurrence, found first
                best = (m, start)
                if m == self.max_n:
                    break
        return best

    def ranked_matches(self) -> list[tuple[int, int]]:
        """Every occurrence as ``(n, start)``, longer matches first, the latest first within a length:
        the order in which :func:`kda_ref.speculative.tree.ngram_tree` meets new continuations."""
        return sorted(self._occurrences(), key=lambda x: -x[0])  # stable: latest first within a length


class NgramDrafter(Drafter):
    """A :class:`~kda_ref.speculative.drafter.Drafter`: prompt lookup over the request's own tokens."""

    supports_trees = True
    looks_up_suffixes = True  # takes prompt_lookup_min / prompt_lookup_max

    @classmethod
    def build(cls, spec, draft_model=None, max_tokens: int = 0, target=None) -> "NgramDrafter":
        """The drafter ``speculative="ngram"`` asks for (:func:`~kda_ref.speculative.drafters.make_drafter`)."""
        return cls(spec.prompt_lookup_min, spec.prompt_lookup_max)

    def __init__(self, min_n: int = 1, max_n: int = 4):
        if not 1 <= min_n <= max_n <= MAX_PROMPT_LOOKUP:
            raise ValueError(f"prompt_lookup_min / prompt_lookup_max: need 1 <= min <= max <= {MAX_PROMPT_LOOKUP}, "
                             f"got {min_n}, {max_n}")
        self.min_n, self.max_n = min_n, max_n
        self._index: dict[int, NgramIndex] = {}  # seq_id -> its index

    def release(self, seq_id: int) -> None:
        """Drop the request's index (it is rebuilt if the request drafts again)."""
        self._index.pop(seq_id, None)

    def _synced(self, seq_id: int, tokens: list[int]) -> NgramIndex:
        index = self._index.get(seq_id)
        if index is None:
            index = self._index[seq_id] = NgramIndex(self.min_n, self.max_n)
        index.sync(tokens)
        return index

    def propose(self, seq_id: int, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens to follow ``tokens`` (``[]`` when no suffix n-gram recurs)."""
        if k < 1:
            return []
        match = self._synced(seq_id, tokens).longest_match()
        if match is None:
            return []
        n, i = match
        return tokens[i + n:i + n + k]

    def propose_tree(self, seq_id: int, tokens: list[int], k: int, width: int) -> DraftTree:
        """Up to ``width`` distinct continuations of at most ``k`` tokens merged into a tree -- longer
        suffix matches first, the latest occurrence first within a length -- as the reference scan
        :func:`kda_ref.speculative.tree.ngram_tree` finds them (empty when nothing recurs)."""
        chains: list[list[int]] = []
        if k >= 1 and width >= 1:
            for n, i in self._synced(seq_id, tokens).ranked_matches():
                cont = tokens[i + n:i + n + k]
                if cont not in chains:
                    chains.append(cont)
                    if len(chains) == width:
                        break
        return DraftTree.from_chains(chains)
