"""The "three kinds of state" page (``docs/article.md#s1-2``): byte arithmetic and figures, no Streamlit.

MLA KV grows with the sequence; the KDA recurrent state (``H x K x V`` fp32) and the conv window
(the last ``W - 1`` inputs) are fixed per KDA layer. All numbers come from
:meth:`kda_ref.model.config.ModelConfig.state_bytes`; ``scope`` is ``"layer"`` or ``"model"``.

Design notes: ``docs/visualizer.md#three-kinds-of-state``.
"""

from __future__ import annotations
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from kda_ref.model import ModelConfig
from ..families import DEFAULT_FAMILY, FAMILIES
from ..i18n import t as tr


PAGE_CONCEPTS = ("state.three_kinds", "state.mla_kv", "state.kda_recurrent", "state.conv", "state.bytes", "model.k3")
# each family's two sizes: the project's small model and the released one (model_viz.families)
FAMILY_CONFIGS = {key: {f.small_name: f.small(), f.real_name: f.real()} for key, f in FAMILIES.items()}
CONFIGS = FAMILY_CONFIGS[DEFAULT_FAMILY]  # Kimi-Linear's: "tiny", "48b"
KINDS = ("mla_kv", "kda_recurrent", "conv")
SERVED_TOKENS = 128 * 1024  # the request length of the serving table

# i18n keys, written out whole so a test can see which strings are used
KIND_LABEL = {"mla_kv": "three_states.kind.mla_kv", "kda_recurrent": "three_states.kind.kda_recurrent",
              "conv": "three_states.kind.conv", "kda_total": "three_states.kind.kda_total"}
CONFIG_LABEL = {"tiny": "three_states.cfg.tiny", "48b": "three_states.cfg.48b", "k3_tiny": "three_states.cfg.k3_tiny",
                "k3": "three_states.cfg.k3"}
TITLE = {"layer": "three_states.fig.title.layer", "model": "three_states.fig.title.model"}
KIND_COLORS = {"mla_kv": "#d62728", "kda_recurrent": "#1f77b4", "conv": "#2ca02c", "kda_total": "#1f77b4"}
MAX_LEN = 8192
LEN_STEP = 128
DEFAULT_LEN = 1024
WINDOW_VIEW = 24  # positions shown in the window diagram

# plot units per config: (divisor, unit label)
UNITS = {"tiny": (1024, "KiB"), "48b": (1024 * 1024, "MiB"), "k3_tiny": (1024, "KiB"), "k3": (1024 * 1024, "MiB")}


def clamp_len(T, max_len: int = MAX_LEN, step: int = LEN_STEP) -> int:
    """A valid slider position: a multiple of ``step`` in ``[0, max_len]`` (``DEFAULT_LEN`` for ``None``)."""
    if T is None:
        return DEFAULT_LEN
    T = int(round(int(T) / step)) * step
    return max(0, min(T, max_len))


def bytes_at(config: ModelConfig, T: int, scope: str = "layer") -> dict[str, int]:
    """Bytes of each kind held for one sequence of ``T`` tokens: ``mla_kv``, ``kda_recurrent``,
    ``conv`` and ``kda_total`` (recurrent + conv)."""
    if scope not in ("layer", "model"):
        raise ValueError(f"scope: must be 'layer' or 'model', got {scope!r}")
    if T < 0:
        raise ValueError(f"T: must be >= 0, got {T}")
    b = config.state_bytes()
    n_kda, n_mla = (1, 1) if scope == "layer" else (len(config.kda_layer_ids), len(config.mla_layer_ids))
    out = {
        "mla_kv": T * n_mla * b["mla_kv_per_token_per_layer"],
        "kda_recurrent": n_kda * b["kda_recurrent_per_layer"],
        "conv": n_kda * b["kda_conv_per_layer"],
    }
    out["kda_total"] = out["kda_recurrent"] + out["conv"]
    return out


def break_even(config: ModelConfig, scope: str = "layer") -> float:
    """Tokens at which the MLA KV of the scope costs as much as its KDA states (recurrent + conv)."""
    one = bytes_at(config, 1, scope)
    return one["kda_total"] / one["mla_kv"]


