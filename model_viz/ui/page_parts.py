"""Streamlit pieces every page ends with or shares: :func:`chart` (how every chart is drawn), the
related-concept expanders, the event list, and the tabs of one engine step that the Lab and the Live
page both draw (:func:`step_chain`, :func:`step_pool`, :func:`step_cache`, from
:class:`~model_viz.figures.step_views.StepFigures`).

Kept here (not in each page) so the ten pages render them the same way; the pages pass in data
their ``model_viz`` module computed, so nothing here holds logic beyond layout.
"""

from __future__ import annotations
import streamlit as st
from .. import concepts
from ..families import DEFAULT_FAMILY, FAMILIES, ModelFamily
from ..figures.frame import title_room
from ..i18n import current_language, t


def concept_expanders(concept_ids) -> None:
    """The page's "related concepts" section: one expander per concept id, with its concept-map text."""
    lang = current_language()
    st.subheader(t("common.concepts.title"))
    for cid in concept_ids:
        c = concepts.get(cid)
        with st.expander(f"{c.title[lang]} · `{cid}`"):
            st.markdown(concepts.concept_markdown(cid))


def page_end(watch_md: str, concept_ids, expanded: bool = True) -> None:
    """How a page closes: the "what to watch" expander holding ``watch_md``, then :func:`concept_expanders`."""
    with st.expander(t("common.watch_title"), expanded=expanded):
        st.markdown(watch_md)
    concept_expanders(concept_ids)


def trace_source(name: str, header: dict, events: int) -> None:
    """An uploaded trace's caption (its name and event count) and a warning for each of the header's
    :func:`~model_viz.scenarios.engine_trace.header_notes`."""
    from ..scenarios.engine_trace import header_notes

    st.caption(t("common.trace.source_upload", name=name, events=events))
    for key, values in header_notes(header):
        st.warning(t(key, **values))


def event_list(title: str, lines: list[str], none_text: str) -> None:
    """A bold title and a bullet list of this step's events, or ``none_text`` in italics."""
    st.markdown(f"**{title}**")
    st.markdown("\n".join(f"- {ln}" for ln in lines) if lines else f"*{none_text}*")


def model_family(page: str) -> ModelFamily:
    """The page's Kimi-Linear / Kimi K3 choice (a horizontal radio keyed ``{page}_model_family``), as a
    :class:`~model_viz.families.ModelFamily`."""
    from .step_control import lang_keyed_choice

    key = lang_keyed_choice(st.radio, f"{page}_model_family", t("common.family.label"), list(FAMILIES),
                            DEFAULT_FAMILY, horizontal=True, format_func=lambda k: t(FAMILIES[k].label))
    return FAMILIES[key]


CFG = {"displaylogo": False}


def chart(fig, key: str, where=None) -> None:
    """Draw ``fig`` as every page draws a chart: the container's width, no Plotly logo, and the title moved
    below Plotly's toolbar with the top margin to hold it (:func:`model_viz.figures.frame.title_room`, the
    one place that keeps the toolbar off every chart's title). ``where``: a column or container (default:
    the current one)."""
    (st if where is None else where).plotly_chart(title_room(fig), key=key, width="stretch", config=CFG)


def step_chain(shown, prefix: str) -> None:
    """The execution chain of one step: the packed batch, the kernel grid beside the timeline, and a
    verify step's drafts and rollback (chart keys ``{prefix}_batch``, ``_grid``, ``_timeline``, ``_verify_step``)."""
    chart(shown.batch, f"{prefix}_batch")
    c_grid, c_time = st.columns([5, 7])
    chart(shown.grid, f"{prefix}_grid", where=c_grid)
    chart(shown.timeline, f"{prefix}_timeline", where=c_time)
    if shown.verify is not None:
        chart(shown.verify, f"{prefix}_verify_step")
        st.dataframe(shown.verify_rows, hide_index=True, width="stretch")


def step_pool(shown, prefix: str) -> None:
    """The memory pool at one step, as the pool-map page draws it: bytes by page kind over the run, the
    budget strip of the step and its pool events (chart keys ``{prefix}_pool_area``, ``_pool_strip``)."""
    chart(shown.pool_area, f"{prefix}_pool_area")
    chart(shown.pool_strip, f"{prefix}_pool_strip")
    event_list(t("pool_map.events_title"), shown.pool_events, t("pool_map.events_none"))


def step_cache(tv, shown, prefix: str) -> None:
    """The prefix cache at one step: the radix tree or the block table of the snapshot that step shows
    (a malformed snapshot is a message; the other tabs still draw), then the step's cache events."""
    if tv.cache_error is not None:
        st.error(tv.cache_error.message())
    snaps = tv.trees or tv.blocks
    if shown.cache is not None:
        k = shown.cache_picture
        label = snaps[k].label if hasattr(snaps[k], "label") else snaps[k].get("label", "")
        st.caption(t("common.cache.snapshot_note", label=label, k=k + 1, n=len(snaps)))
        chart(shown.cache, f"{prefix}_{'tree' if tv.trees else 'blocks'}")
    else:
        st.caption(t("common.cache.no_snapshot_yet" if snaps else "common.cache.none"))
    event_list(t("lab.cache_events"), shown.cache_lines, t("lab.cache_none"))


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def _count(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "kda-ref": "kda-ref"}


def server_watch(watcher, refresh_s: float | None) -> None:
    """The Live page on a vLLM / SGLang server (:class:`~model_viz.scenarios.watch.ServerWatch`): redrawn every
    ``refresh_s`` seconds (None: paused) from one copy of what the watcher holds."""
    from ..figures import watch as wf

    @st.fragment(run_every=refresh_s)
    def draw() -> None:
        view = watcher.view()
        m, pc = view["metrics"], view["metrics"].get("prefix_cache") or {}
        st.subheader(t("live.watch.title", engine=ENGINE_NAMES.get(view["engine"], view["engine"] or "?")))
        st.markdown(t("live.watch.intro"))
        q, h = pc.get("queries"), pc.get("hits")
        st.markdown(t("live.watch.summary", running=_count(m.get("running")), waiting=_count(m.get("waiting")),
                      usage=_pct(m.get("kv_usage")), hits=_count(h), queries=_count(q),
                      rate=_pct(h / q) if q and h is not None else "-"))
        tabs = st.tabs([t(k) for k in ("live.watch.forest", "live.watch.over_time", "live.watch.spec")])
        with tabs[0]:
            _forest(watcher, view, wf)
        with tabs[1]:
            chart(wf.series_figure(view["series"]), "live_watch_series")
        with tabs[2]:
            per_pos = m.get("accepted_per_pos") or []
            if per_pos:
                chart(wf.accepted_figure(per_pos), "live_watch_spec")
            else:
                st.caption(t("live.watch.no_spec"))
        st.info(t("live.watch.unpublished"))
        if view["notes"]:
            event_list(t("live.watch.notes"), view["notes"], "")

    draw()


def _forest(watcher, view: dict, wf) -> None:
    if not view["sources"]:
        st.caption(t("live.watch.no_sources"))
        return
    st.caption(t("live.watch.events", **view["events"]))
    if not view["layout"]:
        st.caption(t("live.watch.no_blocks"))
        return
    blocks = {h: n for g in view["groups"].values() for h, n in g["blocks"].items() if h in view["layout"]}
    labels = {h: watcher.token_text(tokens) for h, (_, tokens) in blocks.items()}
    chart(wf.forest_figure(view, labels), "live_watch_forest")
    st.dataframe(wf.group_rows(view), hide_index=True, width="stretch")
