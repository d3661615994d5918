"""Requests, sampling parameters and outputs (nano-vllm's ``Sequence`` / vLLM's ``Request``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

import torch

from ..cache.sequence import Sequence


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


@dataclass(eq=False, kw_only=True)
class Request(Sequence):
    """A request of the engine: the :class:`~kda_ref.cache.Sequence` the pool and the prefix caches
    see (token ids, computed count, state slot, block table) plus sampling, status and metrics."""

    params: SamplingParams
    prompt_text: str | None = None
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: str | None = None
    error: str | None = None  # why the request failed (finish_reason == "error")
    num_preemptions: int = 0
    arrival_time: float = field(default_factory=time.perf_counter)
    first_token_time: float | None = None
    finish_time: float | None = None
    logits: list[torch.Tensor] = field(default_factory=list)
    generator: torch.Generator | None = None


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
