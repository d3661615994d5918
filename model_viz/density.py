"""The data and figures of the "Checkpoint density and policies" page (article section 9.2).

Three views of one trade-off — how often to keep a KDA state — at Kimi-Linear-48B's sizes:

* **cost model** (:func:`cost_facts`, :func:`break_even_rows`, :func:`cost_figure`): one state weighs
  as much as ``state_bytes / kv_bytes_per_token`` tokens of MLA KV, so a checkpoint every ``N``
  tokens costs ``state_bytes / (N * kv_bytes_per_token)`` times the KV of the same span, while a hit
  that lands between two checkpoints recomputes on average ``(N - 1) / 2`` tokens
  (:class:`~kda_ref.cache.cost.CostModel`, pure arithmetic);
* **simulator, live** (:func:`simulate`, :func:`sweep_figure`): a seeded ``scale="large"`` workload
  of :data:`NUM_REQUESTS` requests (:data:`REQUESTS` per family where fewer) through the engine's own block cache over a
  :class:`~kda_ref.memory.VirtualPool` (:class:`~kda_ref.sim.CacheSimulator`) — retention interval,
  memory budget and eviction chosen on the page, well under two seconds a run;
* **benchmark** (:func:`load_bench`, :func:`bench_figure`): ``docs/bench/workloads.csv`` written by
  ``kda-ref bench workloads`` (every family x budget x policy), and ``docs/bench/prefix_cache.csv``
  (the tiny engine's density benchmark, outputs verified against runs without cache).

A missing or malformed CSV raises :class:`BenchError` with a message key; the page shows it and
keeps working.
"""

from __future__ import annotations

import csv
import functools
import math
import pathlib

import plotly.graph_objects as go

from kda_ref import ModelConfig
from kda_ref.cache.cost import CostModel
from kda_ref.sim import CacheSimulator
from kda_ref.sim.simulator import SimulationError
from kda_ref.workloads import FAMILIES, make

from .i18n import t

PAGE_CONCEPTS = ("cache.checkpoint_density", "vllm.retention", "vllm.mamba_cache_mode", "vllm.block_eviction",
                 "marconi.eviction", "marconi.alpha_tuning")

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKLOADS_CSV = ROOT / "docs" / "bench" / "workloads.csv"
PREFIX_CSV = ROOT / "docs" / "bench" / "prefix_cache.csv"
BENCH_COMMAND = "kda-ref bench workloads"

