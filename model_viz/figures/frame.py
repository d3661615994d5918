"""What every chart of the app shares about its frame, so no chart hides what it is about:

* :func:`title_room` — the title below Plotly's toolbar (the modebar, drawn over the figure's top
  right corner) with the top margin to hold it. Applied to every figure a page draws, in one place:
  :func:`model_viz.ui.page_parts.chart`.
* :func:`limit_axis` — a y axis scaled to the data with its limit (a token or byte budget) marked: a
  dashed line when the limit is near the data, a note at the top when it is far above it (a budget of
  512 tokens would flatten 1-5-token decode steps to nothing).
* :func:`step_dtick` — a tick spacing that keeps a step axis to about :data:`MAX_TICKS` labels.
"""

from __future__ import annotations

import math
import re

import plotly.graph_objects as go

MODEBAR_PX = 28  # plotly.js draws its toolbar 2 px below the figure's top edge, 22 px high: the title starts below
TITLE_FONT_PX = 16  # the Streamlit theme's title size, for a figure that sets none
LINE_HEIGHT = 1.3  # a text line's height per font size
LEGEND_ROW_PX = 24  # one row of a horizontal legend
GAP_PX = 8  # between the title and what lies under it
MAX_TICKS = 12  # labels on a step axis
LIMIT_SPAN = 2.0  # a limit up to this many times the data's peak is a line on the axis; a higher one is a note


def title_lines(text: str | None) -> int:
    """How many lines a Plotly title's text takes (0 without a title)."""
    return 0 if not text else len(re.split(r"<br\s*/?>", text, flags=re.I))


def title_band_px(fig: go.Figure) -> int:
    """Pixels from the figure's top edge to the bottom of its title as :func:`title_room` places it (the
    modebar's band when there is no title)."""
    size = fig.layout.title.font.size or TITLE_FONT_PX
    return MODEBAR_PX + math.ceil(title_lines(fig.layout.title.text) * size * LINE_HEIGHT)


def above_plot(fig: go.Figure) -> bool:
    """Whether something lies in the top margin: a legend or a note placed at ``y >= 1`` of the plot area
    (a subplot's title, a limit named off the scale)."""
    leg = fig.layout.legend
    if fig.layout.showlegend is not False and leg.yref != "container" and leg.y is not None and leg.y >= 1:
        return True
    return any(a.yref == "paper" and a.y is not None and (a.y > 1 or (a.y == 1 and a.yanchor == "bottom"))
               for a in fig.layout.annotations)


def title_room(fig: go.Figure) -> go.Figure:
    """``fig`` (changed in place, and returned) with its title anchored at the top of the figure below the
    modebar's band, and a top margin that holds the title, one row of what lies above the plot (a legend, a
    note: :func:`above_plot`) and a gap.
    A figure without a title is left as it is."""
    if not title_lines(fig.layout.title.text):
        return fig
    need = title_band_px(fig) + GAP_PX + (LEGEND_ROW_PX if above_plot(fig) else 0)
    fig.update_layout(title=dict(yref="container", y=1.0, yanchor="top", pad=dict(t=MODEBAR_PX), automargin=True),
                      margin=dict(t=max(fig.layout.margin.t or 0, need)))
    return fig


def step_dtick(span: float, max_ticks: int = MAX_TICKS) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that puts at most ``max_ticks`` labels on ``span`` steps."""
    d = 1
    while span / d + 1 > max_ticks:
        d = _next_nice(d)
    return d


def _next_nice(d: int) -> int:
    """1 -> 2 -> 5 -> 10 -> 20 -> 50 -> ..."""
    lead = d // 10 ** int(math.log10(d))
    return d * 5 // 2 if lead == 2 else d * 2


def limit_axis(fig: go.Figure, data_max: float, limit: float | None, line_text: str, off_text: str,
               pad: float = 1.08) -> float:
    """Scale ``fig``'s y axis to ``[0, top * pad]`` and mark ``limit``: when it is at most :data:`LIMIT_SPAN`
    times ``data_max`` the axis reaches it and a dashed line labelled ``line_text`` marks it, else the axis
    ends at the data and ``off_text`` names the limit at the plot's top right. Returns ``top`` (the data's
    peak, or the limit where it is drawn)."""
    data_max = max(data_max, 0)
    drawn = bool(limit) and (data_max == 0 or limit <= LIMIT_SPAN * data_max)  # nothing used: the axis is the limit
    top = max(data_max, limit if drawn else 0) or 1
    if drawn:
        fig.add_hline(y=limit, line=dict(color="#333", width=1.5, dash="dash"))
        fig.add_annotation(x=1.0, xref="paper", y=limit, text=line_text, showarrow=False, xanchor="right",
                           yanchor="bottom", font=dict(size=11))
    elif limit:
        fig.add_annotation(x=1.0, xref="paper", y=1.0, yref="paper", text=off_text, showarrow=False,
                           xanchor="right", yanchor="bottom", font=dict(size=11))
    fig.update_yaxes(range=[0, top * pad])
    return top