def fmt_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'`` (binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def size_rows(T: int, scope: str, family: str = DEFAULT_FAMILY) -> list[dict]:
    """Table rows at length ``T``: one per kind, a column per config (formatted bytes): ``family``'s small
    model, then both released models (Kimi-Linear-48B and Kimi K3)."""
    columns = {FAMILIES[family].small_name: FAMILY_CONFIGS[family][FAMILIES[family].small_name],
               "48b": CONFIGS["48b"], "k3": FAMILY_CONFIGS["k3"]["k3"]}
    rows = []
    for kind in (*KINDS, "kda_total"):
        row = {tr("three_states.col.kind"): tr(KIND_LABEL[kind])}
        for name, cfg in columns.items():
            row[tr(CONFIG_LABEL[name])] = fmt_bytes(bytes_at(cfg, T, scope)[kind])
        rows.append(row)
    return rows


SERVING_LABEL = {"recurrent": "three_states.serving.recurrent", "conv": "three_states.serving.conv",
                 "kv_token": "three_states.serving.kv_token", "checkpoint": "three_states.serving.checkpoint",
                 "request": "three_states.serving.request"}
SERVING_ROWS = tuple(SERVING_LABEL)


def serving_bytes(config: ModelConfig, tokens: int = SERVED_TOKENS) -> dict[str, int]:
    """What serving one request costs, as served (fp32 state, bf16 conv and KV): one KDA layer's
    recurrent state and conv window, the MLA KV of one token (all MLA layers), one checkpoint (every KDA
    layer's state and window: what a prefix cache keeps per boundary) and a request of ``tokens`` tokens
    (its states and its KV)."""
    b = config.state_bytes()
    return {"recurrent": b["kda_recurrent_per_layer"], "conv": b["kda_conv_per_layer"], "kv_token": b["mla_kv_per_token"],
            "checkpoint": b["kda_per_seq"], "request": b["kda_per_seq"] + tokens * b["mla_kv_per_token"]}


def serving_rows(tokens: int = SERVED_TOKENS) -> list[dict]:
    """The serving table: a row per :data:`SERVING_ROWS` entry, a column per released model."""
    cols = {"48b": serving_bytes(CONFIGS["48b"], tokens), "k3": serving_bytes(FAMILY_CONFIGS["k3"]["k3"], tokens)}
    return [{tr("three_states.col.what"): tr(SERVING_LABEL[r], n=f"{tokens // 1024}k"),
             **{tr(CONFIG_LABEL[name]): fmt_bytes(v[r]) for name, v in cols.items()}} for r in SERVING_ROWS]


def checkpoint_ratio() -> float:
    """How many times a Kimi K3 checkpoint outweighs a Kimi-Linear-48B one."""
    return serving_bytes(FAMILY_CONFIGS["k3"]["k3"])["checkpoint"] / serving_bytes(CONFIGS["48b"])["checkpoint"]