FAMILY_NAMES = tuple(FAMILIES)
NUM_REQUESTS = 100
# long_document_qa's prompts are ~22k tokens (7x the others): fewer requests keep a run around a second
REQUESTS = {"long_document_qa": 40}
SEED = 0
BLOCK_SIZE, HASH_UNIT = 512, 16
# retention choices: None = dense (a state per block), N = one per N tokens (+ reachable), 0 = reachable only
INTERVALS = (None, 1024, 2048, 4096, 8192, 0)
BUDGETS_GIB = (1, 2, 4, 8, 16, 32, 64)
EVICTIONS = ("lru", "marconi")
BREAK_EVEN_N = (64, 256, 512, 1024, 2048, 4096, 8192, 16384)
TYPICAL_PREFIX = 8192  # where the cost table prices a recompute (position matters for MLA only)
COLORS = {"hit": "#1f77b4", "flops": "#2ca02c", "ckpt": "#6a1b9a", "ratio": "#d62728", "recompute": "#ff7f0e"}
POLICY_COLORS = ("#7f7f7f", "#1f77b4", "#aec7e8", "#ff7f0e", "#2ca02c", "#98df8a", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#17becf", "#bcbd22")


class BenchError(Exception):
    """A benchmark CSV that is missing or malformed; ``key`` is the i18n message, ``fmt`` its values."""

    def __init__(self, key: str, **fmt):
        super().__init__(key, fmt)
        self.key, self.fmt = key, fmt

    def message(self, lang: str) -> str:
        return t(self.key, lang, **self.fmt)


# ---- cost model -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def cost_model() -> CostModel:
    return CostModel(ModelConfig.kimi_linear_48b())


def cost_facts(cost: CostModel | None = None) -> dict:
    """The 48B byte and FLOP constants the page quotes."""
    c = cost or cost_model()
    return {"state_bytes": c.state_bytes, "state_mib": c.state_bytes / 2**20,
            "kv_bytes_per_token": c.kv_bytes_per_token, "break_even_tokens": c.state_bytes / c.kv_bytes_per_token,
            "gflops_per_token": c.linear_flops_per_token / 1e9}


def ratio(N: int, cost: CostModel | None = None) -> float:
    """A checkpoint every ``N`` tokens, in units of the KV of the same ``N`` tokens."""
    c = cost or cost_model()
    return c.state_bytes / (N * c.kv_bytes_per_token)


def recompute(N: int, cost: CostModel | None = None, at: int = TYPICAL_PREFIX) -> tuple[float, float, float]:
    """A hit at a uniformly random position between two checkpoints ``N`` apart: mean tokens recomputed
    ``(N - 1) / 2``, their prefill TFLOPs and estimated milliseconds (ending at prefix length ``at``)."""
    c = cost or cost_model()
    n = (N - 1) / 2
    k = int(round(n))
    return n, c.prefill_flops(at - k, at) / 1e12, 1e3 * c.prefill_seconds(at - k, at)


def break_even_rows(Ns=BREAK_EVEN_N, cost: CostModel | None = None) -> list[dict]:
    """One row per checkpoint interval: memory of the states vs the KV, and the recompute on a hit."""
    c = cost or cost_model()
    rows = []
    for N in Ns:
        n, tf, ms = recompute(N, c)
        rows.append({"N": N, "ratio": ratio(N, c), "state_mib_per_1k": c.state_bytes / N * 1000 / 2**20,
                     "kv_mib_per_1k": c.kv_bytes_per_token * 1000 / 2**20, "recompute_tokens": n,
                     "recompute_tflops": tf, "recompute_ms": ms})
    return rows


def cost_figure(N: int, lang: str = "en", cost: CostModel | None = None) -> go.Figure:
    """Memory ratio (log) and mean recompute per hit vs the checkpoint interval; ``N`` is marked."""
    c = cost or cost_model()
    xs = [2**k for k in range(5, 16)]  # 32 .. 32768
    be = c.state_bytes / c.kv_bytes_per_token
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[ratio(x, c) for x in xs], mode="lines+markers",
                             name=t("dn.cost.leg.ratio", lang), line=dict(color=COLORS["ratio"], width=2),
                             hovertemplate=t("dn.cost.hover.ratio", lang).format() + "<extra></extra>"))
    fig.add_trace(go.Scatter(x=xs, y=[recompute(x, c)[2] for x in xs], mode="lines+markers", yaxis="y2",
                             name=t("dn.cost.leg.recompute", lang),
                             line=dict(color=COLORS["recompute"], width=2, dash="dot"),
                             hovertemplate=t("dn.cost.hover.recompute", lang).format() + "<extra></extra>"))
    fig.add_trace(go.Scatter(x=[N], y=[ratio(N, c)], mode="markers", name=t("dn.cost.leg.selected", lang, N=N),
                             marker=dict(size=16, color=COLORS["ratio"], symbol="star",
                                         line=dict(color="#222", width=1)),
                             hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[N], y=[recompute(N, c)[2]], mode="markers", yaxis="y2", showlegend=False,
                             marker=dict(size=14, color=COLORS["recompute"], symbol="star",
                                         line=dict(color="#222", width=1)),
                             hoverinfo="skip"))
    fig.add_hline(y=1, line=dict(color="#555", dash="dash"),
                  annotation=dict(text=t("dn.cost.break_even", lang, n=f"{be:,.0f}"), font=dict(size=11)),
                  annotation_position="bottom left")
    fig.add_vline(x=be, line=dict(color="#555", dash="dash", width=1))
    fig.update_layout(
        title=dict(text=t("dn.cost.title", lang, N=N, r=f"{ratio(N, c):.2f}", ms=f"{recompute(N, c)[2]:.2f}")),
        height=360, margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.25, x=0),
        xaxis=dict(type="log", title=t("dn.cost.x", lang), fixedrange=True, range=[math.log10(24), math.log10(45000)]),
        yaxis=dict(type="log", title=t("dn.cost.y", lang), fixedrange=True, range=[-1.5, 3.3]),
        yaxis2=dict(title=t("dn.cost.y2", lang), overlaying="y", side="right", fixedrange=True, showgrid=False,
                    range=[0, recompute(xs[-1], c)[2] * 1.05]))
    return fig


