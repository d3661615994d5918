"""The data and figure side of the step-through pages (no Streamlit): traces, steps, figures."""

import itertools
import json

import numpy as np
import pytest

from kda_ref.utils import cdiv
from model_viz.figures import hybrid_chain as cf
from model_viz.scenarios import engine_trace as et


# ---- hybrid execution chain --------------------------------------------------------------------
@pytest.fixture(scope="module")
def chain_trace():
    header, events = et.parse_trace(et.run_scenario(et.PROMPT_LENS[:3], token_budget=16))
    return header, events, et.engine_steps(events)


def test_scenario_chunks_the_long_prompt_and_mixes_phases(chain_trace):
    header, events, views = chain_trace
    assert header["kda_layers"] == [0, 1, 2] and header["mla_layers"] == [3]
    assert all(v.batch.num_tokens <= 16 for v in views)
    # request 0 (40 tokens) is prefilled in chunks: three extend steps with growing context_lens
    r0 = [(v.batch.context_lens[v.batch.req_ids.index(0)], v.batch.phases[v.batch.req_ids.index(0)])
          for v in views if 0 in v.batch.req_ids]
    extends = [c for c, p in r0 if p == "extend"]
    assert extends == [0, 16, 32]
    # the same slot every step
    slots = {v.batch.state_indices[v.batch.req_ids.index(0)] for v in views if 0 in v.batch.req_ids}
    assert len(slots) == 1
    mixed = [v for v in views if set(v.batch.phases) == {"extend", "decode"}]
    assert mixed, "no step mixes prefill chunks and decodes"


def test_grid_shows_one_chunk_call_for_a_mixed_step_by_default(chain_trace):
    _, _, views = chain_trace
    v = next(v for v in views if set(v.batch.phases) == {"extend", "decode"})
    cells = {(c["layer"], c["phase"]): c for c in cf.grid_cells(v, [0, 1, 2], [3])}
    for layer in (0, 1, 2):  # the decodes ride in the chunk kernel's call: the decode column stays idle
        assert cells[(layer, "extend")]["kernel"] == "chunk_kda"
        assert cells[(layer, "extend")]["num_seqs"] == len(v.batch.phases)
        assert cells[(layer, "extend")]["num_tokens"] == v.batch.num_tokens
        assert cells[(layer, "decode")]["code"] == cf.IDLE
    assert cells[(3, "decode")]["kernel"] == "mla_attention_absorbed"  # MLA still decodes per sequence
    extend = [n for n, ph in enumerate(v.batch.phases) if ph == "extend"]  # MLA runs the prefill rows apart
    assert cells[(3, "extend")]["num_seqs"] == len(extend) < cells[(0, "extend")]["num_seqs"]
    assert cells[(3, "extend")]["num_tokens"] == sum(v.batch.cu_seqlens[n + 1] - v.batch.cu_seqlens[n] for n in extend)


def test_grid_counts_every_tree_forward_of_a_verify_step():
    """A draft tree's verify runs one forward per request's tree, after the packed batch: the grid shows
    every forward's nodes, in the KDA rows and the MLA row, as many as the batch's verify segments hold --
    and as many in a trace written before those segments counted the nodes (the root alone)."""
    import dataclasses
    import io

    from kda_ref import LLM, ModelConfig, SamplingParams
    from kda_ref.trace import TraceRecorder

    rec = TraceRecorder()
    llm = LLM(ModelConfig.micro(), seed=0, tracer=rec, speculative="ngram", spec_tree_width=4,
              num_speculative_tokens=3, prompt_lookup_min=1)
    prompt = [5, 6, 7, 8, 5, 6, 7, 9, 5, 6, 7, 8, 5, 6, 7]
    llm.generate([prompt, prompt[::-1]], SamplingParams(max_tokens=12, ignore_eos=True))
    buf = io.StringIO()
    rec.write_jsonl(buf)
    _, events = et.parse_trace(buf.getvalue())
    views = [v for v in et.engine_steps(events) if v.verifies and len(v.dispatches) > len(llm.config.kda_layer_ids)]
    assert views, "no step ran several tree forwards"
    v = views[0]
    per_layer = [d for d in v.dispatches if d.layer == 0 and d.phase == "verify"]
    b = v.batch
    in_batch = sum(b.cu_seqlens[n + 1] - b.cu_seqlens[n] for n, ph in enumerate(b.phases) if ph == "verify")
    old = [1 if n in b.own_forwards else b.cu_seqlens[n + 1] - b.cu_seqlens[n] for n in range(len(b.req_ids))]
    old_cu = [sum(old[:n]) for n in range(len(old) + 1)]
    older = dataclasses.replace(v, batch=dataclasses.replace(b, cu_seqlens=old_cu, num_tokens=old_cu[-1],
                                                             own_forwards=None))
    for view in (v, older):
        cells = {(c["layer"], c["phase"]): c for c in cf.grid_cells(view, [0, 1, 2], [3])}
        assert cells[(0, "verify")]["num_tokens"] == sum(d.num_tokens for d in per_layer) == in_batch
        assert cells[(0, "verify")]["num_seqs"] == sum(d.num_seqs for d in per_layer) == len(per_layer)
        assert cells[(3, "verify")]["num_tokens"] == cells[(0, "verify")]["num_tokens"]


