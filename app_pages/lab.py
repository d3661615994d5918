"""Page: the Lab — your workload on the real engine, stepped through the other pages' views, two
configurations compared, the trace downloaded.

Widgets and layout only; the run, its bounds and the comparison are :mod:`model_viz.scenarios.lab`, the
settings form :mod:`model_viz.ui.lab_form`, the figures :mod:`model_viz.figures.lab` and the views of the
execution-chain, pool-map and checkpoint-tree pages, fed from the run's trace.
"""

import streamlit as st

from model_viz.figures import lab as lab_fig
from model_viz.figures import step_views
from model_viz.i18n import t
from model_viz.scenarios import engine_trace as et
from model_viz.scenarios import lab
from model_viz.ui import lab_form, page_parts
from model_viz.ui import step_control as sc
from model_viz.ui.step_control import step_control

ss = st.session_state
SOURCES = ("prompts", "conversation", "family")
SOURCE_LABEL = {"prompts": "lab.source.prompts", "conversation": "lab.source.conversation",
                "family": "lab.source.family"}
MODEL_LABEL = {"trained": "lab.model.trained", "trained_k3": "lab.model.trained_k3", "tiny": "lab.model.tiny",
               "folder": "lab.model.folder"}
RUN_LABEL = {"A": "lab.run_a", "B": "lab.run_b"}

st.title(t("lab.title"))
st.markdown(t("lab.intro"))

# ---- 1. the workload ----------------------------------------------------------------------------
st.subheader(t("lab.workload_title"))
source = sc.lang_keyed_choice(st.radio, "lab_source", t("lab.source_label"), SOURCES, "prompts", horizontal=True, format_func=lambda s: t(SOURCE_LABEL[s]))
family = None
if source == "family":
    c1, c2, c3, c4 = st.columns(4)
    family = c1.selectbox(t("lab.family_label"), lab.family_names(), key="lab_family")
    fam_scale = c2.selectbox(t("lab.family_scale"), lab.SCALES, key="lab_family_scale")
    fam_seed = c3.number_input(t("lab.family_seed"), 0, 10**6, 0, key="lab_family_seed")
    fam_n = c4.number_input(t("lab.family_n"), 1, lab.LIMITS.requests, 3, key="lab_family_n")
    st.caption(t("lab.family_note"))
elif source == "conversation":  # the turns of one conversation: a box (and a default) of their own
    text = st.text_area(t("lab.turns_label", max=lab.LIMITS.requests, bytes=lab.LIMITS.prompt_bytes),
                        t("lab.turns_default"), height=140, key="lab_turns")
else:
    text = st.text_area(t("lab.prompts_label", max=lab.LIMITS.requests, bytes=lab.LIMITS.prompt_bytes),
                        t("lab.prompts_default"), height=140, key="lab_prompts")
mode = "conversation" if source == "conversation" else "sequential" if source == "family" else \
    sc.lang_keyed_choice(st.radio, "lab_mode", t("lab.mode_label"), ("batch", "sequential"), "sequential", horizontal=True, format_func=lambda m: t("lab.mode.batch" if m == "batch" else
                                                                  "lab.mode.sequential"))
c1, c2, c3 = st.columns(3)
max_tokens = c1.slider(t("lab.max_tokens"), 1, lab.LIMITS.new_tokens, 16, key="lab_max_tokens")
temperature = c2.number_input(t("lab.temperature"), 0.0, 2.0, 0.0, step=0.1, key="lab_temperature")
sample_seed = c3.number_input(t("lab.sample_seed"), 0, 2**31 - 1, 0, key="lab_sample_seed")

# ---- 2. the engine ------------------------------------------------------------------------------
st.subheader(t("lab.engine_title"))
model_opts = tuple(k for k in lab.MODEL_KINDS if k != "folder" or lab.allowed_model_dirs())
model_kind = sc.lang_keyed_choice(st.radio, "lab_model", t("lab.model_label"), model_opts, "trained", horizontal=True, format_func=lambda m: t(MODEL_LABEL[m]))
folder = st.text_input(t("lab.folder_label"), key="lab_folder") if model_kind == "folder" else None
if "folder" not in model_opts:
    st.caption(t("lab.folder_note", env=lab.MODEL_DIRS_ENV))
compare_on = st.checkbox(t("lab.compare_label"), key="lab_compare")
cols = st.columns(2) if compare_on else [st.container()]
forms = {}
for name, col in zip("AB", cols):
    with col:
        st.markdown(f"**{t(RUN_LABEL[name])}**")
        forms[name] = lab_form.engine_form(f"lab_{name.lower()}_", lab_form.SUGGESTED[name])


@st.cache_resource(show_spinner=False, max_entries=4)
def _model(kind: str, path: str | None):
    """One model per kind and folder per process (the shipped ones are shared with the other pages)."""
    return lab.load_model(kind, path)


