"""Page: checkpoint density and policies — interval vs memory vs recompute at 48B sizes: the cost
model, the simulator live, and the benchmark results (``docs/bench/workloads.csv``).

Widgets and layout only; the arithmetic, the simulator runs, the CSV reading and the figures come
from ``model_viz.figures.checkpoint_density / model_viz.scenarios.checkpoint_density``.
"""

import os

import streamlit as st

from model_viz.ui import step_control as sc

from model_viz.ui import page_parts
from model_viz.figures import checkpoint_density as dn_fig
from model_viz.scenarios import checkpoint_density as dn
from model_viz.i18n import t



def _choice(widget, name: str, label: str, options, default, **kw):
    return sc.lang_keyed_choice(widget, name, label, options, default, **kw)


@st.cache_data(show_spinner=False, max_entries=256)
def _sim(family: str, interval, budget_gib: float, eviction: str, model: str) -> dict:
    return dn.simulate(family, interval, budget_gib, eviction, model=model)


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


st.title(t("checkpoint_density.title"))
fam = page_parts.model_family("checkpoint_density")
model_name = t(fam.real_label)
cost = dn.cost_model(fam.key)
f = dn.cost_facts(cost)
st.markdown(t("checkpoint_density.intro", model=model_name, mib=f"{f['state_mib']:.1f}",
              kv=f"{f['kv_bytes_per_token']:,}", be=f"{f['break_even_tokens']:,.0f}", n_kda=f["n_kda"], n_mla=f["n_mla"]))

# ---- (1) the cost model --------------------------------------------------------------------------
st.subheader(t("checkpoint_density.cost.header"))
m1, m2, m3 = st.columns(3)
m1.metric(t("checkpoint_density.metric.state", model=model_name), f"{f['state_mib']:.1f} MiB")
m2.metric(t("checkpoint_density.metric.kv", model=model_name), f"{f['kv_bytes_per_token']:,} B")
m3.metric(t("checkpoint_density.metric.break_even"), f"{f['break_even_tokens']:,.0f}")
N = st.select_slider(t("checkpoint_density.cost.n_label"), options=list(dn.BREAK_EVEN_N), value=1024, key="checkpoint_density_n")
page_parts.chart(dn_fig.cost_figure(N, cost=cost), "checkpoint_density_cost")
table = [{t("checkpoint_density.table.n"): r["N"], t("checkpoint_density.table.ratio"): f"{r['ratio']:.2f}×",
          t("checkpoint_density.table.state"): f"{r['state_mib_per_1k']:,.1f}",
          t("checkpoint_density.table.kv"): f"{r['kv_mib_per_1k']:.2f}",
          t("checkpoint_density.table.tokens"): f"{r['recompute_tokens']:,.1f}",
          t("checkpoint_density.table.ms"): f"{r['recompute_ms']:.2f}"}
         for r in dn.break_even_rows(cost=cost)]
st.dataframe(table, hide_index=True, width="stretch")
st.caption(t("checkpoint_density.cost.caption", at=dn.TYPICAL_PREFIX))

# ---- (2) the simulator, live ------------------------------------------------------------------------
st.subheader(t("checkpoint_density.sim.header"))
st.markdown(t("checkpoint_density.sim.text", n=dn.NUM_REQUESTS, n_long=dn.REQUESTS["long_document_qa"], B=dn.BLOCK_SIZE,
              U=dn.HASH_UNIT, model=model_name))
c1, c2 = st.columns(2)
family = _choice(c1.selectbox, "checkpoint_density_family", t("checkpoint_density.family_label"), dn.FAMILY_NAMES, dn.FAMILY_NAMES[0],
                 format_func=lambda x: t(dn_fig.FAMILY_LABEL[x]))
eviction = _choice(c2.radio, "checkpoint_density_eviction", t("checkpoint_density.eviction_label"), dn.EVICTIONS, "lru", horizontal=True,
                   format_func=lambda e: t(dn_fig.EVICTION_LABEL[e]))
k_iv = _choice(st.select_slider, "checkpoint_density_interval", t("checkpoint_density.interval_label"), list(range(len(dn.INTERVALS))), 0,
               format_func=lambda k: dn_fig.interval_label(dn.INTERVALS[k]))
