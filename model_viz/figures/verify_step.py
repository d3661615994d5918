"""One speculative verify step, drawn as what it is (``docs/article.md#s0``, the speculative-decoding row).

:func:`verify_cells` (per request, one cell per position and its fate), :func:`verify_step_figure` (the
grid) and :func:`verify_rows` (what each request kept and what its strategy did to the state), from the
trace's :class:`kda_ref.trace.SpecVerify` records. SGLang commits ``intermediate_ssm`` after
``TritonKDAKernel.target_verify``; vLLM reads ``num_accepted_tokens`` (concept ``spec.state_rollback``).
The engine side is :meth:`kda_ref.speculative.RollbackStrategy.commit`.

Design notes: ``docs/visualizer.md#the-verify-step-figure``.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..i18n import t as tr
from ..scenarios.engine_trace import StepView

# fate -> (colour, i18n key of its legend)
FATES = {"committed": ("#4e79a7", "common.verify.fate.committed"), "accepted": ("#59a14f", "common.verify.fate.accepted"),
         "cut": ("#edc948", "common.verify.fate.cut"), "rejected": ("#e15759", "common.verify.fate.rejected"),
         "next": ("#b07aa1", "common.verify.fate.next"), "none": ("#eef1f5", "common.verify.fate.none")}
FATE_CODE = {f: i for i, f in enumerate(FATES)}
# each registered strategy's commit, in words (a strategy this module does not know gets the generic line)
COMMIT_TEXT = {"per_step": "common.verify.commit.per_step", "slots": "common.verify.commit.slots",
               "replay": "common.verify.commit.replay", "recoverssm": "common.verify.commit.recoverssm"}


def token_label(tok: int | None) -> str:
    """A byte token as its character (``␣`` for a space, ``⏎`` for a newline), any other id as ``#id``."""
    if tok is None:
        return "?"
    if tok == 32:
        return "␣"
    if tok == 10:
        return "⏎"
    if 33 <= tok < 127:
        return chr(tok)
    return f"#{tok}"


def _depth_tokens(v) -> list[str]:
    """The token shown at each draft depth: a chain's drafts; a tree's accepted branch, then how many
    candidate nodes the rejected depths held."""
    if v.tree_parents is None:
        return [token_label(d) for d in v.drafts]
    depth: list[int] = []
    for p in v.tree_parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    path = list(v.accepted_path or [])
    out = []
    for d in range(1, max(depth, default=0) + 1):
        out.append(token_label(path[d - 1]) if d <= len(path) else f"×{depth.count(d)}")
    return out


def verify_cells(view: StepView) -> list[dict]:
    """One dict per verifying request, in batch order: ``req``, ``tokens`` (labels) and ``fates`` over
    the positions committed token, drafts 1..k, next token."""
    rows = []
    for v in sorted(view.verifies, key=lambda e: view.batch.req_ids.index(e.req_id)
                    if e.req_id in view.batch.req_ids else 1 << 30):
        fates = ["committed", *v.verdicts(), "next" if v.kept == v.num_accepted + 1 else "none"]
        tokens = [token_label(v.root_token), *_depth_tokens(v), token_label(v.next_token)]
        rows.append({"req": v.req_id, "tokens": tokens, "fates": fates})
    return rows


def verify_step_figure(view: StepView) -> go.Figure:
    """The step's verifies as a grid: a row per request, a column per position (committed token, the
    drafts, the target's next token), coloured by fate."""
    cells = verify_cells(view)
    width = max((len(c["fates"]) for c in cells), default=2)
    xlab = [tr("common.verify.col.committed")] + [tr("common.verify.col.draft", j=j)
                                                       for j in range(1, width - 1)] + [tr("common.verify.col.next")]
    z, text, ylab = [], [], []
    for c in cells:  # shorter rows (fewer drafts) padded in the middle, the next token kept last
        pad = width - len(c["fates"])
        fates = c["fates"][:-1] + ["none"] * pad + c["fates"][-1:]
        toks = c["tokens"][:-1] + [""] * pad + c["tokens"][-1:]
        z.append([FATE_CODE[f] for f in fates])
        text.append([f"<b>{tok}</b><br>{tr(FATES[f][1])}" if f != "none" else "" for tok, f in zip(toks, fates)])
        ylab.append(f"r{c['req']}")
    n = len(FATES)
    scale = []
    for i, (col, _) in enumerate(FATES.values()):
        scale += [[i / n, col], [(i + 1) / n, col]]
    fig = go.Figure(go.Heatmap(z=z, x=xlab, y=ylab, zmin=-0.5, zmax=n - 0.5, colorscale=scale, showscale=False,
                               xgap=3, ygap=3, text=text, texttemplate="%{text}", textfont=dict(size=12),
                               hoverinfo="skip"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(side="top", type="category")
    fig.update_layout(title=dict(text=tr("common.verify.title", step=view.step), x=0.0, font=dict(size=15)),
                      height=120 + 46 * max(1, len(cells)), margin=dict(l=20, r=20, t=90, b=10),
                      uirevision="verify-step")
    return fig


def commit_text(v, slot: int | None) -> str:
    """What the request's rollback strategy did to its KDA state in this step, in words."""
    kept_row = v.committed_row
    key = COMMIT_TEXT.get(v.strategy)
    if key is None:
        return tr("common.verify.commit.other", strategy=v.strategy, row=kept_row)
    return tr(key, row=kept_row, slot="?" if slot is None else slot, kept=v.kept, k=len(v.drafts))


def verify_rows(view: StepView) -> list[dict]:
    """The table beside the grid: per verifying request, the drafts, how many were kept, the next token,
    the strategy's commit and what was dropped (rejected positions, KV pages freed)."""
    b, rows = view.batch, []
    slot_of = dict(zip(b.req_ids, b.state_indices))
    for v in view.verifies:
        rows.append({
            tr("common.verify.row.req"): f"r{v.req_id}",
            tr("common.verify.row.drafts"): " ".join(_depth_tokens(v)),
            tr("common.verify.row.accepted"): f"{v.num_accepted} / {len(v.drafts)}",
            tr("common.verify.row.kept"): v.kept,
            tr("common.verify.row.strategy"): v.strategy,
            tr("common.verify.row.commit"): commit_text(v, slot_of.get(v.req_id)),
            tr("common.verify.row.dropped"): tr("common.verify.dropped", n=v.rejected,
                                                     pages=", ".join(map(str, v.freed_pages)) or "—"),
        })
    return rows