def _run() -> None:
    prompts = (lab.family_prompts(family, int(fam_seed), int(fam_n), _model(model_kind, folder).config.vocab_size,
                                  fam_scale)
               if source == "family" else lab.split_prompts(text))
    sampling = lab.sampling_params(max_tokens, temperature, sample_seed)
    bar = st.progress(0.0, text=t("lab.progress", steps=0, done=0, n=len(prompts)))
    runs = {}
    for name in forms:
        bar_text = lambda f, s, d, n=name: bar.progress(f, text=t("lab.progress_run", run=n, steps=s, done=d,  # noqa: E731
                                                                   n=len(prompts)))
        runs[name] = lab.run_lab(_model(model_kind, folder), prompts, sampling, mode=mode, progress=bar_text, **forms[name])
    bar.empty()
    ss["lab_result"] = {"runs": runs, "sampling": sampling}
    ss["lab_step"] = 0


def _downloads(runs: dict) -> None:
    """Each configuration's traces (JSONL and Chrome), labelled with its name when two were compared:
    a comparison's download holds both runs, not only the one shown."""
    both = len(runs) == 2
    if both:
        st.caption(t("lab.download_both"))
    for name, r in runs.items():
        c1, c2 = st.columns(2)
        key = f"_{name.lower()}" if both else ""
        c1.download_button(t("lab.download_jsonl_run", run=name) if both else t("lab.download_jsonl"),
                           r.jsonl(), file_name=f"kda-lab-{name}.jsonl", mime="application/jsonl",
                           key=f"lab_dl_jsonl{key}")
        c2.download_button(t("lab.download_chrome_run", run=name) if both else t("lab.download_chrome"),
                           lab.chrome_json(r.header, r.trace), file_name=f"kda-lab-{name}.trace.json",
                           mime="application/json", key=f"lab_dl_chrome{key}")


if st.button(t("lab.run"), type="primary", key="lab_run"):
    try:
        with st.spinner(t("lab.running")):
            _run()
    except lab.LabError as err:
        st.error(err.message())
        ss.pop("lab_result", None)

# ---- 3. the run, step by step ----------------------------------------------------------------------
upload = st.file_uploader(t("lab.upload_label"), type=["jsonl", "json", "txt"], key="lab_upload")
result, run, header, events = ss.get("lab_result"), None, None, None
if upload is not None:
    try:
        header, events = et.parse_trace(upload.getvalue())
        page_parts.trace_source(upload.name, header, len(events))
    except et.TraceError as err:
        st.error(err.message())
if events is None and result is None:
    st.info(t("lab.no_run"))
    page_parts.concept_expanders(lab_fig.PAGE_CONCEPTS)
    st.stop()

if events is None:
    runs, sampling = result["runs"], result["sampling"]
    st.subheader(t("lab.results_title"))
    st.dataframe(lab_fig.totals_rows(list(runs.values())), hide_index=True, width="stretch")
    if len(runs) == 2:
        cmp = lab.compare(runs["A"], runs["B"], sampling)
        same = sum(cmp.same_tokens)
        if not cmp.greedy:
            st.info(t("lab.cmp_sampled", same=same, n=len(cmp.same_tokens)))
        elif cmp.ok:
            st.success(t("lab.cmp_same", n=len(cmp.same_tokens)))
        else:
            st.error(t("lab.cmp_differ", same=same, n=len(cmp.same_tokens)))
        st.dataframe(lab_fig.config_diff_rows(cmp), hide_index=True, width="stretch")
    shown_run = sc.lang_keyed_choice(st.radio, "lab_shown", t("lab.shown_label"), list(runs), "A", horizontal=True, format_func=lambda n: t(RUN_LABEL[n])) \
        if len(runs) == 2 else "A"
    run = runs[shown_run]
    header, events = run.header, run.trace
refused = lab_fig.refusals(events)
if refused:
    st.warning(t("lab.refused_title", n=len(refused)) + "\n\n" + "\n\n".join(f"- {r}" for r in refused))
tv = step_views.TraceViews(header, events)
if not tv.views:
    st.info(t("lab.refused_none_ran"))
    st.stop()
i = step_control("lab_step", values=tv.steps, label=t("common.trace.step_label"))
shown = tv.at(i)
st.markdown(shown.summary)

tabs = st.tabs([t(k) for k in ("lab.tab.chain", "lab.tab.pool", "lab.tab.cache", "lab.tab.spec",
                                       "lab.tab.requests", "lab.tab.download")])
with tabs[0]:
    page_parts.step_chain(shown, "lab")
with tabs[1]:
    page_parts.step_pool(shown, "lab")
with tabs[2]:
    page_parts.step_cache(tv, shown, "lab")
with tabs[3]:
    if tv.verifies:
        page_parts.chart(lab_fig.verify_figure(events), "lab_verify")
    else:
        st.caption(t("lab.no_spec"))
with tabs[4]:
    if run is not None:
        st.dataframe(lab_fig.request_rows(run), hide_index=True, width="stretch")
    else:
        st.caption(t("lab.requests_from_trace"))
with tabs[5]:
    st.markdown(t("lab.download_note"))
    if run is None:  # an uploaded trace: its Chrome trace
        st.columns(2)[1].download_button(t("lab.download_chrome"), lab.chrome_json(header, events),
                                         file_name="kda-lab-upload.trace.json", mime="application/json",
                                         key="lab_dl_chrome")
    else:
        _downloads(runs)

page_parts.concept_expanders(lab_fig.PAGE_CONCEPTS)