# ---- simulator ----------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=len(FAMILIES))
def workload(family: str):
    return make(family, seed=SEED, scale="large", num_requests=REQUESTS.get(family, NUM_REQUESTS))


def options(interval: int | None, eviction: str) -> dict:
    if interval not in INTERVALS:
        raise ValueError(f"interval: must be one of {INTERVALS}, got {interval!r}")
    if eviction not in EVICTIONS:
        raise ValueError(f"eviction: must be one of {EVICTIONS}, got {eviction!r}")
    return {"block_size": BLOCK_SIZE, "hash_unit": HASH_UNIT, "mamba_cache_mode": "all", "retention_interval": interval,
            "partial_hits": True, "eviction": eviction}


def simulate(family: str, interval: int | None, budget_gib: float, eviction: str) -> dict:
    """One simulator run: the summary of :class:`~kda_ref.sim.SimResult` (hit rate, FLOPs saved,
    checkpoint GiB, TTFT, evictions, wall time). A budget too small for one request of the workload
    gives ``{"error": message}`` instead (the simulator's :class:`SimulationError`)."""
    if family not in FAMILIES:
        raise ValueError(f"family: must be one of {FAMILY_NAMES}, got {family!r}")
    try:
        sim = CacheSimulator(ModelConfig.kimi_linear_48b(), "block", int(budget_gib * 2**30),
                             options(interval, eviction), cost=cost_model())
        return sim.run(workload(family).requests).summary()
    except SimulationError as err:
        return {"error": str(err)}


def interval_label(interval: int | None, lang: str) -> str:
    if interval is None:
        return t("dn.interval.dense", lang, B=BLOCK_SIZE)
    if interval == 0:
        return t("dn.interval.reachable", lang)
    return t("dn.interval.n", lang, N=interval)


def sweep_figure(rows: list[dict], selected: int | None, budget_gib: float, lang: str = "en") -> go.Figure:
    """Hit rate, FLOPs saved and mean checkpoint memory (as a share of the budget) per retention
    setting, at one budget. ``rows[k]`` is the summary for ``INTERVALS[k]`` (a failed run, with an
    ``"error"``, has no bars)."""
    labels = [interval_label(iv, lang) for iv in INTERVALS]
    nan = float("nan")
    rows = [r if "error" not in r else {"token_hit_rate": nan, "flops_saved_frac": nan, "mean_checkpoint_gib": nan,
                                         "evictions": 0} for r in rows]
    k = INTERVALS.index(selected)
    op = [1.0 if j == k else 0.45 for j in range(len(INTERVALS))]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[r["token_hit_rate"] for r in rows], name=t("dn.sweep.hit", lang),
                         marker=dict(color=COLORS["hit"], opacity=op),
                         hovertemplate="%{x}: %{y:.1%}<extra></extra>"))
    fig.add_trace(go.Bar(x=labels, y=[r["flops_saved_frac"] for r in rows], name=t("dn.sweep.flops", lang),
                         marker=dict(color=COLORS["flops"], opacity=op),
                         hovertemplate="%{x}: %{y:.1%}<extra></extra>"))
    fig.add_trace(go.Scatter(x=labels, y=[r["mean_checkpoint_gib"] / budget_gib for r in rows], mode="lines+markers",
                             name=t("dn.sweep.ckpt", lang), line=dict(color=COLORS["ckpt"]),
                             marker=dict(size=[14 if j == k else 8 for j in range(len(INTERVALS))]),
                             customdata=[[r["mean_checkpoint_gib"], r["evictions"]] for r in rows],
                             hovertemplate=t("dn.sweep.hover.ckpt", lang).format() + "<extra></extra>"))
    sel = rows[k]
    fig.update_layout(
        title=dict(text=t("dn.sweep.title", lang, b=f"{budget_gib:g}", name=labels[k],
                          hit=f"{sel['token_hit_rate']:.1%}", flops=f"{sel['flops_saved_frac']:.1%}")),
        barmode="group", height=360, margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.2, x=0),
        yaxis=dict(range=[0, 1.05], tickformat=".0%", title=t("dn.sweep.y", lang), fixedrange=True),
        xaxis=dict(title=t("dn.sweep.x", lang), fixedrange=True))
    return fig


