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

* :mod:`.flags`, :mod:`.http` -- the command line (checked before torch loads) and the connection bounds.

Nothing is imported here until asked (PEP 562): ``kda-ref serve``'s flags are parsed by :mod:`.flags`
before torch loads, and the HTTP parts need the ``serve`` extra (Starlette, uvicorn, prometheus-client).
"""

__all__ = ["EngineLoop", "LoopStopped", "Overloaded", "StepObserver", "Stream", "StreamTimes"]


def __getattr__(name: str):
    if name in __all__:
        from . import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
