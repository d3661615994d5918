"""Serving the engine to clients (``docs/serving.md``).

* :mod:`.loop` -- ``EngineLoop``: one thread owns the engine and runs every step; client threads submit
  requests (bounded admission) and read their tokens as they come; step observers watch it.
* :mod:`.protocol`, :mod:`.chat`, :mod:`.text`, :mod:`.openai_api`, :mod:`.app` -- the OpenAI-compatible
  ASGI app: request bodies checked field by field, chat templates, detokenising with stop strings, the
  completion / chat responses whole or streamed, the routes.
* :mod:`.metrics`, :mod:`.live` -- ``/metrics`` (Prometheus) and the live trace ring the Live page reads,
  both step observers of the loop.
* :mod:`.serve` -- ``kda-ref serve`` and the in-process ``ServerThread``; :mod:`.load` -- the load
  generator of ``kda-ref bench serve``.

Only :mod:`.loop` is imported here: the HTTP parts need the ``serve`` extra (Starlette, uvicorn,
prometheus-client).
"""

from .loop import EngineLoop, LoopStopped, Overloaded, StepObserver, Stream, StreamTimes

__all__ = ["EngineLoop", "LoopStopped", "Overloaded", "StepObserver", "Stream", "StreamTimes"]