def test_an_aborted_request_is_named_in_its_steps_summary():
    """``LLM.abort`` between steps: the trace's ``request_aborted`` events are the step's, and its summary
    names them (the pages said nothing while listing the memory they freed)."""
    import io

    from kda_ref import LLM, ModelConfig, SamplingParams
    from kda_ref.trace import TraceRecorder

    rec = TraceRecorder()
    llm = LLM(ModelConfig.micro(), seed=0, tracer=rec, max_num_seqs=1)
    sp = SamplingParams(max_tokens=20, ignore_eos=True)
    running, waiting = llm.add_request([1, 2, 3, 4], sp), llm.add_request([5, 6, 7], sp)
    for _ in range(3):
        llm.step()
    llm.abort(running), llm.abort(waiting)
    buf = io.StringIO()
    rec.write_jsonl(buf)
    _, events = et.parse_trace(buf.getvalue())
    views = et.engine_steps(events)
    last = views[-1]
    assert [a.req_id for a in last.aborted] == [running, waiting] and all(not v.aborted for v in views[:-1])
    assert f"r{running}, r{waiting}" in cf.step_summary(last) and "Aborted" in cf.step_summary(last)


def test_grid_shows_both_kernels_in_a_split_mixed_step():
    header, events = et.parse_trace(et.run_scenario(et.PROMPT_LENS[:3], token_budget=16, mixed_batch="split"))
    assert header["mixed_batch"] == "split"
    views = et.engine_steps(events)
    v = next(v for v in views if set(v.batch.phases) == {"extend", "decode"})
    cells = {(c["layer"], c["phase"]): c for c in cf.grid_cells(v, [0, 1, 2], [3])}
    for layer in (0, 1, 2):
        assert cells[(layer, "extend")]["kernel"] == "chunk_kda" and cells[(layer, "extend")]["code"] == cf.CHUNK
        assert cells[(layer, "decode")]["kernel"] == "fused_recurrent_kda"
        assert cells[(layer, "decode")]["code"] == cf.RECURRENT
    assert cells[(3, "extend")]["kernel"] == "mla_attention_naive"
    assert cells[(3, "decode")]["kernel"] == "mla_attention_absorbed"
    n_dec = v.batch.phases.count("decode")
    assert cells[(0, "decode")]["num_seqs"] == n_dec == cells[(0, "decode")]["num_tokens"]
    assert cells[(0, "extend")]["num_tokens"] + n_dec == v.batch.num_tokens
    # a pure prefill step leaves the decode column idle
    first = cf.grid_cells(views[0], [0, 1, 2], [3])
    assert all(c["code"] == cf.IDLE for c in first if c["phase"] == "decode")
    fig = cf.kernel_grid_figure(v, [0, 1, 2], [3])
    z = np.array(fig.data[0].z)
    assert z.shape == (4, 2) and (z[:3, 0] == cf.CHUNK).all() and (z[:3, 1] == cf.RECURRENT).all()
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-0.5, len(cf.GRID_COLORS) - 0.5)


