"""``NgramDrafter``: prompt-lookup drafting, no draft model.

The drafter looks for the request's last ``n`` tokens earlier in its own tokens (prompt and output
so far), for ``n`` from ``prompt_lookup_max`` down to ``prompt_lookup_min``, and proposes the
tokens that followed that earlier occurrence. vLLM's ``NgramProposer``
(``vllm/v1/spec_decode/ngram_proposer.py``) drafts the same way; which occurrence wins is ours:
the most recent one, because recent text repeats most in chat and code.
"""

from __future__ import annotations


class NgramDrafter:
    def __init__(self, min_n: int = 1, max_n: int = 4):
        if min_n < 1 or max_n < min_n:
            raise ValueError(f"prompt_lookup_min / prompt_lookup_max: need 1 <= min <= max, got {min_n}, {max_n}")
        self.min_n, self.max_n = min_n, max_n

    def release(self, seq_id: int) -> None:
        """Nothing is kept per request."""

    def propose(self, seq_id: int, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens to follow ``tokens`` (``[]`` when no suffix n-gram recurs)."""
        if k < 1:
            return []
        T = len(tokens)
        for n in range(min(self.max_n, T - 1), self.min_n - 1, -1):
            suffix = tokens[T - n:]
            # the latest start i < T - n where tokens[i:i+n] == suffix, with at least one token after it
            for i in range(T - n - 1, -1, -1):
                if tokens[i:i + n] == suffix:
                    return tokens[i + n:i + n + k]
        return []
