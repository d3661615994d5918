"""What the parent of the worker processes checks before it routes a request: everything
:meth:`kda_ref.LLM.check_request` checks, without an engine.

:func:`request_checker` builds the engine's own :class:`~kda_ref.engine.request_check.RequestChecker`
from configurations (the memory budget from :func:`~kda_ref.engine.demand.config_demand`): no weights
are loaded and no pool is allocated. :func:`check_model_args` runs, when the disaggregation is built,
the argument checks that need no model. Design notes: ``docs/disaggregation.md#across-processes``.
"""

from __future__ import annotations

from pathlib import Path

from ..engine import EngineConfig
from ..engine.demand import config_demand
from ..engine.llm import DEFAULT_CHUNK
from ..engine.request_check import RequestChecker
from ..model import HybridModel, ModelConfig
from ..model.config import checkpoint_folder
from ..model.size import check_fits


def model_config_of(model) -> ModelConfig:
    """The :class:`~kda_ref.model.ModelConfig` of what ``LLM`` takes as ``model``: a built model's, a
    checkpoint folder's ``config.json`` (read, not its weights), the one given, or the tiny one for
    ``None``. Refused as ``LLM`` refuses it."""
    if isinstance(model, HybridModel):
        return model.config
    if isinstance(model, (str, Path)):
        return ModelConfig.from_json(checkpoint_folder(model, "model"))
    mc = ModelConfig.tiny() if model is None else model
    if not isinstance(mc, ModelConfig):
        raise ValueError(f"model: expected a ModelConfig, HybridModel or checkpoint folder, got {type(model).__name__}")
    return mc


def check_model_args(model, mc: ModelConfig, config: EngineConfig) -> None:
    """What ``LLM`` checks of ``model`` (whose configuration is ``mc``) against ``config`` before it
    builds or loads anything: the chunk size, backend and device the configuration asks for, and that
    the model and the smallest pool fit this machine."""
    if isinstance(model, HybridModel):
        config.check_model(model.dispatcher.chunk_size, model.backend, model.lm_head.weight.device.type)
        return
    config.check_model(config.chunk_size or DEFAULT_CHUNK, config.backend or "torch")
    check_fits(mc, page_size=config.cache.pool_page_size)


def request_checker(model, config: EngineConfig, tokenizer="auto") -> RequestChecker:
    """The :class:`~kda_ref.engine.request_check.RequestChecker` of the engines ``LLM(model, config=config,
    tokenizer=tokenizer)`` would build, from the model's configuration and ``config`` alone (the budget
    too: :func:`~kda_ref.engine.demand.config_demand`); ``model`` and ``config`` checked as
    :func:`check_model_args` does. ``tokenizer="auto"`` leaves the tokenizer to be told
    (:meth:`~kda_ref.engine.request_check.RequestChecker.use_tokenizer`) by the workers."""
    mc = model_config_of(model)
    check_model_args(model, mc, config)
    max_len = config.scheduler.max_model_len or mc.max_position_embeddings
    chunk = model.dispatcher.chunk_size if isinstance(model, HybridModel) else config.chunk_size or DEFAULT_CHUNK
    budget = dict(demand=config_demand(mc, config, chunk), budget_bytes=config.cache.memory_budget_bytes)
    if tokenizer == "auto":
        return RequestChecker(mc, max_len, tokenizer_known=False, **budget)
    if tokenizer is not None and not (hasattr(tokenizer, "encode") and hasattr(tokenizer, "decode")):
        raise ValueError(f"tokenizer: needs encode() and decode(), got {type(tokenizer).__name__}")
    return RequestChecker(mc, max_len, tokenizer, "tokenizer=None was given", **budget)
