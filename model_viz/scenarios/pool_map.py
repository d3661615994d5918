"""The "memory pool map" page (``docs/article.md#s5-5``): the pool by page kind over time, and who owns which unit.

Built from a trace's ``pool_snapshot`` events (bytes by kind and the owner of every allocated unit,
at the end of each step), its ``kv_page`` / ``state_slot`` alloc and free events and its
``preemption`` events. No Streamlit here; the figures are in
:mod:`model_viz.figures.pool_map`.

* :func:`pool_area_figure` — used bytes by kind, stacked, over the steps; y fixed at the budget;
  preemptions marked; the current step highlighted.
* :func:`budget_strip_figure` — the budget as one bar at the selected step, every allocated unit a
  segment as wide as its bytes (state slots from the left, KV pages from the right, free space in
  between): the *accounting* view of one shared budget.
* :func:`unit_map_figure` — every state slot and KV page id as a square, coloured by its owner.
"""

from __future__ import annotations
from ..scenarios.engine_trace import PROMPT_LENS


# the canned scenario: 4 requests, room for 3 states and a few KV pages, so someone gets preempted
STATE_SLOTS = 3
PAGE_OPTIONS = (5, 6, 7, 8, 10)
DEFAULT_PAGES = 6
TOKEN_BUDGET = 32
MAX_TOKENS = 8


def scenario(num_pages: int) -> dict:
    """Keyword arguments of :func:`model_viz.scenarios.engine_trace.run_scenario` for the canned run with a
    budget of exactly ``STATE_SLOTS`` states + ``num_pages`` KV pages."""
    from kda_ref.memory import unit_sizes
    from kda_ref.model import ModelConfig

    from ..scenarios.engine_trace import PAGE_SIZE

    sizes = unit_sizes(ModelConfig.tiny(), PAGE_SIZE)
    return dict(prompt_lens=PROMPT_LENS, token_budget=TOKEN_BUDGET, max_tokens=MAX_TOKENS,
                memory_budget_bytes=STATE_SLOTS * sizes.state_bytes + num_pages * sizes.kv_page_bytes)
