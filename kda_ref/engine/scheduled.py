"""What one step runs: the scheduler's decision, handed to the model runner as plain data.

A :class:`ScheduledItem` is one request's share of the step (its new tokens, where they start, any
drafts or draft tree to verify); a :class:`SchedulerOutput` is the step (vLLM's ``SchedulerOutput``,
SGLang's ``ScheduleBatch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..speculative.tree import DraftTree
from .request import Request


@dataclass
class ScheduledItem:
    req: Request
    num_new_tokens: int  # tokens the forward runs for the request (its known ones, then any drafts)
    start: int  # = req.num_computed_tokens when scheduled
    drafts: list[int] = field(default_factory=list)  # speculative: draft tokens verified after the last known one
    context_parallel: bool = False  # the rest of the prompt, prefilled by the context-parallel ranks (alone)
    tree: DraftTree | None = None  # speculative, tree drafts: the root (this decode item) and the nodes, one forward

    @property
    def completes(self) -> bool:
        """After this step every known token of the request is in the cache: sample the next one."""
        return self.start + self.num_new_tokens - len(self.drafts) == self.req.num_tokens

    @property
    def is_decode(self) -> bool:
        return (self.num_new_tokens == 1 and self.start > 0 and self.completes and bool(self.req.output_token_ids)
                and not self.drafts)


@dataclass
class SchedulerOutput:
    items: list[ScheduledItem] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    cache_hits: list[tuple[int, int]] = field(default_factory=list)  # (req_id, reused prefix tokens)
    refused: list[Request] = field(default_factory=list)  # finished with an error while scheduling (no memory, stall)
    token_budget: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(it.num_new_tokens for it in self.items)
