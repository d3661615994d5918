"""Every view of one engine step, built in one place for the pages that step through a whole trace.

    tv = TraceViews(header, events)          # a Lab run's, a Live window's or an uploaded trace
    shown = tv.at(tv.index_of(step), "zh")   # the figures and tables of that engine step

The Lab and the Live page draw what :meth:`TraceViews.at` returns and nothing else. Steps are named by
the engine's own step number (``StepView.step``); ``index`` is only the position in :attr:`views`.

Design notes: ``docs/visualizer.md#stepping-through-a-trace``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go

from ..scenarios import engine_trace as et
from . import checkpoint_tree as ct_fig
from . import hybrid_chain as cf
from . import lab as lab_fig
from . import pool_map as pm_fig
from . import verify_step as vs_fig


@dataclass
class StepFigures:
    """What a page draws for one engine step (figures, table rows, markdown lines)."""

    step: int  # the engine's step number
    summary: str
    batch: go.Figure
    batch_rows: list[dict]
    grid: go.Figure
    timeline: go.Figure
    pool_area: go.Figure
    pool_strip: go.Figure
    pool_events: list[str]
    cache_lines: list[str]
    cache: go.Figure | None = None  # the radix tree or the block table at this step (None: no snapshot yet)
    cache_picture: int | None = None  # which snapshot (index), for the caption
    verify: go.Figure | None = None  # this step's verifies (None: the step verified nothing)
    verify_rows: list[dict] = field(default_factory=list)


class TraceViews:
    """A trace read once for stepping: :attr:`views` (one per engine step that ran a forward), the
    layer layout, the fixed axes and phases, and the cache snapshots the header carries
    (:attr:`cache_error`: the reader's :class:`~model_viz.scenarios.engine_trace.TraceError` when
    they are malformed; the other views still draw)."""

    def __init__(self, header: dict, events: list):
        self.header, self.events = header, events
        self.views = et.engine_steps(events)
        self.kda_layers, self.mla_layers = et.layer_layout(header, events)
        self.phases = cf.trace_phases(self.views)
        self.x_max = cf.token_axis_max(self.views)
        self.unit_sizes, self.budget = pm_fig.unit_bytes(header, self.views), pm_fig.budget_of(self.views)
        self.cache_error: et.TraceError | None = None
        self.trees, self.blocks = [], []
        try:
            self.trees = lab_fig.tree_steps(header, events)
            self.blocks = [] if self.trees else lab_fig.read_block_steps(header)
        except et.TraceError as err:
            self.cache_error = err
        self.tree_layout = ct_fig.layout(self.trees) if self.trees else None
        self.verifies = lab_fig.verify_events(events)

    @property
    def steps(self) -> list[int]:
        """The engine's step numbers of :attr:`views`, in order (what the step slider offers)."""
        return [v.step for v in self.views]

    def index_of(self, step: int) -> int:
        """The position of engine step ``step`` (the nearest earlier one when it ran no forward)."""
        steps = self.steps
        return max((j for j, s in enumerate(steps) if s <= step), default=0)

    def snapshot_at(self, step: int) -> int | None:
        """The cache snapshot to show at ``step``: the one whose steps include it (a Lab turn), else the
        last one taken before it (a Live snapshot after a request finished), else None (none yet)."""
        spans = [s.steps if hasattr(s, "steps") else s["steps"] for s in (self.trees or self.blocks)]
        inside = [j for j, (a, b) in enumerate(spans) if a <= step <= b]
        if inside:
            return inside[0]
        return max((j for j, (a, b) in enumerate(spans) if b <= step), default=None)

    def _cache_figure(self, k: int | None) -> go.Figure | None:
        if k is None:
            return None
        if self.trees:
            return ct_fig.tree_figure(self.trees, k, self.tree_layout)
        return lab_fig.block_figure(self.blocks[k])

    def at(self, index: int) -> StepFigures:
        """Every view of ``views[index]`` in the current language."""
        view = self.views[index]
        k = self.snapshot_at(view.step)
        out = StepFigures(
            step=view.step, summary=cf.step_summary(view),
            batch=cf.batch_figure(view, self.x_max), batch_rows=cf.batch_rows(view),
            grid=cf.kernel_grid_figure(view, self.kda_layers, self.mla_layers, phases=self.phases),
            timeline=cf.timeline_figure(self.views, index),
            pool_area=pm_fig.pool_area_figure(self.views, index),
            pool_strip=pm_fig.budget_strip_figure(view, self.unit_sizes, self.budget),
            pool_events=pm_fig.step_events(view),
            cache_lines=lab_fig.cache_lines(self.events, view.step),
            cache=self._cache_figure(k), cache_picture=k)
        if view.verifies:
            out.verify, out.verify_rows = vs_fig.verify_step_figure(view), vs_fig.verify_rows(view)
        return out