def bytes_figure(T: int, scope: str = "layer", *, max_len: int = MAX_LEN,
                 family: str = DEFAULT_FAMILY) -> go.Figure:
    """Bytes per kind over sequence length, ``family``'s small and released model side by side; a marker
    at ``T``, the break-even length marked. Axes are fixed: x ``[0, max_len]``, y up to the MLA KV at
    ``max_len``."""
    configs = FAMILY_CONFIGS[family]
    names = list(configs)
    fig = make_subplots(rows=1, cols=2, subplot_titles=[tr(CONFIG_LABEL[n]) for n in names],
                        horizontal_spacing=0.09)
    xs = list(range(0, max_len + 1, LEN_STEP))
    for c, name in enumerate(names, start=1):
        cfg = configs[name]
        div, unit = UNITS[name]
        series = {k: [bytes_at(cfg, x, scope)[k] / div for x in xs] for k in (*KINDS, "kda_total")}
        for kind in (*KINDS, "kda_total"):
            dash = "dot" if kind == "kda_total" else "solid"
            fig.add_trace(go.Scatter(
                x=xs, y=series[kind], mode="lines", name=tr(KIND_LABEL[kind]), legendgroup=kind,
                showlegend=c == 1, line=dict(color=KIND_COLORS[kind], width=2.5 if kind != "kda_total" else 1.5,
                                             dash=dash),
                hovertemplate=f"T=%{{x}}<br>%{{y:.2f}} {unit}<extra>{tr(KIND_LABEL[kind])}</extra>",
            ), row=1, col=c)
        now = bytes_at(cfg, T, scope)
        fig.add_trace(go.Scatter(
            x=[T] * len(KINDS), y=[now[k] / div for k in KINDS], mode="markers", name=tr("three_states.fig.current"),
            legendgroup="current", showlegend=c == 1,
            marker=dict(size=11, color=[KIND_COLORS[k] for k in KINDS], line=dict(color="black", width=1.5)),
            hoverinfo="skip",
        ), row=1, col=c)
        be = break_even(cfg, scope)
        fig.add_vline(x=be, line=dict(color="#555", dash="dash", width=1.2), row=1, col=c)
        y_top = bytes_at(cfg, max_len, scope)["mla_kv"] / div * 1.05
        fig.add_annotation(x=be, y=y_top, text=tr("three_states.fig.break_even", n=f"{be:,.0f}"), showarrow=False,
                           xanchor="left", yanchor="top", font=dict(size=12), row=1, col=c)
        fig.add_vline(x=T, line=dict(color="rgba(0,0,0,0.45)", width=1.5, dash="dot"), row=1, col=c)
        fig.update_xaxes(range=[0, max_len], title_text=tr("three_states.fig.x"), row=1, col=c)
        fig.update_yaxes(range=[0, y_top], title_text=tr("three_states.fig.y", unit=unit), row=1, col=c)
    fig.update_layout(
        title=dict(text=tr(TITLE[scope], T=T), x=0.0, y=0.97, yref="container",
                   font=dict(size=15)),
        height=440, margin=dict(l=60, r=20, t=110, b=50), hovermode="closest", uirevision=f"states-{scope}-{family}",
        legend=dict(orientation="h", yanchor="bottom", y=1.08, xanchor="left", x=0.0),
    )
    return fig


def window_figure(T: int, config: ModelConfig | None = None, *, view: int = WINDOW_VIEW) -> go.Figure:
    """What each kind holds after ``T`` tokens, over the last ``view`` positions: MLA KV has a row
    for every token so far, the conv window the last ``W - 1`` inputs, the KDA state one fixed
    matrix that summarises all of them."""
    cfg = config or CONFIGS["tiny"]
    W = cfg.short_conv_kernel_size
    start = max(0, T - view)
    xs = list(range(start, start + view))
    rows = ["mla_kv", "conv", "kda_recurrent"]
    z = []
    for kind in rows[:2]:
        if kind == "mla_kv":
            z.append([1 if p < T else 0 for p in xs])
        else:
            z.append([2 if T - (W - 1) <= p < T else 0 for p in xs])
    z.append([0] * len(xs))  # the state is drawn as one box below, not as per-token cells
    scale = [[0, "#f4f5f7"], [0.25, "#f4f5f7"], [0.25, KIND_COLORS["mla_kv"]], [0.5, KIND_COLORS["mla_kv"]],
             [0.5, KIND_COLORS["conv"]], [0.75, KIND_COLORS["conv"]], [0.75, KIND_COLORS["kda_recurrent"]],
             [1.0, KIND_COLORS["kda_recurrent"]]]
    ylab = [tr(KIND_LABEL[k]) for k in rows]
    fig = go.Figure(go.Heatmap(z=z, x=xs, y=ylab, zmin=0, zmax=3, colorscale=scale, showscale=False, xgap=2, ygap=6,
                               hovertemplate="position %{x}<extra>%{y}</extra>"))
    H, D = cfg.linear_num_heads, cfg.linear_head_dim
    if T > 0:
        fig.add_shape(type="rect", x0=xs[0] - 0.5, x1=xs[-1] + 0.5, y0=1.62, y1=2.38, line=dict(width=0),
                      fillcolor=KIND_COLORS["kda_recurrent"])
        fig.add_annotation(x=(xs[0] + xs[-1]) / 2, y=ylab[2], showarrow=False, font=dict(color="white", size=13),
                           text=tr("three_states.fig.window.state", H=H, K=D, V=D, T=T))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(range=[xs[0] - 0.5, xs[-1] + 0.5], title_text=tr("three_states.fig.window.x"))
    fig.update_layout(title=dict(text=tr("three_states.fig.window.title", T=T, W=W), x=0.0, font=dict(size=15)),
                      height=260, margin=dict(l=20, r=20, t=60, b=45), uirevision="states-window")
    return fig
