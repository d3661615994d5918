"""The "memory pool map" page (``docs/article.md#s5-5``): the pool by page kind over time, and who owns which unit.

Built from a trace's ``pool_snapshot``, ``kv_page`` / ``state_slot`` and ``preemption`` events; no Streamlit
here, the figures are in :mod:`model_viz.figures.pool_map`: :func:`pool_area_figure`,
:func:`budget_strip_figure`, :func:`unit_map_figure`, and :func:`demand_rows` /
:func:`~model_viz.figures.pool_map.demand_figure` (from :meth:`kda_ref.engine.scheduler.Scheduler.demand`).

Design notes: ``docs/visualizer.md#the-pool-map-figures``.
"""

from __future__ import annotations
from ..scenarios.engine_trace import PROMPT_LENS


# the canned scenario: 4 requests, room for 3 states and a few KV pages, so someone gets preempted
STATE_SLOTS = 3
PAGE_OPTIONS = (5, 6, 7, 8, 10)
DEFAULT_PAGES = 6
TOKEN_BUDGET = 32
MAX_TOKENS = 8


def scenario(num_pages: int, model: str = "kimi_linear") -> dict:
    """Keyword arguments of :func:`model_viz.scenarios.engine_trace.run_scenario` for the canned run of
    ``model``'s tiny model (:mod:`model_viz.families`) with a budget of exactly ``STATE_SLOTS`` states +
    ``num_pages`` KV pages (of that model's sizes)."""
    from kda_ref.memory import unit_sizes

    from ..families import family
    from ..scenarios.engine_trace import PAGE_SIZE

    sizes = unit_sizes(family(model).small(), PAGE_SIZE)
    return dict(prompt_lens=PROMPT_LENS, token_budget=TOKEN_BUDGET, max_tokens=MAX_TOKENS, model=model,
                memory_budget_bytes=STATE_SLOTS * sizes.state_bytes + num_pages * sizes.kv_page_bytes)


def released_units(model: str = "kimi_linear") -> dict:
    """The pool's unit sizes at the released model of ``model`` (Kimi-Linear-48B or Kimi K3, as served:
    fp32 state, bf16 conv and KV) with the page's page size: ``state_bytes`` (one state slot, every KDA
    layer) and ``kv_page_bytes`` (one KV page, every MLA layer)."""
    import torch

    from kda_ref.memory import unit_sizes

    from ..families import family
    from ..scenarios.engine_trace import PAGE_SIZE

    u = unit_sizes(family(model).real(), PAGE_SIZE, torch.bfloat16)
    return {"state_bytes": u.state_bytes, "kv_page_bytes": u.kv_page_bytes}


# what one request pins under other settings (labels: i18n keys), against the page's budget
DEMAND_SETTINGS = (
    ("pool_map.demand.plain", {}),
    ("pool_map.demand.radix", {"prefix_cache": "radix"}),
    ("pool_map.demand.sglang", {"prefix_cache": "radix", "checkpoint_policy": "sglang"}),
    ("pool_map.demand.block", {"prefix_cache": "block", "retention_interval": 0}),
    ("pool_map.demand.slots", {"speculative": "ngram", "spec_state": "slots", "num_speculative_tokens": 3}),
)


def demand_rows(num_pages: int, model: str = "kimi_linear") -> tuple[int, list[dict]]:
    """``(budget, rows)``: for each of :data:`DEMAND_SETTINGS`, the peak of the canned run's longest
    request (``label``: i18n key, ``parts``: ``[(what, page kind, bytes)]``, ``bytes``, ``fits`` the
    budget of ``num_pages``, ``message``: the engine's own refusal when it does not fit)."""
    from kda_ref import LLM

    from ..scenarios import common as cs

    budget = scenario(num_pages, model)["memory_budget_bytes"]
    tokens, built, rows = max(PROMPT_LENS) + MAX_TOKENS, cs.small_model(model), []
    for label, kw in DEMAND_SETTINGS:
        demand = LLM(built, **kw, memory_budget_bytes=64 << 20).scheduler.demand(tokens)
        message = None
        try:
            LLM(built, **kw, memory_budget_bytes=budget).check_request(list(range(1, tokens - MAX_TOKENS + 1)),
                                                                       cs.params(MAX_TOKENS))
        except ValueError as e:  # the engine refuses it: at build (ConfigError) or when queued (RequestError)
            message = str(e)
        rows.append({"label": label, "parts": [(p.what, p.kind, p.bytes) for p in demand.parts],
                     "bytes": demand.bytes, "fits": demand.bytes <= budget, "message": message})
        cs.require((message is None) == (demand.bytes <= budget), f"{label}: the engine's refusal and its count differ")
    return budget, rows


def accepted_labels(rows: list[dict]) -> list[str]:
    """The labels of :func:`demand_rows`' settings the engine accepts at the page's budget: what the
    page shows first (the refused ones stay selectable)."""
    return [r["label"] for r in rows if r["fits"]]
