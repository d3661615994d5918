"""Page: checkpoint density and policies — interval vs memory vs recompute at 48B sizes: the cost
model, the simulator live, and the benchmark results (``docs/bench/workloads.csv``).

Widgets and layout only; the arithmetic, the simulator runs, the CSV reading and the figures come
from ``model_viz.density``.
"""

import os

import streamlit as st

from model_viz import step_control as sc

from model_viz import page_parts
from model_viz import density as dn
from model_viz.i18n import t

lang = st.session_state.get("lang", "en")
cfg = {"displaylogo": False}


def _choice(widget, name: str, label: str, options, default, **kw):
    return sc.lang_keyed_choice(widget, name, label, options, default, lang, **kw)


@st.cache_data(show_spinner=False, max_entries=256)
def _sim(family: str, interval, budget_gib: float, eviction: str) -> dict:
    return dn.simulate(family, interval, budget_gib, eviction)


@st.cache_data(show_spinner=False, max_entries=16)
def _csv(kind: str, path: str, stamp):
    """``(rows, None)`` or ``(None, (message key, values))``, keyed on the file's mtime and size so a
    rewritten file is read again."""
    try:
        return (dn.load_bench(path) if kind == "bench" else dn.load_prefix(path)), None
    except dn.BenchError as err:
        return None, (err.key, err.fmt)


def _stamp(path) -> tuple:
    try:
        st_ = os.stat(path)
        return st_.st_mtime_ns, st_.st_size
    except OSError:
        return None


st.title(t("dn.title", lang))
f = dn.cost_facts()
st.markdown(t("dn.intro", lang, mib=f"{f['state_mib']:.1f}", kv=f"{f['kv_bytes_per_token']:,}",
              be=f"{f['break_even_tokens']:,.0f}"))

# ---- (1) the cost model --------------------------------------------------------------------------
st.subheader(t("dn.cost.header", lang))
m1, m2, m3 = st.columns(3)
m1.metric(t("dn.metric.state", lang), f"{f['state_mib']:.1f} MiB")
m2.metric(t("dn.metric.kv", lang), f"{f['kv_bytes_per_token']:,} B")
m3.metric(t("dn.metric.break_even", lang), f"{f['break_even_tokens']:,.0f}")
N = st.select_slider(t("dn.cost.n_label", lang), options=list(dn.BREAK_EVEN_N), value=1024, key="dn_n")
st.plotly_chart(dn.cost_figure(N, lang=lang), key="dn_cost", width="stretch", config=cfg)
table = [{t("dn.table.n", lang): r["N"], t("dn.table.ratio", lang): f"{r['ratio']:.2f}×",
          t("dn.table.state", lang): f"{r['state_mib_per_1k']:,.1f}",
          t("dn.table.kv", lang): f"{r['kv_mib_per_1k']:.2f}",
          t("dn.table.tokens", lang): f"{r['recompute_tokens']:,.1f}",
          t("dn.table.ms", lang): f"{r['recompute_ms']:.2f}"}
         for r in dn.break_even_rows()]
st.dataframe(table, hide_index=True, width="stretch")
st.caption(t("dn.cost.caption", lang, at=dn.TYPICAL_PREFIX))

# ---- (2) the simulator, live ------------------------------------------------------------------------
st.subheader(t("dn.sim.header", lang))
st.markdown(t("dn.sim.text", lang, n=dn.NUM_REQUESTS, n_long=dn.REQUESTS["long_document_qa"], B=dn.BLOCK_SIZE,
              U=dn.HASH_UNIT))
c1, c2 = st.columns(2)
family = _choice(c1.selectbox, "dn_family", t("dn.family_label", lang), dn.FAMILY_NAMES, dn.FAMILY_NAMES[0],
                 format_func=lambda x: t(f"dn.family.{x}", lang))
eviction = _choice(c2.radio, "dn_eviction", t("dn.eviction_label", lang), dn.EVICTIONS, "lru", horizontal=True,
                   format_func=lambda e: t(f"dn.eviction.{e}", lang))
k_iv = _choice(st.select_slider, "dn_interval", t("dn.interval_label", lang), list(range(len(dn.INTERVALS))), 0,
               format_func=lambda k: dn.interval_label(dn.INTERVALS[k], lang))