# ---- benchmark CSVs -------------------------------------------------------------------------------------
BENCH_REQUIRED = ("family", "budget_gib", "policy", "token_hit_rate", "flops_saved_frac")
BENCH_NUMERIC = ("budget_gib", "token_hit_rate", "flops_saved_frac", "prefill_tflops", "flops_saved_tflops",
                 "peak_checkpoint_gib", "mean_checkpoint_gib", "ttft_mean_ms", "ttft_p95_ms", "hits", "evictions",
                 "requests", "wall_s")
PREFIX_REQUIRED = ("workload", "policy", "budget_mb", "prompt_tokens", "cached_prompt_tokens", "48b_checkpoint_gib")


def _read_csv(path, required: tuple, numeric: tuple) -> list[dict]:
    path = pathlib.Path(path)
    if not path.is_file():
        raise BenchError("dn.bench.missing", path=_rel(path), cmd=BENCH_COMMAND)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise BenchError("dn.bench.bad", path=_rel(path), msg=f"missing columns {', '.join(missing)}")
            rows = []
            for n, raw in enumerate(reader, start=2):
                row = dict(raw)
                for col in numeric:
                    if col not in row or row[col] in (None, ""):
                        if col in required:
                            raise BenchError("dn.bench.bad", path=_rel(path), msg=f"line {n}: {col} is empty")
                        row[col] = None
                        continue
                    try:
                        row[col] = float(row[col])
                    except ValueError:
                        raise BenchError("dn.bench.bad", path=_rel(path),
                                         msg=f"line {n}: {col} = {row[col]!r} is not a number") from None
                    if not math.isfinite(row[col]):
                        raise BenchError("dn.bench.bad", path=_rel(path), msg=f"line {n}: {col} is not finite")
                if any(not row.get(c) for c in required if c not in numeric):
                    raise BenchError("dn.bench.bad", path=_rel(path), msg=f"line {n}: an empty text field")
                rows.append(row)
    except UnicodeDecodeError as err:
        raise BenchError("dn.bench.bad", path=_rel(path), msg=f"not UTF-8 text ({err.reason})") from None
    except csv.Error as err:
        raise BenchError("dn.bench.bad", path=_rel(path), msg=str(err)) from None
    if not rows:
        raise BenchError("dn.bench.bad", path=_rel(path), msg="no data rows")
    return rows


