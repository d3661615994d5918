"""Which engine a model name means: the names ``--model`` takes (:data:`~kda_ref.server.flags.MODEL_NAMES`)
or a folder, turned into what :class:`~kda_ref.LLM` is given (vLLM's ``--model`` takes a Hugging Face name
or a path the same way). Both processes call it: ``kda-ref serve`` (the folder's chat template) and the
engine process (:class:`~kda_ref.server.engine_core.EngineCore`, which builds the engine), so it imports
neither the HTTP app nor torch until an engine is built."""

from __future__ import annotations

import os


def model_source(model: str):
    """What ``LLM`` is given for ``model`` (a name of :data:`~kda_ref.server.flags.MODEL_NAMES` or a
    folder), and the folder it comes from (None for a model built here: no chat template to look for).
    Called by :func:`load_llm`, and by ``kda-ref serve`` and ``kda-ref bench serve`` for the chat template
    and the vocabulary."""
    from ..model import ModelConfig
    from ..train import trained_path

    source = {"trained": lambda: trained_path(), "trained-k3": lambda: trained_path("k3"),
              "random-tiny": ModelConfig.tiny, "random-micro": ModelConfig.micro}.get(model, lambda: model)()
    return source, (source if isinstance(source, (str, os.PathLike)) else None)


def load_llm(model: str, kwargs: dict, live):
    """The engine for ``model`` (:func:`model_source`) built with the engine flags ``kwargs`` and the live
    trace ``live`` (a :class:`~kda_ref.server.live.LiveTrace` or None), and the folder it came from."""
    from ..engine import LLM

    source, folder = model_source(model)
    return LLM(source, tracer=live, **kwargs), folder
