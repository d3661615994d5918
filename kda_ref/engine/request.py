"""Requests, sampling parameters and outputs (nano-vllm's ``Sequence`` / vLLM's ``Request``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

import torch


class RequestError(ValueError):
    """A request the engine cannot take (names the argument); nothing in flight is affected."""


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0  # 0 -> greedy
    top_k: int = 0  # 0 -> no top-k filter
    seed: int | None = None  # per-request sampling seed (temperature > 0)
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    return_logits: bool = False  # keep the logits of every generated token (for tests and the app)

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise RequestError(f"max_tokens: must be an int >= 1, got {self.max_tokens!r}")
        if not isinstance(self.temperature, (int, float)) or not self.temperature >= 0:
            raise RequestError(f"temperature: must be >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise RequestError(f"top_k: must be an int >= 0, got {self.top_k!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise RequestError(f"seed: must be an int or None, got {self.seed!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))


class RequestStatus(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass
class Request:
    req_id: int
    prompt_token_ids: list[int]
    params: SamplingParams
    prompt_text: str | None = None
    output_token_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose KV / state are in the cache
    slot: int | None = None  # KDA state slot
    pages: list[int] = field(default_factory=list)  # MLA KV pages (the block table)
    shared_len: int = 0  # leading KV units owned by the prefix cache (not freed by the request)
    cache_node: object = None  # the radix node whose path the request keeps locked
    branching_len: int | None = None  # where the prefix cache asked for a checkpoint (branch policy)
    finish_reason: str | None = None
    num_preemptions: int = 0
    arrival_time: float = field(default_factory=time.perf_counter)
    first_token_time: float | None = None
    finish_time: float | None = None
    logits: list[torch.Tensor] = field(default_factory=list)
    generator: torch.Generator | None = None

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status in (RequestStatus.FINISHED, RequestStatus.ABORTED)


@dataclass
class RequestOutput:
    req_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str | None
    finish_reason: str | None
    metrics: dict
    logits: torch.Tensor | None = None  # [len(token_ids), vocab] when asked for

    @classmethod
    def from_request(cls, req: Request, text: str | None) -> "RequestOutput":
        end = req.finish_time or time.perf_counter()
        metrics = {
            "prompt_tokens": len(req.prompt_token_ids),
            "output_tokens": len(req.output_token_ids),
            "preemptions": req.num_preemptions,
            "ttft_s": None if req.first_token_time is None else req.first_token_time - req.arrival_time,
            "latency_s": end - req.arrival_time,
        }
        logits = torch.stack(req.logits) if req.logits else None
        return cls(req.req_id, list(req.prompt_token_ids), list(req.output_token_ids), text, req.finish_reason,
                   metrics, logits)