interval = dn.INTERVALS[k_iv]
budget = st.select_slider(t("dn.budget_label", lang), options=list(dn.BUDGETS_GIB), value=4, key="dn_budget",
                          format_func=lambda b: f"{b} GiB")
with st.spinner(t("dn.sim.running", lang)):
    rows = [_sim(family, iv, float(budget), eviction) for iv in dn.INTERVALS]
r = rows[k_iv]
failed = [x["error"] for x in rows if "error" in x]
if failed:
    st.warning(t("dn.sim.failed", lang, msg=failed[0]))
if "error" in r:
    r = None
if r is not None:
    k1, k2, k3, k4, k5 = st.columns(5)
    k1.metric(t("dn.metric.hit_rate", lang), f"{r['token_hit_rate']:.1%}")
    k2.metric(t("dn.metric.flops", lang), f"{r['flops_saved_frac']:.1%}", help=f"{r['flops_saved_tflops']:,.0f} TFLOPs")
    k3.metric(t("dn.metric.mean_ckpt", lang), f"{r['mean_checkpoint_gib']:.2f} GiB",
              help=t("dn.metric.peak_help", lang, peak=f"{r['peak_checkpoint_gib']:.2f}"))
    k4.metric(t("dn.metric.evictions", lang), f"{r['evictions']:,}")
    k5.metric(t("dn.metric.ttft", lang), f"{r['ttft_mean_ms']:.0f} ms", help=f"p95 {r['ttft_p95_ms']:.0f} ms")
    st.caption(t("dn.sim.caption", lang, n=r["requests"], wall=f"{r['wall_s']:.2f}",
                 wall_all=f"{sum(x.get('wall_s', 0.0) for x in rows):.1f}"))
st.plotly_chart(dn.sweep_figure(rows, interval, float(budget), lang=lang), key="dn_sweep", width="stretch", config=cfg)

# ---- (3) the benchmark results -----------------------------------------------------------------------
st.subheader(t("dn.bench.header", lang))
st.markdown(t("dn.bench.text", lang, cmd=dn.BENCH_COMMAND))
bench, err = _csv("bench", str(dn.WORKLOADS_CSV), _stamp(dn.WORKLOADS_CSV))
if err is not None and err[0] == "dn.bench.missing":
    st.info(t(err[0], lang, **err[1]))
elif err is not None:
    st.error(t(err[0], lang, **err[1]))
else:
    fams = dn.families_in(bench)
    bfam = _choice(st.selectbox, "dn_bench_family", t("dn.bench.family_label", lang), fams, fams[0],
                   format_func=lambda x: t(f"dn.family.{x}", lang) if x in dn.FAMILY_NAMES else x)
    st.plotly_chart(dn.bench_figure(bench, bfam, "token_hit_rate", lang=lang), key="dn_bench_hit", width="stretch",
                    config=cfg)
    st.plotly_chart(dn.bench_figure(bench, bfam, "flops_saved_frac", lang=lang), key="dn_bench_flops",
                    width="stretch", config=cfg)
    with st.expander(t("dn.bench.table", lang)):
        st.dataframe([x for x in bench if x["family"] == bfam], hide_index=True, width="stretch")

# ---- (4) the tiny engine's density benchmark -------------------------------------------------------------
st.subheader(t("dn.tiny.header", lang))
st.markdown(t("dn.tiny.text", lang))
tiny, terr = _csv("prefix", str(dn.PREFIX_CSV), _stamp(dn.PREFIX_CSV))
if terr is not None and terr[0] == "dn.bench.missing":
    st.info(t("dn.tiny.missing", lang, path=terr[1]["path"]))
elif terr is not None:
    st.error(t(terr[0], lang, **terr[1]))
else:
    wl = st.radio(t("dn.tiny.workload_label", lang), dn.families_in(tiny, "workload"), horizontal=True,
                  key="dn_tiny_workload")
    st.plotly_chart(dn.prefix_figure(tiny, wl, lang=lang), key="dn_tiny", width="stretch", config=cfg)
    same = all(str(x.get("same_tokens_as_no_cache", "True")) == "True" for x in tiny)
    st.caption(t("dn.tiny.same" if same else "dn.tiny.not_same", lang))

with st.expander(t("common.watch_title", lang), expanded=False):
    st.markdown(t("dn.watch", lang))

page_parts.concept_expanders(dn.PAGE_CONCEPTS, lang)