def test_batch_figure_is_the_cu_seqlens(chain_trace):
    _, _, views = chain_trace
    v = next(v for v in views if len(v.batch.req_ids) == 3)
    fig = cf.batch_figure(v, 16)
    cu = v.batch.cu_seqlens
    assert [b.base[0] for b in fig.data] == cu[:-1]
    assert [b.x[0] for b in fig.data] == [b - a for a, b in zip(cu, cu[1:])]
    assert list(fig.layout.xaxis.tickvals) == cu and tuple(fig.layout.xaxis.range) == (0, 16.5)
    decode = [b for b, p in zip(fig.data, v.batch.phases) if p == "decode"]
    assert decode and all(b.marker.pattern.shape == "/" for b in decode)
    # different steps, different data; the axis stays
    other = cf.batch_figure(views[0], 16)
    assert other.layout.xaxis.range == fig.layout.xaxis.range
    assert [b.x[0] for b in other.data] != [b.x[0] for b in fig.data]
    rows = cf.batch_rows(v)
    assert [r["req"] for r in rows] == v.batch.req_ids and sum(r["new_tokens"] for r in rows) == v.batch.num_tokens


def test_timeline_stacks_tokens_and_marks_the_step(chain_trace):
    _, _, views = chain_trace
    fig = cf.timeline_figure(views, 2)
    total = np.sum([np.array(b.y) for b in fig.data], axis=0)
    assert total.tolist() == [v.batch.num_tokens for v in views]
    (rect,) = [s for s in fig.layout.shapes if s.type == "rect"]
    assert rect.x0 == views[2].step - 0.5
    assert tuple(fig.layout.yaxis.range) == (0, 16 * 1.08)  # the budget (16) is the largest batch here
    zh = in_language("zh", cf.timeline_figure, views, 2)
    assert zh.layout.title.text != fig.layout.title.text


def test_a_large_budget_prefills_whole_prompts():
    _, events = et.parse_trace(et.run_scenario(et.PROMPT_LENS[:2], token_budget=64, max_tokens=2))
    views = et.engine_steps(events)
    assert views[0].batch.cu_seqlens == [0, 40, 52]
    assert all(p == "decode" for v in views[1:] for p in v.batch.phases)


def _lines(text):
    return text.rstrip("\n").split("\n")


def test_malformed_traces_name_the_line(chain_trace):
    text = et.run_scenario(et.PROMPT_LENS[:1], token_budget=64, max_tokens=1)
    lines = _lines(text)
    bad = list(lines)
    bad[3] = bad[3][:-5]  # cut a JSON line
    with pytest.raises(et.TraceError) as e:
        et.parse_trace("\n".join(bad))
    assert e.value.key == "common.trace.err.format" and "line 4" in in_language("en", e.value.message) and "line 4" in in_language("zh", e.value.message)
    wrong = json.loads(lines[2])
    wrong["step"] = "two"
    with pytest.raises(et.TraceError, match="line 3"):
        et.parse_trace("\n".join(lines[:2] + [json.dumps(wrong)] + lines[3:]))
    with pytest.raises(et.TraceError, match="line 1"):
        et.parse_trace("\n".join(lines[1:]))  # no header
    with pytest.raises(et.TraceError, match="not UTF-8"):
        et.parse_trace(b"\xff\xfe")
    # a valid trace without any forward step
    head = json.loads(lines[0])
    head["num_events"] = 1
    with pytest.raises(et.TraceError) as e:
        et.parse_trace("\n".join([json.dumps(head), lines[1]]))
    assert e.value.key == "common.trace.err.no_steps"
    header, events = et.parse_trace(text.encode())
    assert et.engine_steps(events)


def test_layer_layout_falls_back_to_the_dispatches(chain_trace):
    _, events, _ = chain_trace
    assert et.layer_layout({}, events) == ([0, 1, 2], [])
    assert et.layer_layout({"kda_layers": [0], "mla_layers": [1]}, events) == ([0], [1])


# ---- three kinds of state ----------------------------------------------------------------------
from model_viz.figures import three_states as ts  # noqa: E402


def test_state_bytes_by_kind():
    tiny, big = ts.CONFIGS["tiny"], ts.CONFIGS["48b"]
    b = ts.bytes_at(big, 1000, "layer")
    assert b["kda_recurrent"] == 32 * 128 * 128 * 4 == 2 << 20  # 2 MiB, whatever T
    assert b["conv"] == 3 * big.kda_dim * 3 * 2
    assert b["mla_kv"] == 1000 * big.mla_latent_dim * 2
    assert ts.bytes_at(big, 5, "layer")["kda_recurrent"] == b["kda_recurrent"]
    m = ts.bytes_at(big, 1000, "model")
    assert m["kda_recurrent"] == 20 * b["kda_recurrent"] and m["mla_kv"] == 7 * b["mla_kv"]
    assert ts.break_even(big, "layer") == pytest.approx(big.state_bytes()["break_even_tokens"])
    assert 1850 < ts.break_even(big, "layer") < 1900
    be = ts.break_even(tiny, "model")
    lo, hi = ts.bytes_at(tiny, int(be), "model"), ts.bytes_at(tiny, int(be) + 1, "model")
    assert lo["mla_kv"] <= lo["kda_total"] < hi["mla_kv"]
    with pytest.raises(ValueError, match="scope"):
        ts.bytes_at(tiny, 1, "head")


