"""Charts show what they are about: an axis follows its data (a 512-token or 64 MiB budget does not flatten
1-token decode steps or 1 MiB of use), the budget is still marked, labels fit, a long run has a readable
number of step ticks, every policy of the hit-rate chart is visible, and Plotly's toolbar stays off every
title (:mod:`model_viz.figures.frame`, applied to every chart by :func:`model_viz.ui.page_parts.chart`)."""

from __future__ import annotations

import re

import pytest

from model_viz.figures import checkpoint_density as dn_fig
from model_viz.figures import checkpoint_tree as ct_fig
from model_viz.figures import frame
from model_viz.figures import hybrid_chain as cf
from model_viz.figures import pool_map as pm_fig
from model_viz.figures import step_views
from model_viz.scenarios import checkpoint_tree as ct
from model_viz.scenarios import engine_trace as et
from model_viz.scenarios import pool_map as pm
from model_viz.i18n import in_language


@pytest.fixture(scope="module")
def decode_run():
    """Three short prompts under a 512-token step budget and a 64 MiB pool, 80 tokens each: one prefill step
    of 40 tokens, then ~80 decode steps of 3 tokens; the pool holds well under 1 MiB."""
    header, events = et.parse_trace(et.run_scenario([12, 20, 8], token_budget=512, max_tokens=80))
    return header, events, et.engine_steps(events)


@pytest.fixture(scope="module")
def tight_run():
    """The pool-map page's scenario: a pool small enough to preempt, a 16-token budget the batches fill."""
    header, events = et.parse_trace(et.run_scenario(**pm.scenario(pm.DEFAULT_PAGES)))
    return header, events, et.engine_steps(events)


def _hlines(fig) -> list[float]:
    return [s.y0 for s in fig.layout.shapes if s.type == "line" and s.y0 == s.y1]


