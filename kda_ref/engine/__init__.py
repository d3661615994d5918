"""The serving engine: requests, scheduler, model runner, and the ``LLM`` entry point."""

from .config import CacheConfig, EngineConfig, ParallelConfig, SchedulerConfig, StaticDecodeConfig
from .llm import LLM
from .request import OutputKind, Request, RequestDelta, RequestError, RequestOutput, RequestStatus, SamplingParams
from .scheduler import Scheduler, SchedulerOutput

__all__ = ["CacheConfig", "EngineConfig", "ParallelConfig", "SchedulerConfig", "StaticDecodeConfig", "LLM", "OutputKind", "Request", "RequestDelta", "RequestError", "RequestOutput", "RequestStatus", "SamplingParams", "Scheduler",
           "SchedulerOutput"]