def test_clamp_len_and_fmt():
    assert ts.clamp_len(None) == ts.DEFAULT_LEN and ts.clamp_len(-5) == 0 and ts.clamp_len(10**6) == ts.MAX_LEN
    assert ts.clamp_len(130) == 128
    assert ts.fmt_bytes(512) == "512 B" and ts.fmt_bytes(1536) == "1.5 KiB" and ts.fmt_bytes(2 << 20) == "2.0 MiB"


def test_bytes_figure_moves_the_marker_not_the_axes():
    f1, f2 = ts.bytes_figure(512), ts.bytes_figure(4096)
    m1 = [d for d in f1.data if d.mode == "markers"]
    m2 = [d for d in f2.data if d.mode == "markers"]
    assert len(m1) == 2 and m1[0].x[0] == 512 and m2[0].x[0] == 4096
    assert m1[0].y[0] < m2[0].y[0] and m1[0].y[1] == m2[0].y[1]  # KV grows, the state does not
    for ax in ("xaxis", "yaxis", "xaxis2", "yaxis2"):
        assert f1.layout[ax].range == f2.layout[ax].range
    lines = [d for d in f1.data if d.mode == "lines"]
    assert lines[0].y[-1] == pytest.approx(ts.bytes_at(ts.CONFIGS["tiny"], ts.MAX_LEN)["mla_kv"] / 1024)
    # the break-even lines sit at the configs' break-even lengths
    xs = sorted(s.x0 for s in f1.layout.shapes if s.line.dash == "dash")
    assert xs == pytest.approx(sorted(ts.break_even(c) for c in ts.CONFIGS.values()))
    assert ts.bytes_figure(512, "model").layout.title.text != f1.layout.title.text
    assert in_language("zh", ts.bytes_figure, 512).layout.title.text != f1.layout.title.text


def test_window_figure_shows_the_last_inputs():
    fig = ts.window_figure(100)
    z = fig.data[0].z
    xs = list(fig.data[0].x)
    conv_on = [x for x, v in zip(xs, z[1]) if v]
    assert conv_on == [97, 98, 99]
    assert all(v for x, v in zip(xs, z[0]) if x < 100) and not any(v for x, v in zip(xs, z[0]) if x >= 100)
    assert len(fig.layout.shapes) == 1  # the state: one box, whatever T
    empty = ts.window_figure(0)
    assert not any(v for row in empty.data[0].z for v in row) and not empty.layout.shapes


# ---- memory pool map ---------------------------------------------------------------------------
from model_viz.figures import pool_map as pm_fig  # noqa: E402
from model_viz.scenarios import pool_map as pm  # noqa: E402


@pytest.fixture(scope="module")
def pool_trace():
    header, events = et.parse_trace(et.run_scenario(**pm.scenario(pm.DEFAULT_PAGES)))
    return header, et.engine_steps(events)


def test_tight_budget_preempts(pool_trace):
    header, views = pool_trace
    sizes = pm_fig.unit_bytes(header, views)
    budget = pm_fig.budget_of(views)
    assert budget == pm.STATE_SLOTS * sizes["kda_state"] + pm.DEFAULT_PAGES * sizes["mla_kv"]
    pre = pm_fig.preemption_steps(views)
    assert pre and header["preemptions"] == len(pre)
    # bytes by kind always add up to the snapshot's total, never above the budget
    series = pm_fig.used_series(views)
    for j, v in enumerate(views):
        assert sum(series[k][j] for k in pm_fig.KIND_ORDER) == v.pool.used_bytes["total"] <= budget
        assert series["kda_state"][j] == len(pm_fig.owners_at(v, "kda_state")) * sizes["kda_state"]
    # the sizes derived from the snapshots agree with the header's
    assert pm_fig.unit_bytes({}, views)["kda_state"] == sizes["kda_state"]
    assert pm_fig.unit_bytes({}, views)["mla_kv"] == sizes["mla_kv"]
    step, victim = pre[0]
    v = next(v for v in views if v.step == step)
    assert victim not in set(pm_fig.owners_at(v, "kda_state").values()) | set(pm_fig.owners_at(v, "mla_kv").values())
    lines = in_language("en", pm_fig.step_events, v)
    assert lines[0].startswith(f"⚠ **r{victim} preempted**")


