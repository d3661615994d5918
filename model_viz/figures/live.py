"""Figures and tables of the Live page (``app_pages/live.py``) that the Lab's views do not already draw:
the running / waiting queues over the window, each request's TTFT / TPOT so far, and which cache snapshot
belongs to a step. The batch, the pool and the radix tree / state blocks are the Lab's views
(:mod:`model_viz.figures.hybrid_chain`, :mod:`model_viz.figures.pool_map`,
:mod:`model_viz.figures.checkpoint_tree`, :mod:`model_viz.figures.lab`)."""

from __future__ import annotations

import plotly.graph_objects as go

from ..i18n import t as tr

PAGE_CONCEPTS = ("server.engine_loop", "server.openai_api", "engine.continuous_batching", "memory.unified_pool")
RUNNING, WAITING = "#1f77b4", "#ff7f0e"


def queue_figure(series: dict[str, list[int]], current: int) -> go.Figure:
    """Requests running and waiting after each step of the window; a line at the step shown."""
    fig = go.Figure()
    for key, label, color in (("running", "live.queue.running", RUNNING), ("waiting", "live.queue.waiting", WAITING)):
        fig.add_trace(go.Scatter(x=series["step"], y=series[key], name=tr(label), mode="lines",
                                 line={"shape": "hv", "color": color}))
    fig.add_vline(x=current, line={"dash": "dot", "color": "#555"})
    fig.update_layout(height=240, margin={"l": 40, "r": 10, "t": 30, "b": 30},
                      xaxis_title=tr("common.trace.step_label"), yaxis_title=tr("live.queue.requests"),
                      legend={"orientation": "h", "y": 1.15})
    return fig


def _ms(v) -> float | None:
    return None if v is None else round(v * 1000, 1)


COLUMNS = ("live.col.request", "live.col.prompt_len", "live.col.output_len", "live.col.ttft", "live.col.tpot",
           "live.col.state")  # request_rows' columns, in order


def request_rows(table: list[dict]) -> list[dict]:
    """One row per request of :func:`~model_viz.scenarios.live_reader.request_table`, keyed by :data:`COLUMNS`."""
    def cells(r: dict) -> tuple:
        return (r["req_id"], r.get("prompt_tokens"), r.get("output_tokens"), _ms(r.get("ttft_s")),
                _ms(r.get("tpot_s")), tr(_state_key(r)))
    return [dict(zip((tr(k) for k in COLUMNS), cells(r))) for r in table]


def request_frame(table: list[dict]):
    """:func:`request_rows` as the table the page shows: a time not known yet (a TTFT before the first token, a
    TPOT before the second) reads as a dash instead of ``None``."""
    import pandas as pd  # the page's st.dataframe loads it anyway; kept out of this module's import

    times = [tr("live.col.ttft"), tr("live.col.tpot")]
    frame = pd.DataFrame(request_rows(table), columns=[tr(k) for k in COLUMNS])  # columns: an empty table too
    return frame.style.format(precision=1, na_rep="\u2013", subset=times)


def _state_key(row: dict) -> str:
    """A request's state in the table: in flight, ended, or aborted (its client cancelled it) or failed."""
    if not row.get("done"):
        return "live.state.running"
    return {"abort": "live.state.aborted", "error": "live.state.failed"}.get(row.get("finish_reason"), "live.state.done")
