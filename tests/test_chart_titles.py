"""Plotly's toolbar (the modebar, 22 px high at 2 px from the figure's top right) never covers a chart's title:
every page draws its charts through :func:`model_viz.ui.page_parts.chart`, which anchors the title below the
toolbar's band with the top margin to hold it (:func:`model_viz.figures.frame.title_room`). Checked on the
helper, on the page sources (no page draws a chart another way), and on every chart the pages draw."""

from __future__ import annotations

import ast
import math
import pathlib
import re

import plotly.graph_objects as go
import pytest

from apptest_util import chart_specs, open_page
from model_viz.figures import frame
from model_viz.ui.page_index import PAGES

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEBAR_BOTTOM_PX = 2 + 22  # plotly.js: .modebar {top: 2px}, .modebar-btn {height: 22px}

#: files that still call ``plotly_chart`` themselves, with how many calls: only able to shrink (none now)
DIRECT_ALLOWANCE: dict = {}


def title_room_ok(layout: dict) -> str | None:
    """Why a figure's layout (a Plotly spec's ``layout``) would let the modebar cover its title; None if it
    does not (no title, or the title below the modebar's band and the top margin holding it)."""
    title = layout.get("title") or {}
    text = title.get("text") if isinstance(title, dict) else title
    if not text:
        return None
    if title.get("yref") != "container" or title.get("y") != 1 or title.get("yanchor") != "top":
        return f"title not anchored at the figure's top: {title}"
    pad = (title.get("pad") or {}).get("t", 0)
    if pad < MODEBAR_BOTTOM_PX:
        return f"title pad {pad} px: inside the modebar's band"
    size = (title.get("font") or {}).get("size") or frame.TITLE_FONT_PX
    lines = len(re.split(r"<br\s*/?>", text, flags=re.I))
    need = pad + math.ceil(lines * size * frame.LINE_HEIGHT)
    top = (layout.get("margin") or {}).get("t", 100)
    return None if top >= need + frame.GAP_PX else f"top margin {top} px < {need + frame.GAP_PX} px for {text!r}"


# ---- the helper -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, size, t0, legend_y", [
    ("A title", 15, 30, None), ("Line one<br>line two", None, 60, None), ("With a legend above", 15, 60, 1.02),
])
def test_title_room_moves_the_title_below_the_modebar(text, size, t0, legend_y):
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1]))
    fig.update_layout(title=dict(text=text, font=dict(size=size)), margin=dict(t=t0))
    if legend_y:
        fig.update_layout(legend=dict(orientation="h", y=legend_y, yanchor="bottom"))
    before = title_room_ok(fig.to_plotly_json()["layout"])
    assert before is not None  # plotly's default: the title centred in the top margin, under the toolbar
    frame.title_room(fig)
    assert title_room_ok(fig.to_plotly_json()["layout"]) is None
    need = frame.title_band_px(fig) + frame.GAP_PX + (frame.LEGEND_ROW_PX if legend_y else 0)
    assert fig.layout.margin.t == max(t0, need)
    again = frame.title_room(go.Figure(fig))
    assert again.layout.margin.t == fig.layout.margin.t  # idempotent


def test_title_room_keeps_a_deeper_margin_and_skips_untitled_figures():
    deep = frame.title_room(go.Figure(layout=dict(title=dict(text="t"), margin=dict(t=120))))
    assert deep.layout.margin.t == 120 and deep.layout.title.pad.t == frame.MODEBAR_PX
    bare = frame.title_room(go.Figure(layout=dict(margin=dict(t=10))))
    assert bare.layout.margin.t == 10 and bare.layout.title.yanchor is None


# ---- the pages' sources ---------------------------------------------------------------------------
def _direct_calls(path: pathlib.Path) -> int:
    """``plotly_chart`` calls in ``path`` outside :func:`page_parts.chart`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "chart" and path.name == "page_parts.py":
            inside |= {id(n) for n in ast.walk(node)}
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "plotly_chart" and id(n) not in inside)


def test_every_chart_is_drawn_through_page_parts_chart():
    files = [*sorted((ROOT / "app_pages").glob("*.py")), *sorted((ROOT / "model_viz").rglob("*.py")), ROOT / "app.py"]
    found = {str(p.relative_to(ROOT)): n for p in files if (n := _direct_calls(p))}
    for name, n in DIRECT_ALLOWANCE.items():
        assert found.get(name, 0) <= n, f"{name}: more direct plotly_chart calls than allowed"
        assert found.get(name, 0) == n, f"{name} draws through page_parts.chart now: shrink DIRECT_ALLOWANCE"
    extra = {k: v for k, v in found.items() if k not in DIRECT_ALLOWANCE}
    assert not extra, f"draw these with model_viz.ui.page_parts.chart (title below the toolbar): {extra}"


# ---- every chart the pages draw -------------------------------------------------------------------
SKIP = {"home", "concept_map", "live"}  # no charts / a server to follow (its step tabs are the Lab's page_parts)


@pytest.mark.parametrize("slug", [p.slug for p in PAGES if p.slug not in SKIP])
def test_every_chart_a_page_draws_keeps_its_title_clear_of_the_toolbar(slug):
    at = open_page(f"app_pages/{slug}.py", "zh" if slug == "checkpoint_tree" else "en", timeout=180)
    if slug == "lab":
        at.button(key="lab_run").click().run(timeout=180)
        assert not at.exception, at.exception
    specs = chart_specs(at)
    assert specs, f"{slug} drew no chart"
    problems = [p for s in specs if (p := title_room_ok(s["layout"]))]
    assert not problems, problems