def test_pool_area_is_fixed_at_the_budget_and_marks_preemptions(pool_trace):
    header, views = pool_trace
    budget = pm_fig.budget_of(views)
    f0, f5 = pm_fig.pool_area_figure(views, 0), pm_fig.pool_area_figure(views, 5)
    assert f0.layout.yaxis.range == f5.layout.yaxis.range
    assert f0.layout.yaxis.range[1] == pytest.approx(budget / 1024 * 1.12)
    assert [d.y for d in f0.data] == [d.y for d in f5.data]  # stepping moves the highlight only
    rect = [s for s in f5.layout.shapes if s.type == "rect"]
    assert rect[0].x0 == views[5].step - 0.5
    red = [s for s in f0.layout.shapes if s.type == "line" and s.line.color == "#b00020"]
    assert [s.x0 for s in red] == [s for s, _ in pm_fig.preemption_steps(views)]
    total = sum(np.array(d.y) for d in f0.data) * 1024
    assert total[:-1] == pytest.approx([v.pool.used_bytes["total"] for v in views])
    assert f0.data[0].x[0] == views[0].step - 0.5 and f0.data[0].x[-1] == views[-1].step + 0.5


def test_strip_and_map_follow_the_owners(pool_trace):
    header, views = pool_trace
    sizes, budget = pm_fig.unit_bytes(header, views), pm_fig.budget_of(views)
    v = max(views, key=lambda v: v.pool.used_bytes["total"])
    segs = pm_fig.strip_segments(v, sizes, budget)
    for kind in ("kda_state", "checkpoint", "mla_kv"):  # runs of one owner, side by side, every unit once
        runs, owned = [s for s in segs if s["kind"] == kind], sorted(pm_fig.owners_at(v, kind).items())
        assert sum(r["units"] for r in runs) == len(owned)
        assert [o for r in runs for o in [r["owner"]] * r["units"]] == [o for _, o in owned]
        assert [(r["unit"], r["last_unit"]) for r in runs] == [
            (owned[i][0], owned[i + r["units"] - 1][0]) for i, r in zip(itertools.accumulate(
                [0] + [r["units"] for r in runs]), runs)]
        assert all(a["owner"] != b["owner"] for a, b in zip(runs, runs[1:]))  # maximal runs
        assert all(r["bytes"] == r["units"] * sizes[kind] for r in runs)
    states = [s for s in segs if s["kind"] != "mla_kv"]
    pages = [s for s in segs if s["kind"] == "mla_kv"]
    assert [s["start"] for s in states] == list(itertools.accumulate([0] + [s["bytes"] for s in states]))[:-1]
    assert [p["start"] + p["bytes"] for p in pages] == [budget] + [p["start"] for p in pages][:-1]  # downwards
    assert len(pages) < len(pm_fig.owners_at(v, "mla_kv"))  # a request's pages are one segment, not one each
    fig = pm_fig.budget_strip_figure(v, sizes, budget)
    kinds = {s["kind"] for s in segs}
    assert len(fig.data) == 1 + len(kinds) and tuple(fig.layout.xaxis.range) == (0, budget / 1024)  # a trace per kind
    drawn = [(tr.base[j] * 1024, tr.x[j] * 1024) for tr in fig.data[1:] for j in range(len(tr.x))]
    assert sorted(drawn) == sorted((s["start"], s["bytes"]) for s in segs)  # every unit, where it lies
    counts = pm_fig.unit_counts(views)
    m = pm_fig.unit_map_figure(v, counts)
    slot_text, page_text = list(m.data[0].text), list(m.data[1].text)
    assert len(slot_text) == counts["kda_state"] == pm.STATE_SLOTS and len(page_text) == counts["mla_kv"]
    owners = pm_fig.owners_at(v, "mla_kv")
    assert page_text == [f"r{owners[u]}" if u in owners else "" for u in range(1, counts["mla_kv"] + 1)]
    other = pm_fig.unit_map_figure(views[0], counts)
    assert list(other.data[1].text) != page_text and other.layout.height == m.layout.height


