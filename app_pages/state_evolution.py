"""Page: KDA state evolution — step through a prompt and watch each head's state S change.

Widgets and layout only; the model, the trace and the prompt checks come from
``model_viz.scenarios.state_evolution``, the figures from ``model_viz.figures.state_evolution``.
"""

import streamlit as st

from model_viz.ui import page_parts
from model_viz.figures import state_evolution as sf
from model_viz.scenarios import state_evolution as sp
from model_viz.i18n import t
from model_viz.ui.step_control import step_control



@st.cache_resource(show_spinner=False)
def _model(family: str):
    return sp.build_model(family=family)


@st.cache_data(show_spinner=False, max_entries=16)
def _trace(prompt: str, family: str):
    return sp.trace_prompt(_model(family), prompt)


@st.cache_data(show_spinner=False, max_entries=32)
def _probe(prompt: str, layer: int, head: int, family: str):
    return sp.recall_probe(_model(family), _trace(prompt, family), layer, head)


@st.cache_data(show_spinner=False, max_entries=32)
def _recovery(prompt: str, layer: int, step: int, steps: int, family: str):
    return sp.recovery(_trace(prompt, family), layer, step, steps)


def _archive(prompt: str, layer: int, step: int, family: str) -> None:
    """Section "a fixed state is not an archive": run the state at the current token backwards."""
    st.subheader(t("state_evolution.archive.title"))
    st.markdown(t("state_evolution.archive.intro"))
    if step < 1:
        st.info(t("state_evolution.archive.at_zero"))
        return
    top = min(step, sp.MAX_RECOVERY_STEPS)
    steps = st.slider(t("state_evolution.archive.steps"), 1, top, min(top, 8), key="state_evolution_archive_steps") \
        if top > 1 else 1
    curve = _recovery(prompt, layer, step, steps, family)
    page_parts.chart(sf.recovery_figure(curve), "state_evolution_archive")
    st.markdown(t("state_evolution.archive.result", layer=layer, t=step, **sf.recovery_reach(curve)))


def _explore() -> None:
    family = page_parts.model_family("state_evolution").key
    model = _model(family)
    cfg = model.config
    st.markdown(t("state_evolution.intro", K=cfg.linear_head_dim, V=cfg.linear_head_dim))
    st.caption(t("state_evolution.trained_model"))
    if cfg.gate_lower_bound is not None:
        st.info(t("state_evolution.k3_gate", lb=f"{cfg.gate_lower_bound:g}", floor=f"{sf.gate_floor(cfg):.4f}"))

    prompt = st.text_input(t("state_evolution.prompt_label", max_bytes=sp.MAX_PROMPT_BYTES), value=sp.DEFAULT_PROMPT,
                           key="state_evolution_prompt")
    try:
        sp.encode_prompt(prompt)
    except sp.PromptError as err:
        st.error(err.message())
        return
    with st.spinner():
        trace = _trace(prompt, family)
    T = len(trace.tokens)

    c_layer, c_delta = st.columns([2, 3], vertical_alignment="bottom")
    layer = c_layer.selectbox(t("state_evolution.layer_label"), trace.layers, key="state_evolution_layer",
                              format_func=lambda li: sf.layer_option(trace.layers, li))
    delta = c_delta.toggle(t("state_evolution.delta_toggle"), key="state_evolution_delta")

    # the step lives in session state (clamped by the control: a new prompt may be shorter)
    step = step_control("state_evolution_step", last=T - 1, label=t("state_evolution.step_label"), interval=0.8,
                        prev_label=t("state_evolution.prev"), next_label=t("state_evolution.next"))

    labels = sf.token_labels(trace.tokens)
    st.markdown(t("state_evolution.current", t=step, T=T, label=f"`{labels[step]}`", byte=trace.tokens[step]))
    st.html(sf.token_strip_html(trace.tokens, step))

    page_parts.chart(sf.state_heatmap_grid(trace, layer, step, delta=delta), "state_evolution_heatmap")
    c_norm, c_gate = st.columns(2)
    with c_norm:
        page_parts.chart(sf.state_norm_figure(trace, layer, step), "state_evolution_norm")
    with c_gate:
        page_parts.chart(sf.gate_figure(trace, layer, step, lower_bound=cfg.gate_lower_bound),
                         "state_evolution_gate")
    if sp.is_recall_prompt(trace):
        H = trace.states[layer].shape[1]
        head = st.selectbox(t("state_evolution.probe_head"), list(range(H)), key="state_evolution_probe_head")
        curves = _probe(prompt, layer, head, family)
        page_parts.chart(sf.recall_probe_figure(curves, trace.tokens, step), "state_evolution_probe")
        st.caption(t("state_evolution.probe_caption", layer=layer, head=head))
    st.caption(t("state_evolution.bytes", **sp.state_size_facts(cfg, T)))
    _archive(prompt, layer, step, family)
    with st.expander(t("state_evolution.watch_title"), expanded=True):
        st.markdown(t("state_evolution.watch"))


st.title(t("state_evolution.title"))
_explore()

page_parts.concept_expanders(sf.PAGE_CONCEPTS)
