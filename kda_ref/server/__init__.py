"""Serving the engine to clients (``docs/serving.md``).

:mod:`.loop` (the engine's one thread), :mod:`.engine_core` / :mod:`.core_client` (the engine in a process
of its own), the OpenAI-compatible ASGI app (:mod:`.protocol`, :mod:`.chat`, :mod:`.openai_api`,
:mod:`.app`), its observers (:mod:`.metrics`, :mod:`.live`), :mod:`.serve` and :mod:`.flags` (``kda-ref
serve``), :mod:`.load` (``kda-ref bench serve``'s load generator).

Nothing is imported here until asked (PEP 562): ``kda-ref serve``'s flags are parsed by :mod:`.flags`
before torch loads, and the HTTP parts need the ``serve`` extra (Starlette, uvicorn, prometheus-client).
Design notes (the module map): ``docs/serving.md#8-the-code-module-by-module``.
"""

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".loop": ["EngineLoop", "LoopStopped", "Overloaded", "StepObserver", "Stream", "StreamTimes"],
})