def test_more_pages_no_preemption():
    _, events = et.parse_trace(et.run_scenario(**pm.scenario(8)))
    assert pm_fig.preemption_steps(et.engine_steps(events)) == []


# ---- sequential but segmentable ----------------------------------------------------------------
from model_viz.figures import kda_segments as sg_fig  # noqa: E402
from model_viz.scenarios import kda_segments as sg  # noqa: E402
from model_viz.i18n import in_language


@pytest.fixture(scope="module")
def seg_result():
    return sg.run_segments(0, sg.DEFAULT_SPLITS)


def test_segments_in_order_equal_one_pass(seg_result):
    r = seg_result
    assert r.bounds == [0, *sg.DEFAULT_SPLITS, sg.T_LEN]
    for j in range(len(r.bounds) - 1):
        assert r.boundary_diff(j) < 1e-5
    # and the state really changes between boundaries (the check is not vacuous)
    assert float((r.in_order[0] - r.in_order[1]).abs().max()) > 0.1


def test_swapping_two_segments_changes_the_state(seg_result):
    r = seg_result
    assert r.swap == len(r.bounds) - 3  # default: the last two segments
    assert r.swapped_diff() > 0.1
    assert r.swapped_diff() > 1e4 * max(r.boundary_diff(j) for j in range(len(r.bounds) - 1))
    r0 = sg.run_segments(0, sg.DEFAULT_SPLITS, swap=0)
    assert r0.swap == 0 and r0.swapped_diff() > 1e-3


def test_chunk_start_states_are_the_one_pass_states(seg_result):
    r = seg_result
    assert r.chunk_starts.shape[0] == cdiv(sg.T_LEN, sg.CHUNK)
    assert r.chunk_diff() < 1e-5
    assert float(r.chunk_starts[0].abs().max()) == 0.0  # the first chunk starts from zero
    torch = pytest.importorskip("torch")
    torch.testing.assert_close(r.chunk_starts[2], r.one_pass[2 * sg.CHUNK - 1], atol=1e-5, rtol=0)


def test_any_split_works_and_bad_splits_are_refused():
    for splits in ((1,), (95,), (16, 32, 48), (7, 8, 9, 60)):
        r = sg.run_segments(3, splits)
        assert max(r.boundary_diff(j) for j in range(len(r.bounds) - 1)) < 1e-5
    one = sg.run_segments(0, ())
    assert one.swap is None and one.swapped_diff() is None and one.boundary_diff(0) < 1e-5
    assert sg.check_splits([40, 21, 40]) == [21, 40]
    for bad in ([0], [96], [-3]):
        with pytest.raises(sg.SplitError) as e:
            sg.check_splits(bad)
        assert e.value.key == "kda_segments.err.range"


def test_segment_figures_follow_the_boundary(seg_result):
    r = seg_result
    f0, f2 = sg_fig.timeline_figure(r, 0), sg_fig.timeline_figure(r, 2)
    assert f0.layout.xaxis.range == f2.layout.xaxis.range and f0.layout.yaxis.range == f2.layout.yaxis.range
    line0 = [s for s in f0.layout.shapes if s.type == "line"][0]
    assert line0.x0 == r.bounds[1]
    assert [s for s in f2.layout.shapes if s.type == "line"][0].x0 == r.bounds[3]
    b0, b2 = sg_fig.boundary_figure(r, 0), sg_fig.boundary_figure(r, 2)
    np.testing.assert_allclose(np.array(b2.data[1].z), r.one_pass[r.bounds[3] - 1][0].numpy(), atol=1e-7)
    assert np.abs(np.array(b2.data[2].z)).max() < 1e-5
    assert b0.data[0].zmax == b2.data[0].zmax  # one colour scale for the sequence
    assert b0.data[0].z != b2.data[0].z
    sw = sg_fig.swap_figure(r)
    expected = (r.swapped_final[0] - r.one_pass[-1][0]).abs().max().item()
    assert np.abs(np.array(sw.data[2].z)).max() == pytest.approx(expected, rel=1e-5) and expected > 0.1
    assert in_language("zh", sg_fig.boundary_figure, r, 0).layout.title.text != b0.layout.title.text