def _rel(path: pathlib.Path) -> str:
    try:
        return str(pathlib.Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def load_bench(path=None) -> list[dict]:
    """Rows of ``docs/bench/workloads.csv`` (numbers parsed); :class:`BenchError` if missing or bad."""
    rows = _read_csv(WORKLOADS_CSV if path is None else path, BENCH_REQUIRED, BENCH_NUMERIC)
    for r in rows:
        for col in ("token_hit_rate", "flops_saved_frac"):
            if not -1e-9 <= r[col] <= 1 + 1e-9:
                raise BenchError("dn.bench.bad", path=_rel(pathlib.Path(path or WORKLOADS_CSV)),
                                 msg=f"{col} = {r[col]} is not a fraction in [0, 1]")
    return rows


def load_prefix(path=None) -> list[dict]:
    """Rows of ``docs/bench/prefix_cache.csv`` (the tiny engine's density benchmark)."""
    return _read_csv(PREFIX_CSV if path is None else path, PREFIX_REQUIRED,
                     ("budget_mb", "prompt_tokens", "cached_prompt_tokens", "48b_checkpoint_gib"))


def families_in(rows: list[dict], col: str = "family") -> list[str]:
    return list(dict.fromkeys(r[col] for r in rows))


def _policy_colors(policies: list[str]) -> dict[str, str]:
    return {p: POLICY_COLORS[i % len(POLICY_COLORS)] for i, p in enumerate(policies)}


def bench_figure(rows: list[dict], family: str, metric: str, lang: str = "en") -> go.Figure:
    """One workload family: ``metric`` (``token_hit_rate`` or ``flops_saved_frac``) per policy vs the
    memory budget — lines for the hit rate, grouped bars for the FLOPs saved. Policy colours are fixed
    over the whole file, the y axis is [0, 1]."""
    if metric not in ("token_hit_rate", "flops_saved_frac"):
        raise ValueError(f"metric: must be token_hit_rate or flops_saved_frac, got {metric!r}")
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    colors = _policy_colors(policies)
    budgets = sorted({r["budget_gib"] for r in rows})
    mine = [r for r in rows if r["family"] == family]
    fig = go.Figure()
    for p in policies:
        pts = sorted((r["budget_gib"], r[metric]) for r in mine if r["policy"] == p)
        if not pts:
            continue
        xs = [f"{b:g}" for b, _ in pts]
        ys = [y for _, y in pts]
        if metric == "token_hit_rate":
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=p, line=dict(color=colors[p], width=2),
                                     hovertemplate=f"{p}<br>%{{x}} GiB: %{{y:.1%}}<extra></extra>"))
        else:
            fig.add_trace(go.Bar(x=xs, y=ys, name=p, marker=dict(color=colors[p]),
                                 hovertemplate=f"{p}<br>%{{x}} GiB: %{{y:.1%}}<extra></extra>"))
    name = "hit" if metric == "token_hit_rate" else "flops"
    fig.update_layout(
        title=dict(text=t(f"dn.bench.{name}.title", lang, family=family)), barmode="group", height=400,
        margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.28, x=0, font=dict(size=11)),
        xaxis=dict(type="category", categoryorder="array", categoryarray=[f"{b:g}" for b in budgets],
                   title=t("dn.bench.x", lang), fixedrange=True),
        yaxis=dict(range=[0, 1.05], tickformat=".0%", title=t(f"dn.bench.{name}.y", lang), fixedrange=True))
    return fig


def prefix_figure(rows: list[dict], workload_name: str, lang: str = "en") -> go.Figure:
    """The tiny engine's density benchmark for one workload: reused share of the prompt tokens per policy
    and budget, with the 48B checkpoint GiB those states would take as the bar text."""
    budgets = sorted({r["budget_mb"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    mine = [r for r in rows if r["workload"] == workload_name]
    palette = ("#c6dbef", "#6baed6", "#2171b5", "#08306b", "#4a1486")
    fig = go.Figure()
    for j, b in enumerate(budgets):
        pts = {r["policy"]: r for r in mine if r["budget_mb"] == b}
        fig.add_trace(go.Bar(
            x=[p for p in policies if p in pts],
            y=[pts[p]["cached_prompt_tokens"] / pts[p]["prompt_tokens"] if pts[p]["prompt_tokens"] else 0.0
               for p in policies if p in pts],
            text=[f"{pts[p]['48b_checkpoint_gib']:.2f}" for p in policies if p in pts], textposition="outside",
            name=t("dn.tiny.budget", lang, mb=f"{b:g}"), marker=dict(color=palette[j % len(palette)]),
            hovertemplate=t("dn.tiny.hover", lang).format() + "<extra></extra>"))
    fig.update_layout(
        title=dict(text=t("dn.tiny.title", lang, w=workload_name)), barmode="group", height=360,
        margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.25, x=0),
        xaxis=dict(type="category", categoryorder="array", categoryarray=policies, fixedrange=True),
        yaxis=dict(range=[0, 1.15], tickformat=".0%", title=t("dn.tiny.y", lang), fixedrange=True))
    return fig
