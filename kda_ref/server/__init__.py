"""Serving the engine to clients: :mod:`.loop` -- one thread owns the engine and runs every step, client
threads submit requests and read their tokens as they come (the foundation of the OpenAI-compatible
server)."""

from .loop import EngineLoop, LoopStopped, Overloaded, StepObserver, Stream, StreamTimes

__all__ = ["EngineLoop", "LoopStopped", "Overloaded", "StepObserver", "Stream", "StreamTimes"]