interval = dn.INTERVALS[k_iv]
budget = st.select_slider(t("checkpoint_density.budget_label", model=model_name), options=list(dn.BUDGETS_GIB), value=4, key="checkpoint_density_budget",
                          format_func=lambda b: f"{b} GiB")
with st.spinner(t("checkpoint_density.sim.running")):
    rows = [_sim(family, iv, float(budget), eviction, fam.key) for iv in dn.INTERVALS]
r = rows[k_iv]
failed = [x["error"] for x in rows if "error" in x]
if failed:
    st.warning(t("checkpoint_density.sim.failed", msg=failed[0]))
if "error" in r:
    r = None
if r is not None:
    k1, k2, k3, k4, k5 = st.columns(5)
    k1.metric(t("checkpoint_density.metric.hit_rate"), f"{r['token_hit_rate']:.1%}")
    k2.metric(t("checkpoint_density.metric.flops"), f"{r['flops_saved_frac']:.1%}", help=f"{r['flops_saved_tflops']:,.0f} TFLOPs")
    k3.metric(t("checkpoint_density.metric.mean_ckpt"), f"{r['mean_checkpoint_gib']:.2f} GiB",
              help=t("checkpoint_density.metric.peak_help", peak=f"{r['peak_checkpoint_gib']:.2f}"))
    k4.metric(t("checkpoint_density.metric.evictions"), f"{r['evictions']:,}")
    k5.metric(t("checkpoint_density.metric.ttft"), f"{r['ttft_mean_ms']:.0f} ms", help=f"p95 {r['ttft_p95_ms']:.0f} ms")
    st.caption(t("checkpoint_density.sim.caption", n=r["requests"], wall=f"{r['wall_s']:.2f}",
                 wall_all=f"{sum(x.get('wall_s', 0.0) for x in rows):.1f}"))
page_parts.chart(dn_fig.sweep_figure(rows, interval, float(budget)), "checkpoint_density_sweep")

# ---- (3) the benchmark results -----------------------------------------------------------------------
st.subheader(t("checkpoint_density.bench.header"))
st.markdown(t("checkpoint_density.bench.text", cmd=dn.BENCH_COMMAND))
bench, err = _csv("bench", str(dn.WORKLOADS_CSV), _stamp(dn.WORKLOADS_CSV))
if err is not None and err[0] == "checkpoint_density.bench.missing":
    st.info(t(err[0], **err[1]))
elif err is not None:
    st.error(t(err[0], **err[1]))
else:
    fams = dn.families_in(bench)
    bfam = _choice(st.selectbox, "checkpoint_density_bench_family", t("checkpoint_density.bench.family_label"), fams, fams[0],
                   format_func=dn_fig.family_name)
    page_parts.chart(dn_fig.bench_figure(bench, bfam, "token_hit_rate"), "checkpoint_density_bench_hit")
    page_parts.chart(dn_fig.bench_figure(bench, bfam, "flops_saved_frac"), "checkpoint_density_bench_flops")
    with st.expander(t("checkpoint_density.bench.table")):
        st.dataframe([x for x in bench if x["family"] == bfam], hide_index=True, width="stretch")

# ---- (4) the tiny engine's density benchmark -------------------------------------------------------------
st.subheader(t("checkpoint_density.tiny.header"))
st.markdown(t("checkpoint_density.tiny.text"))
tiny, terr = _csv("prefix", str(dn.PREFIX_CSV), _stamp(dn.PREFIX_CSV))
if terr is not None and terr[0] == "checkpoint_density.bench.missing":
    st.info(t("checkpoint_density.tiny.missing", path=terr[1]["path"]))
elif terr is not None:
    st.error(t(terr[0], **terr[1]))
else:
    wl = _choice(st.radio, "checkpoint_density_tiny_workload", t("checkpoint_density.tiny.workload_label"),
                 dn.families_in(tiny, "workload"), dn.families_in(tiny, "workload")[0], horizontal=True,
                 format_func=dn_fig.family_name)
    page_parts.chart(dn_fig.prefix_figure(tiny, wl), "checkpoint_density_tiny")
    same = all(str(x.get("same_tokens_as_no_cache", "True")) == "True" for x in tiny)
    st.caption(t("checkpoint_density.tiny.same" if same else "checkpoint_density.tiny.not_same"))

page_parts.page_end(t("checkpoint_density.watch"), dn_fig.PAGE_CONCEPTS, expanded=False)
