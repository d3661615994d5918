"""``Sequence``: what the pool and the prefix caches see of a request.

A request of the engine (:class:`kda_ref.engine.Request`) adds sampling parameters, timing and
outputs to this; the cost-model simulator (:mod:`kda_ref.sim`) drives the caches with bare
sequences. Keeping the caches on this small type is what lets the simulator run the engine's cache
code without depending on the engine (nano-vllm's ``Sequence``; vLLM's ``Request`` carries ``num_computed_tokens`` and
``block_hashes``, its block ids kept by the KV-cache manager's ``req_to_blocks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Sequence:
    req_id: int
    prompt_token_ids: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0  # tokens whose KV / state are in the cache
    slot: int | None = None  # the active KDA state slot (``state_indices`` entry)
    pages: list[int] = field(default_factory=list)  # MLA KV pages (the ``block_table`` row)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_slice(self, start: int, stop: int) -> list[int]:
        """``all_token_ids[start:stop]`` without building the whole list (a decode step asks for one token
        of a long request: the cost is the slice's, not the request's length)."""
        n = len(self.prompt_token_ids)
        if stop <= n:
            return self.prompt_token_ids[start:stop]
        if start >= n:
            return self.output_token_ids[start - n:stop - n]
        return self.prompt_token_ids[start:] + self.output_token_ids[:stop - n]

    def token_at(self, i: int) -> int:
        """Token ``i`` of the prompt followed by the output (``all_token_ids[i]`` without building the list)."""
        n = len(self.prompt_token_ids)
        return self.prompt_token_ids[i] if i < n else self.output_token_ids[i - n]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)