def _notes(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


# ---- 1. tokens per step -----------------------------------------------------------------------------
def test_timeline_axis_follows_the_batches_not_a_far_budget(decode_run):
    header, events, views = decode_run
    top = max(v.batch.num_tokens for v in views)
    assert top == 40 and min(v.batch.num_tokens for v in views) <= 3
    for fig in (cf.timeline_figure(views, 5), in_language("en", step_views.TraceViews(header, events).at, 5).timeline):
        lo, hi = fig.layout.yaxis.range
        assert lo == 0 and top <= hi <= top * 1.1  # not 512 * 1.08: a 3-token bar is ~7 % of the axis, not 0.5 %
        assert not _hlines(fig)  # the budget is far above: no line off the axis ...
        (note,) = [a for a in fig.layout.annotations if "512" in a.text]  # ... but named at the top
        assert note.yref == "paper" and note.y == 1.0 and note.yanchor == "bottom"


def test_timeline_draws_a_near_budget_as_a_line(tight_run):
    _, _, views = tight_run
    budget = cf.trace_budget(views)
    fig = in_language("zh", cf.timeline_figure, views, 0)
    assert budget and _hlines(fig) == [budget]
    assert fig.layout.yaxis.range[1] >= budget and any(str(budget) in n for n in _notes(fig))


# ---- 2. the memory pool ---------------------------------------------------------------------------
def test_pool_area_axis_follows_the_use_not_a_64_mib_budget(decode_run):
    header, events, views = decode_run
    budget_kib = pm_fig.budget_of(views) / 1024
    peak_kib = max(v.pool.used_bytes.get("total", 0) for v in views if v.pool) / 1024
    assert budget_kib == 64 * 1024 and peak_kib < 1024
    for fig in (pm_fig.pool_area_figure(views, 3), in_language("en", step_views.TraceViews(header, events).at, 3).pool_area):
        hi = fig.layout.yaxis.range[1]
        assert peak_kib <= hi <= peak_kib * 1.15  # ~1 MiB of use fills the plot; 64 MiB would leave 1.5 % of it
        assert not _hlines(fig) and any("65,536 KiB" in n for n in _notes(fig))


def test_pool_area_draws_a_near_budget_as_a_line(tight_run):
    _, _, views = tight_run
    budget_kib = pm_fig.budget_of(views) / 1024
    fig = pm_fig.pool_area_figure(views, 0)
    assert _hlines(fig) == [pytest.approx(budget_kib)] and fig.layout.yaxis.range[1] == pytest.approx(budget_kib * 1.12)


def test_limit_axis_line_or_note():
    import plotly.graph_objects as go

    near, far, empty = go.Figure(), go.Figure(), go.Figure()
    assert frame.limit_axis(near, 10, 16, "line", "off") == 16 and _hlines(near) == [16] and _notes(near) == ["line"]
    assert frame.limit_axis(far, 10, 512, "line", "off") == 10 and not _hlines(far) and _notes(far) == ["off"]
    assert far.layout.yaxis.range == (0, 10 * 1.08)
    assert frame.limit_axis(empty, 0, 64, "line", "off") == 64 and _hlines(empty) == [64]  # nothing used yet


# ---- 3. kernel-grid labels ----------------------------------------------------------------------------
def _lines(cell: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", ln) for ln in re.split(r"<br>", cell)]


def test_kernel_grid_labels_fit_their_cells(decode_run):
    header, events, views = decode_run
    kda, mla = et.layer_layout(header, events)
    names, phases = set(), cf.trace_phases(views)
    for v in (views[0], views[1]):  # a prefill step (chunk_kda, mla_attention_naive) and a decode step
        fig = cf.kernel_grid_figure(v, kda, mla, phases=phases)
        assert fig.layout.yaxis.automargin is True and fig.layout.xaxis.automargin is True  # layer names not cut
        cells = cf.grid_cells(v, kda, mla, phases)
        by_row = [[c for c in cells if c["layer"] == layer] for layer in sorted({c["layer"] for c in cells})]
        for row_text, row_cells in zip(fig.data[0].text, by_row, strict=True):
            for text, c in zip(row_text, row_cells, strict=True):
                if not c["kernel"]:
                    continue
                bold = re.search(r"<b>(.*?)</b>", text).group(1)
                assert "".join(_lines(bold)) == c["kernel"]  # the whole name, only broken
                assert max(map(len, _lines(bold))) <= cf.GRID_LINE_CHARS, text
                names.add(c["kernel"])
    assert {"mla_attention_naive", "mla_attention_absorbed", "fused_recurrent_kda", "chunk_kda"} <= names
    assert fig.data[0].textfont.size <= 12


def test_wrap_kernel_breaks_after_underscores():
    assert cf.wrap_kernel("mla_attention_absorbed") == ["mla_attention_", "absorbed"]
    assert cf.wrap_kernel("fused_recurrent_kda") == ["fused_", "recurrent_kda"]
    assert cf.wrap_kernel("chunk_kda") == ["chunk_kda"]
    assert cf.wrap_kernel("a_very_long_kernel_name_with_parts", 10) == ["a_very_", "long_", "kernel_", "name_with_",
                                                                        "parts"]


# ---- 6. step ticks ------------------------------------------------------------------------------------
def test_long_runs_get_a_readable_number_of_step_ticks(decode_run):
    _, _, views = decode_run
    span = views[-1].step - views[0].step
    assert span >= 74
    for fig in (pm_fig.pool_area_figure(views, 0), cf.timeline_figure(views, 0)):
        dtick = fig.layout.xaxis.dtick
        assert dtick and span / dtick + 1 <= frame.MAX_TICKS, dtick
    assert [frame.step_dtick(n) for n in (5, 11, 12, 73, 150, 1000)] == [1, 1, 2, 10, 20, 100]


# ---- 7. every policy visible in the hit-rate chart ------------------------------------------------------
def _policy_rows() -> list[dict]:
    """Twelve policies as the benchmark has them for shared_system_prompt: eight within 83-92 % (three
    equal), two at 0 %, two elsewhere; the same at each of three budgets."""
    rates = {"none": 0.0, "radix sglang": 0.891, "radix sglang no_buffer": 0.0, "radix dense-64": 0.589,
             "radix every-1024": 0.714, "radix branch": 0.91, "block dense": 0.838, "block interval-2048": 0.837,
             "block reachable": 0.915, "marconi": 0.915, "reachable + interval-4096, marconi": 0.915,
             "ours: marconi + unit replay": 0.914}
    return [{"family": "shared_system_prompt", "budget_gib": b, "policy": p, "token_hit_rate": r,
             "flops_saved_frac": r} for b in (4.0, 16.0, 64.0) for p, r in rates.items()]


def test_hit_rate_chart_gives_every_policy_a_visible_row():
    rows = _policy_rows()
    fig = dn_fig.bench_figure(rows, "shared_system_prompt", "token_hit_rate")
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    assert list(fig.layout.yaxis.ticktext) == policies  # a row each: none lies under another
    lo, hi = fig.layout.xaxis.range
    for k, (p, trace) in enumerate(zip(policies, fig.data)):
        assert trace.name == p and trace.visible is not False and trace.mode == "markers"
        assert all(lo < x < hi for x in trace.x)  # 0 % inside the plot, not on its edge
        assert all(abs(y - k) < 0.5 for y in trace.y) and len(set(trace.y)) == 3  # equal values kept apart
        label = next(a.text for a in fig.layout.annotations if a.y == k and a.xref == "paper")
        assert f"{rates_text(rows, p)}" in label
    assert lo < 0 and hi < 1  # zoomed to where the data is (0 .. 91.5 %), with room for a marker
    assert len({t.marker.color for t in fig.data}) == len(policies)  # one colour each, as in the FLOPs chart


def rates_text(rows: list[dict], policy: str) -> str:
    return f"{next(r['token_hit_rate'] for r in rows if r['policy'] == policy):.1%}".removesuffix("%")


def test_hit_rate_chart_zooms_where_the_data_is():
    rows = [r for r in _policy_rows() if r["token_hit_rate"] > 0.8]
    lo, hi = dn_fig.bench_figure(rows, "shared_system_prompt", "token_hit_rate").layout.xaxis.range
    assert 0.8 < lo < 0.837 and 0.915 < hi < 0.95  # 83.7-91.5 % and a marker's room, not 0-105 %


# ---- 5. the radix tree --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tree_steps():
    return ct.parse(ct.record("chunk"))[1]


def test_tree_root_label_is_inside_the_plot(tree_steps):
    lay = ct_fig.layout(tree_steps)
    wide = ct_fig.Layout(pos={k: (x * 40, y) for k, (x, y) in lay.pos.items()}, x_max=lay.x_max * 40,
                         lanes=lay.lanes)  # a Live-sized tree: thousands of tokens
    for layout in (lay, wide):
        fig = ct_fig.tree_figure(tree_steps, len(tree_steps) - 1, layout)
        root = next(d for d in fig.data if list(d.text or []) == ["root"])
        assert root.textposition == "top right"  # drawn right of x = 0, never cut at the plot's left edge
        lo, hi = fig.layout.xaxis.range
        assert lo <= -ct_fig.X_PAD * layout.x_max and hi >= layout.x_max * (1 + ct_fig.X_PAD)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tree_title_and_legend_do_not_overlap(tree_steps, lang):
    lay = ct_fig.layout(tree_steps)
    fig = frame.title_room(ct_fig.tree_figure(tree_steps, len(tree_steps) - 1, lay))
    title_bottom = frame.title_band_px(fig)
    leg, H, top = fig.layout.legend, fig.layout.height, fig.layout.margin.t
    assert fig.layout.title.yanchor == "top" and fig.layout.title.pad.t == frame.MODEBAR_PX
    assert leg.yref == "container" and leg.yanchor == "top"
    legend_top = (1 - leg.y) * H
    rows = ct_fig.legend_rows([d.name for d in fig.data if d.showlegend is not False and d.name])
    assert legend_top >= title_bottom + frame.GAP_PX - 1  # below the title ...
    assert top >= legend_top + rows * frame.LEGEND_ROW_PX  # ... and above the plot
    assert H - top - fig.layout.margin.b == 70 + 70 * lay.lanes  # the plot keeps its height


def test_legend_rows_grow_with_the_names():
    assert ct_fig.legend_rows(["a"] * 3) == 1
    assert ct_fig.legend_rows(["x" * 30] * 4, width_px=600) == 2  # 250 px an entry: two a row
    assert ct_fig.legend_rows(["墓碑（状态已驱逐）"] * 6, width_px=300) > ct_fig.legend_rows(["tomb"] * 6, width_px=300)
