"""What the parent of the worker processes checks before it routes a request: everything
:meth:`kda_ref.LLM.check_request` checks, without an engine.

:func:`request_checker` builds the engine's own :class:`~kda_ref.engine.request_check.RequestChecker`
from configurations (the memory budget from :func:`~kda_ref.engine.demand.config_demand`): no weights
are loaded and no pool is allocated; the model and configuration checked by the engine's own
:func:`~kda_ref.engine.llm.check_model_args`. Design notes: ``docs/disaggregation.md#across-processes``.
"""

from __future__ import annotations

from ..engine import EngineConfig
from ..engine.demand import config_demand
from ..engine.llm import DEFAULT_CHUNK, check_model_args, model_config_of
from ..engine.request_check import RequestChecker
from ..model import HybridModel


def request_checker(model, config: EngineConfig, tokenizer="auto") -> RequestChecker:
    """The :class:`~kda_ref.engine.request_check.RequestChecker` of the engines ``LLM(model, config=config,
    tokenizer=tokenizer)`` would build, from the model's configuration and ``config`` alone (the budget
    too: :func:`~kda_ref.engine.demand.config_demand`); ``model`` and ``config`` checked as
    :func:`~kda_ref.engine.llm.check_model_args` does. ``tokenizer="auto"`` leaves the tokenizer to be told
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
