"""Page: Live — attach to a running ``kda-ref serve`` and watch its engine step by step as traffic flows; or to a
vLLM / SGLang server (no ``/kda/trace``), followed through its KV events and metrics
(:mod:`model_viz.scenarios.watch`, drawn by :func:`model_viz.ui.page_parts.server_watch`).

Widgets and layout only; reading the server and the window of steps is :mod:`model_viz.scenarios.live`,
the figures are the Lab's views of one step (:class:`model_viz.figures.step_views.TraceViews`) and
:mod:`model_viz.figures.live`.
While connected and not paused, a one-second timer polls the server and reruns the page when new steps
came; pausing stops the polling, and the slider then steps back through the window.
"""

import time

import streamlit as st

from model_viz.figures import live as live_fig
from model_viz.figures import step_views
from model_viz.i18n import t
from model_viz.scenarios import lab
from model_viz.scenarios import live
from model_viz.scenarios import live_reader
from model_viz.scenarios import watch
from model_viz.figures import watch as watch_fig
from model_viz.ui import page_parts

ss = st.session_state
REFRESH_S = 1.0

st.title(t("live.title"))
st.markdown(t("live.intro"))
c1, c2 = st.columns([3, 2])
if "live_url" not in ss and st.query_params.get("server"):  # a deep link names the server it watches
    ss["live_url"] = st.query_params["server"]
url = c1.text_input(t("live.url_label"), live.DEFAULT_URL, key="live_url")
api_key = c2.text_input(t("live.key_label"), type="password", key="live_key")
b1, b2, b3 = st.columns([1, 1, 2])
paused = b3.toggle(t("live.pause"), key="live_pause")


def _connect() -> None:
    """Attach to ``url``: the step views for a kda-ref server with a live trace (read from a thread:
    :class:`~model_viz.scenarios.live_reader.LiveReader`), the KV-event watcher for any other (vLLM, SGLang);
    what was open before is closed first."""
    for key in ("live_watch", "live_reader"):
        old = ss.pop(key, None)
        if old is not None:
            old.close()
    try:
        live.check_url(url)
        st.query_params["server"] = url  # the address keeps the server: a reload or a shared link reconnects
        kind, attached = watch.connect(url, api_key)
        ss["live_reader" if kind == "trace" else "live_watch"], ss["live_error"] = attached, None
    except live.LiveError as err:
        ss["live_error"] = err.message()


if b1.button(t("live.connect"), type="primary", key="live_connect"):
    _connect()
if b2.button(t("live.refresh"), key="live_refresh", disabled="live_reader" not in ss):
    ss["live_reader"].read()


@st.fragment(run_every=REFRESH_S if "live_reader" in ss and not paused else None)
def _timer() -> None:
    """The drawing tick: a full rerun when the reader (a thread of its own) has steps the page has not drawn.
    A fragment also runs with every full run of the page, so it is rate-limited by the clock."""
    now = time.monotonic()
    reader = ss.get("live_reader")
    if reader is None or ss.get("live_pause"):
        return
    reader.touch()  # the page is there: its reader reads on (a server idle past IDLE_S stopped it)
    if now - ss.get("live_polled", 0.0) < REFRESH_S * 0.9:
        return
    ss["live_polled"] = now
    if reader.window.last_step != ss.get("live_drawn"):
        st.rerun(scope="app")


_timer()
reader = ss.get("live_reader")
if reader is not None and reader.error is not None:
    ss["live_error"] = reader.error.message()
if ss.get("live_error"):
    st.error(ss["live_error"])
if "live_watch" in ss:
    page_parts.server_watch(ss["live_watch"], refresh_s=None if paused else REFRESH_S)
    page_parts.concept_expanders(watch_fig.PAGE_CONCEPTS)
    st.stop()
if reader is None:
    st.info(t("live.not_connected"))
    page_parts.concept_expanders(live_fig.PAGE_CONCEPTS)
    st.stop()
if paused:  # what the page shows stays put while the reader reads on: the slider steps back through it
    window, summaries = ss.setdefault("live_frozen", reader.snapshot())
else:
    ss.pop("live_frozen", None)
    window, summaries = reader.snapshot()
ss["live_drawn"] = window.last_step
if not window.records:
    st.info(t("live.no_steps"))
    page_parts.concept_expanders(live_fig.PAGE_CONCEPTS)
    st.stop()

header, events = window.trace()
tv = step_views.TraceViews(header, events)
if reader.skipped or reader.lost_summaries:
    st.warning(t("live.missed", n=reader.skipped, lost=reader.lost_summaries))
if window.restarts:
    st.info(t("live.restarted"))
if not tv.views:
    st.info(t("live.no_steps"))
    st.stop()
if not paused or ss.get("live_step") not in tv.steps:
    ss["live_step"] = tv.steps[-1]  # live: follow the newest step (the engine's step number)
if len(tv.steps) > 1:
    st.select_slider(t("common.trace.step_label"), options=tv.steps, key="live_step")
i = tv.index_of(ss["live_step"])
shown = tv.at(i)
st.caption(t("live.window", first=tv.steps[0], last=tv.steps[-1], n=len(tv.steps)))
st.markdown(shown.summary)

tabs = st.tabs([t(k) for k in ("live.tab.batch", "live.tab.pool", "live.tab.cache", "live.tab.queues",
                                     "live.tab.download")])
with tabs[0]:
    page_parts.step_chain(shown, "live")
with tabs[1]:
    page_parts.step_pool(shown, "live")
with tabs[2]:
    page_parts.step_cache(tv, shown, "live")
with tabs[3]:
    page_parts.chart(live_fig.queue_figure(live_reader.queue_series(summaries), shown.step), "live_queues")
    st.dataframe(live_fig.request_frame(live_reader.request_table(summaries, window, shown.step)),
                 hide_index=True, width="stretch")
with tabs[4]:
    st.markdown(t("live.download_note"))
    d1, d2 = st.columns(2)
    d1.download_button(t("lab.download_jsonl"), window.jsonl(), file_name="kda-live.jsonl",
                       mime="application/jsonl", key="live_dl_jsonl")
    d2.download_button(t("lab.download_chrome"), lab.chrome_json(header, events),
                       file_name="kda-live.trace.json", mime="application/json", key="live_dl_chrome")

page_parts.concept_expanders(live_fig.PAGE_CONCEPTS)
