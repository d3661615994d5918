"""The serving engine: requests, scheduler, model runner, and the ``LLM`` entry point."""

from .llm import LLM
from .request import Request, RequestError, RequestOutput, RequestStatus, SamplingParams
from .scheduler import Scheduler, SchedulerOutput

__all__ = ["LLM", "Request", "RequestError", "RequestOutput", "RequestStatus", "SamplingParams", "Scheduler",
           "SchedulerOutput"]
