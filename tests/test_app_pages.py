"""The step-through pages, headless (``streamlit.testing.v1.AppTest``): they run, the step control
changes the figures, the language switch changes the text, bad input shows an error."""

import io
import json
import re
import pathlib
import time

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from apptest_util import new_app  # noqa: E402
from model_viz.figures import hybrid_chain as cf  # noqa: E402
from model_viz.i18n import t  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 60


def _page(path: str) -> AppTest:
    at = new_app(APP, TIMEOUT).run()
    at.switch_page(path).run()
    assert not at.exception, at.exception
    return at


def _specs(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _titles(at) -> list[str]:
    return [s["layout"]["title"]["text"] for s in _specs(at)]


def _md(at) -> str:
    return " ".join(m.value for m in at.markdown)


# ---- hybrid execution chain --------------------------------------------------------------------
CHAIN = "app_pages/hybrid_chain.py"


def test_chain_page_renders():
    t0 = time.perf_counter()
    at = _page(CHAIN)
    assert at.title[0].value == "Hybrid execution chain"
    assert not at.error
    specs = _specs(at)
    assert len(specs) == 3
    assert "cu_seqlens = [0, 16]" in specs[0]["layout"]["title"]["text"]
    labels = [e.label for e in at.expander]
    for cid in cf.PAGE_CONCEPTS:
        assert any(cid in lab for lab in labels), cid
    assert at.button(key="hybrid_chain_prev").disabled and not at.button(key="hybrid_chain_next").disabled
    assert time.perf_counter() - t0 < 40


def test_chain_stepping_changes_the_figures():
    at = _page(CHAIN)
    s0 = _specs(at)
    at.button(key="hybrid_chain_next").click().run()
    assert not at.exception and at.session_state["hybrid_chain_step"] == 2
    s1 = _specs(at)
    assert s0[0]["layout"]["title"] != s1[0]["layout"]["title"]
    assert s0[2]["layout"]["shapes"] != s1[2]["layout"]["shapes"]  # the highlighted step moved
    at.select_slider(key="hybrid_chain_step").set_value(5).run()
    s4 = _specs(at)
    assert not at.exception
    assert s4[1]["data"][0]["z"] != s0[1]["data"][0]["z"]  # step 5 mixes decode and extend
    assert len(s4[0]["data"]) == 3  # three sequences packed
    at.button(key="hybrid_chain_prev").click().run()
    assert at.session_state["hybrid_chain_step"] == 4
    at.select_slider(key="hybrid_chain_step").set_value(1).run()
    assert _specs(at)[0]["data"] == s0[0]["data"]  # back where it started


def test_chain_budget_changes_the_scenario_and_clamps_the_step():
    at = _page(CHAIN)
    at.select_slider(key="hybrid_chain_step").set_value(9).run()
    at.select_slider(key="hybrid_chain_budget").set_value(64).run()  # 5 steps instead of 9
    assert not at.exception
    assert at.session_state["hybrid_chain_step"] == 5 and at.button(key="hybrid_chain_next").disabled
    at.select_slider(key="hybrid_chain_step").set_value(1).run()
    assert "[0, 40, 52, 64]" in _titles(at)[0]  # two whole prompts and a first chunk of the third


def test_chain_mixed_batch_switch_shows_both_upstream_and_split_kernels():
    at = _page(CHAIN)
    at.select_slider(key="hybrid_chain_step").set_value(5).run()  # step 5 mixes decodes and a prefill chunk
    grid = _specs(at)[1]["data"][0]
    chunk_z = grid["z"]
    assert all(row[1] == 0 for row in chunk_z[:3])  # one chunk_kda call: the KDA decode column idle
    at.radio(key="hybrid_chain_mixed_en").set_value("split").run()
    assert not at.exception and at.session_state["hybrid_chain_step"] == 5
    split_z = _specs(at)[1]["data"][0]["z"]
    assert split_z != chunk_z and all(row[1] != 0 for row in split_z[:3])  # fused_recurrent_kda for decodes
    at.sidebar.radio[0].set_value("zh").run()  # the choice survives the language switch
    assert not at.exception and at.session_state["hybrid_chain_mixed"] == "split"
    assert at.radio(key="hybrid_chain_mixed_zh").value == "split"


def test_chain_language_switch():
    at = _page(CHAIN)
    en = _md(at)
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception
    assert at.title[0].value == "混合执行链"
    zh = _md(at)
    assert "token 预算" in zh and "token budget" not in zh and "token budget" in en
    assert at.button(key="hybrid_chain_next").label == "下一步 ▶"
    assert "打包后的批次" in _titles(at)[0]
    # every chart in the new language, the cached timeline too (drawn once per language)
    assert all(re.search("[\u4e00-\u9fff]", title) for title in _titles(at)), _titles(at)


def test_chain_malformed_upload_shows_an_error_and_keeps_the_page():
    at = _page(CHAIN)
    bad = b'{"schema": "kda-viz-trace", "version": 1}\n{"kind": "batch_composition", "step": "x"}\n'
    at.file_uploader(key="hybrid_chain_upload").upload("bad.jsonl", bad, "application/json").run()
    assert not at.exception
    assert len(at.error) == 1 and "line 2" in at.error[0].value
    assert len(_specs(at)) == 3  # the canned scenario still shows


def test_a_cut_trace_and_one_of_several_engines_say_so():
    """A recorder that dropped events past its limit, or one that two engines wrote (a local disaggregation),
    gives a trace whose last steps or step numbers the views cannot show whole: the page warns."""
    from kda_ref import LLM, ModelConfig, SamplingParams
    from kda_ref.model import HybridModel
    from kda_ref.trace import TraceRecorder

    model = HybridModel(ModelConfig.micro(), seed=0).eval()
    cut = TraceRecorder(max_events=40, on_full="drop")
    LLM(model, tracer=cut).generate([[1, 2, 3, 4, 5, 6]], SamplingParams(max_tokens=8, ignore_eos=True))
    shared = TraceRecorder()
    for _ in range(2):
        LLM(model, tracer=shared).generate([[1, 2, 3]], SamplingParams(max_tokens=2, ignore_eos=True))
    for rec, key, n in ((cut, "common.trace.dropped", cut.dropped), (shared, "common.trace.engines", 2)):
        buf = io.StringIO()
        rec.write_jsonl(buf)
        at = _page(CHAIN)
        at.file_uploader(key="hybrid_chain_upload").upload("t.jsonl", buf.getvalue().encode(), "application/json").run()
        assert not at.exception and n > 0
        assert [w.value for w in at.warning] == [t(key, n=n)]


def test_chain_uploaded_trace_is_shown():
    from model_viz.scenarios import engine_trace as et

    text = et.run_scenario(et.PROMPT_LENS[:2], token_budget=8, max_tokens=2)
    at = _page(CHAIN)
    at.file_uploader(key="hybrid_chain_upload").upload("mine.jsonl", text.encode(), "application/json").run()
    assert not at.exception and not at.error
    assert any("mine.jsonl" in c.value for c in at.caption)
    assert "cu_seqlens = [0, 8]" in _titles(at)[0]
    # the built-in run's description gives way to a note that the controls do not change this run
    assert "uploaded trace" in at.info[0].value and "budget of 16 tokens" not in _md(at)


# ---- three kinds of state ----------------------------------------------------------------------
STATES = "app_pages/three_states.py"


def _markers(spec) -> list:
    return [d["x"][0] for d in spec["data"] if d.get("mode") == "markers"]


def test_states_page_renders_and_steps():
    from model_viz.figures import three_states as ts

    at = _page(STATES)
    assert at.title[0].value == "Three kinds of state" and not at.error
    specs = _specs(at)
    assert len(specs) == 2
    assert _markers(specs[0]) == [ts.DEFAULT_LEN] * 2
    labels = [e.label for e in at.expander]
    assert all(any(cid in lab for lab in labels) for cid in ts.PAGE_CONCEPTS)
    at.button(key="three_states_next").click().run()
    assert not at.exception and at.session_state["three_states_len"] == ts.DEFAULT_LEN + ts.LEN_STEP
    s1 = _specs(at)
    assert _markers(s1[0]) == [ts.DEFAULT_LEN + ts.LEN_STEP] * 2
    assert s1[1]["data"][0]["x"] != specs[1]["data"][0]["x"]  # the window moved
    at.button(key="three_states_prev").click().run()
    at.button(key="three_states_prev").click().run()
    assert _markers(_specs(at)[0]) == [ts.DEFAULT_LEN - ts.LEN_STEP] * 2
    at.slider(key="three_states_len").set_value(0).run()
    assert at.button(key="three_states_prev").disabled and not at.exception
    at.toggle(key="three_states_model").set_value(True).run()
    assert "whole model" in _titles(at)[0]


def test_states_language_switch():
    at = _page(STATES)
    en = _md(at)
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception
    assert at.title[0].value == "三种状态"
    zh = _md(at)
    assert "盈亏平衡" in zh and "break-even" not in zh and "break-even" in en
    assert "盈亏平衡" in json.dumps(_specs(at)[0]["layout"]["annotations"], ensure_ascii=False)


# ---- memory pool map ---------------------------------------------------------------------------
POOL = "app_pages/pool_map.py"


def test_pool_page_renders_and_steps():
    from model_viz.figures import pool_map as pm

    at = _page(POOL)
    assert at.title[0].value == "Memory pool map" and not at.error
    s0 = _specs(at)
    assert len(s0) == 4
    # what one request holds at its peak: first the settings that fit 3 states + 6 pages, no refusal
    demand = s0[3]
    accepted = {"no prefix cache", "radix cache (chunk)", "block cache (retention 0)"}
    assert {tr["y"][0] for tr in demand["data"]} == accepted and not at.warning
    # SGLang's tracking and 1 + k slots do not fit: picked, the page shows the engine's own refusal with its numbers
    at.multiselect(key="pool_map_demand_settings").select("pool_map.demand.sglang").select(
        "pool_map.demand.slots").run()
    names = {tr["y"][0] for tr in _specs(at)[3]["data"]}
    assert names == accepted | {"radix cache (sglang tracking)", "speculation, 1 + k slots (k = 3)"}
    warned = [w.value for w in at.warning]
    assert len(warned) == 2 and all("cannot hold even one request" in w and "703488 B" in w for w in warned)
    assert any("2 ping-pong track slots" in w for w in warned) and any("3 extra state slots" in w for w in warned)
    s0 = s0[:3]
    assert all(any(cid in e.label for e in at.expander) for cid in pm.PAGE_CONCEPTS)
    at.button(key="pool_map_next").click().run()
    assert not at.exception and at.session_state["pool_map_step"] == 2
    s1 = _specs(at)[:3]
    assert s0[0]["layout"]["shapes"] != s1[0]["layout"]["shapes"]
    assert s0[1]["data"] != s1[1]["data"]  # step 2 admits two more requests
    assert s0[2]["data"][1]["text"] != s1[2]["data"][1]["text"]
    at.select_slider(key="pool_map_step").set_value(7).run()  # the preemption step of the default scenario
    assert not at.exception
    assert "r2 preempted" in _md(at)
    at.button(key="pool_map_prev").click().run()
    assert at.session_state["pool_map_step"] == 6 and "r2 preempted" not in _md(at).split("Memory events")[-1]


def test_pool_language_switch_and_budget():
    at = _page(POOL)
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception
    assert at.title[0].value == "内存池分布图"
    assert "抢占" in _md(at) and "preempted" not in _md(at)
    assert "被抢占" in json.dumps(_specs(at)[0]["layout"]["annotations"], ensure_ascii=False)
    at.select_slider(key="pool_map_pages").set_value(8).run()
    assert not at.exception
    assert "被抢占" not in json.dumps(_specs(at)[0]["layout"]["annotations"], ensure_ascii=False)


# ---- sequential but segmentable ----------------------------------------------------------------
SEG = "app_pages/kda_segments.py"


def test_segments_page_renders_and_steps():
    from model_viz.figures import kda_segments as sg

    at = _page(SEG)
    assert at.title[0].value == "Sequential but segmentable" and not at.error
    s0 = _specs(at)
    assert len(s0) == 3
    assert all(any(cid in e.label for e in at.expander) for cid in sg.PAGE_CONCEPTS)
    diffs = [m.value for m in at.metric]
    assert float(diffs[0]) < 1e-5 and float(diffs[1]) > 0.1 and float(diffs[2]) < 1e-5
    at.button(key="kda_segments_next").click().run()
    assert not at.exception and at.session_state["kda_segments_step"] == 2  # the slider counts from 1
    s1 = _specs(at)
    assert s1[1]["data"][0]["z"] != s0[1]["data"][0]["z"]  # the state after segment 2
    assert s1[0]["layout"]["shapes"] != s0[0]["layout"]["shapes"]
    at.button(key="kda_segments_prev").click().run()
    assert _specs(at)[1]["data"][0]["z"] == s0[1]["data"][0]["z"]


def test_segments_splits_swap_and_language():
    at = _page(SEG)
    at.select_slider(key="kda_segments_step").set_value(4).run()  # segment 4 of 4
    at.multiselect(key="kda_segments_splits").set_value([50]).run()  # two segments: the step is clamped
    assert not at.exception and at.session_state["kda_segments_step"] == 2
    assert len(_specs(at)) == 3
    at.multiselect(key="kda_segments_splits").set_value([]).run()  # one segment: nothing to swap, no crash
    assert not at.exception and len(at.info) == 1 and len(_specs(at)) == 2
    at.multiselect(key="kda_segments_splits").set_value([10, 30, 60]).run()
    at.selectbox(key="kda_segments_swap").set_value(0).run()
    assert not at.exception and "1 and 2 swapped" in json.dumps(_specs(at)[2]["layout"]["annotations"])
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception
    assert at.title[0].value == "顺序计算，但可分段"
    assert "可分段" in _md(at) and "segments" not in at.title[0].value
    assert at.multiselect(key="kda_segments_splits").placeholder == "请选择…"  # not Streamlit's English default


# ---- the shared step control: play / pause ------------------------------------------------------
def test_play_advances_and_pause_stops():
    at = _page(CHAIN)
    assert not at.button(key="hybrid_chain_play").disabled
    s0 = _specs(at)
    at.button(key="hybrid_chain_play").click().run()  # play shows the next frame at once, then ticks
    assert not at.exception and at.session_state["hybrid_chain_step"] == 2
    assert at.button(key="hybrid_chain_pause") and not [b for b in at.button if b.key == "hybrid_chain_play"]
    assert _specs(at)[0]["layout"]["title"] != s0[0]["layout"]["title"]
    assert any("one step every" in c.value for c in at.caption)  # the ticker fragment is running
    at.button(key="hybrid_chain_pause").click().run()
    assert not at.exception and at.session_state["hybrid_chain_step"] == 2 and at.button(key="hybrid_chain_play")
    # on the last frame, play starts again from the first
    at.select_slider(key="hybrid_chain_step").set_value(9).run()
    at.button(key="hybrid_chain_play").click().run()
    assert at.session_state["hybrid_chain_step"] == 1 and at.button(key="hybrid_chain_pause")
    # playing into the last frame stops by itself
    at.select_slider(key="hybrid_chain_step").set_value(8).run()
    at.button(key="hybrid_chain_pause").click().run()
    at.button(key="hybrid_chain_play").click().run()
    assert at.session_state["hybrid_chain_step"] == 9 and at.button(key="hybrid_chain_play") and not at.exception


def _first_render_seconds(path: str) -> float:
    """A fresh session opening ``path`` once its scenario is cached (the process already ran it)."""
    _page(path)  # compute (or reuse) the cached scenario
    at = new_app(APP, TIMEOUT).run()
    t0 = time.perf_counter()
    at.switch_page(path).run()
    assert not at.exception
    return time.perf_counter() - t0


# ---- prefix cache is not a KV cache ------------------------------------------------------------
PREFIX = "app_pages/prefix_vs_kv.py"


def test_prefix_page_renders_steps_and_plays():
    from model_viz.figures import prefix_vs_kv as pk

    at = _page(PREFIX)
    assert at.title[0].value == "A prefix cache is not a KV cache" and not at.error
    s0 = _specs(at)
    assert len(s0) == 2 and "L = 56" in s0[0]["layout"]["title"]["text"]
    assert all(any(cid in e.label for e in at.expander) for cid in pk.PAGE_CONCEPTS)
    assert [m.value for m in at.metric] == ["56", "48", "8"]
    assert at.success and "Verified on the engine" in at.success[0].value
    at.button(key="prefix_vs_kv_next").click().run()
    assert not at.exception and at.session_state["prefix_vs_kv_len"] == 57
    s1 = _specs(at)
    assert s1[0]["data"][0]["x"] != s0[0]["data"][0]["x"] and s1[1]["data"][3] != s0[1]["data"][3]
    assert not at.success  # 57 was not run as a real request: the page says which ones were
    at.slider(key="prefix_vs_kv_len").set_value(64).run()
    assert [m.value for m in at.metric] == ["64", "64", "0"]
    at.button(key="prefix_vs_kv_prev").click().run()
    assert at.session_state["prefix_vs_kv_len"] == 63 and [m.value for m in at.metric][1:] == ["48", "15"]
    at.button(key="prefix_vs_kv_play").click().run()
    assert at.session_state["prefix_vs_kv_len"] == 64 and at.button(key="prefix_vs_kv_pause") and not at.exception


def test_prefix_page_language_switch():
    at = _page(PREFIX)
    en = _md(at)
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception and at.title[0].value == "前缀缓存不是 KV 缓存"
    zh = _md(at)
    assert "重算" in zh and "recompute" not in zh and "recompute" in en
    assert "共享" in _titles(at)[0] and at.button(key="prefix_vs_kv_next").label == "下一步 ▶"


# ---- checkpoint placement -------------------------------------------------------------------------
TREE = "app_pages/checkpoint_tree.py"


def test_tree_page_renders_steps_and_switches_policy():
    from model_viz.figures import checkpoint_tree as ct_fig

    at = _page(TREE)
    assert at.title[0].value == "Checkpoint placement" and not at.error
    assert at.session_state["checkpoint_tree_policy"] == "sglang"  # SGLang's own tracking first
    assert "`track`" in _md(at) or "**tracks**" in _md(at)
    at.radio(key="checkpoint_tree_policy_en").set_value("chunk").run()  # the dense baseline
    s0 = _specs(at)
    assert len(s0) == 2 and "after r0 (1/5)" in s0[0]["layout"]["title"]["text"]
    assert all(any(cid in e.label for e in at.expander) for cid in ct_fig.PAGE_CONCEPTS)
    at.button(key="checkpoint_tree_next").click().run()
    assert not at.exception and at.session_state["checkpoint_tree_step"] == 1
    s1 = _specs(at)
    assert s1[0]["data"][0]["x"] != s0[0]["data"][0]["x"]  # the tree grew
    assert s1[0]["layout"]["xaxis"]["range"] == s0[0]["layout"]["xaxis"]["range"]  # on fixed axes
    assert "copy_on_write" in _md(at) and "back to the state at 32" in _md(at)
    at.slider(key="checkpoint_tree_step").set_value(4).run()
    chunk_last = _specs(at)[0]
    assert "`evict`" in _md(at)
    at.radio(key="checkpoint_tree_policy_en").set_value("branch").run()
    assert not at.exception and at.session_state["checkpoint_tree_step"] == 4
    branch_last = _specs(at)[0]
    assert branch_last["data"] != chunk_last["data"]
    assert [m.value for m in at.metric][3] == "32"  # r4 restores the branching point r1 saved
    at.button(key="checkpoint_tree_prev").click().run()
    assert at.session_state["checkpoint_tree_step"] == 3
    at.sidebar.radio[0].set_value("zh").run()  # the policy survives the relabelled options
    assert not at.exception and at.radio(key="checkpoint_tree_policy_zh").value == "branch"
    assert at.session_state["checkpoint_tree_policy"] == "branch"


def test_tree_page_upload_and_language():
    from model_viz.scenarios import checkpoint_tree as ct

    at = _page(TREE)
    at.file_uploader(key="checkpoint_tree_upload").upload("bad.jsonl", b'{"schema": "kda-viz-trace"}\n{"kind": 3}\n',
                                             "application/json").run()
    assert not at.exception and len(at.error) == 1 and len(_specs(at)) == 2  # the canned scenario still shows
    from model_viz.scenarios import engine_trace as et

    plain = et.run_scenario((20,), token_budget=16)
    at.file_uploader(key="checkpoint_tree_upload").upload("plain.jsonl", plain.encode(), "application/json").run()
    assert len(at.error) == 1 and "tree_steps" in at.error[0].value  # an engine trace without tree snapshots
    mine = ct.record("branch")  # the radio stays at sglang: the page describes the trace's own policy
    at.file_uploader(key="checkpoint_tree_upload").upload("mine.jsonl", mine.encode(), "application/json").run()
    assert not at.exception and not at.error
    events = mine.count("\n") - 1  # every event line, not only the cache events of the snapshots
    assert any(f"mine.jsonl` ({events} events)" in c.value for c in at.caption)
    shown = " ".join(c.value for c in at.caption)
    assert t("checkpoint_tree.policy_help.branch") in shown and "extra_buffer" not in shown
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception and at.title[0].value == "checkpoint 的放置"
    assert "Radix 树" in _titles(at)[0] and "Radix tree" not in _titles(at)[0]


# ---- restore paths -----------------------------------------------------------------------------------
RESTORE = "app_pages/restore_paths.py"


def test_restore_page_steps_through_the_restore():
    from model_viz.figures import restore_paths as rp_fig
    from model_viz.scenarios import restore_paths as rp

    at = _page(RESTORE)
    assert at.title[0].value == "Restore paths" and not at.error
    assert all(any(cid in e.label for e in at.expander) for cid in rp_fig.PAGE_CONCEPTS)
    seen = []
    for k in range(len(rp.STEPS)):
        if k:
            at.button(key="restore_paths_next").click().run()
        assert not at.exception and at.session_state["restore_paths_step"] == k + 1  # shown from 1
        seen.append(_specs(at)[0])
    assert len({json.dumps(s["data"]) for s in seen}) == len(rp.STEPS)  # every step changes the figure
    assert len({json.dumps(s["layout"]["xaxis"]["range"]) for s in seen}) == 1
    assert "5 of 5" in _md(at) and at.button(key="restore_paths_next").disabled
    at.select_slider(key="restore_paths_step").set_value(3).run()
    assert [m.value for m in at.metric][:2] == ["57", "48"]


def test_restore_page_break_it_shows_the_error_and_the_divergence():
    at = _page(RESTORE)
    at.select_slider(key="restore_paths_step").set_value(4).run()
    assert not at.code  # the honest restore passes the check
    at.toggle(key="restore_paths_break").set_value(True).run()
    assert not at.exception
    assert at.code and "BoundaryMismatchError" in at.code[0].value and "boundary 32" in at.code[0].value
    div = _specs(at)[1]
    assert len(div["data"]) == 2 and max(div["data"][1]["y"]) > 1e-3 > max(div["data"][0]["y"])
    at.radio(key="restore_paths_mode_en").set_value("conv").run()
    # the conv fault passes the check (records, not tensors): no error shown, the text says why
    assert not at.exception and not at.code and "compares records, not tensors" in _md(at)
    at.select_slider(key="restore_paths_step").set_value(7).run()
    assert "silently wrong" in _md(at)
    at.selectbox(key="restore_paths_request_en").set_value("turn").run()
    assert not at.exception
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception and at.title[0].value == "恢复路径" and "悄无声息" in _md(at)
    # the choices survive the switch, under the new language's labels
    assert at.radio(key="restore_paths_mode_zh").value == "conv"
    assert at.selectbox(key="restore_paths_request_zh").value == "turn"


def test_new_pages_first_render_time():
    """Once a scenario is cached, a fresh session renders the page quickly (target < 3 s)."""
    times = {p: _first_render_seconds(p) for p in (PREFIX, TREE, RESTORE)}
    print("first render (cached scenario):", {k: round(v, 2) for k, v in times.items()})
    assert all(v < 10 for v in times.values()), times  # generous: the test machine's cores are shared


# ---- vLLM state blocks ---------------------------------------------------------------------------
BLOCKS = "app_pages/state_blocks.py"


def test_blocks_page_renders_and_steps():
    from model_viz.figures import state_blocks as sb

    at = _page(BLOCKS)
    assert at.title[0].value == "vLLM state blocks" and not at.error
    specs = _specs(at)
    assert len(specs) == 4
    assert specs[0]["layout"]["title"]["text"].startswith("r0 (1/5)")
    labels = [e.label for e in at.expander]
    assert all(any(cid in lab for lab in labels) for cid in sb.PAGE_CONCEPTS)
    assert any("all 5 outputs equal" in s.value for s in at.success)
    assert at.button(key="state_blocks_prev").disabled and not at.button(key="state_blocks_next").disabled
    at.button(key="state_blocks_next").click().run()
    assert not at.exception and at.session_state["state_blocks_step"] == 1
    s1 = _specs(at)
    assert s1[0]["layout"]["title"]["text"].startswith("r1 (2/5)") and "hit = 64" in s1[0]["layout"]["title"]["text"]
    assert s1[1]["data"] != specs[1]["data"]  # another request's block table
    assert not at.info  # r1's hit is block-aligned
    at.slider(key="state_blocks_step").set_value(3).run()
    assert not at.exception and len(at.info) == 1 and "Partial hit" in at.info[0].value
    assert "2 null block(s) + 1 real" in _titles(at)[1]
    at.button(key="state_blocks_prev").click().run()
    assert at.session_state["state_blocks_step"] == 2
    at.slider(key="state_blocks_step").set_value(0).run()
    assert _specs(at)[1]["data"] == specs[1]["data"]  # back where it started


def test_blocks_page_mode_retention_partial_and_language():
    at = _page(BLOCKS)
    assert "saved in this run: 32, 64, 96, 104" in _titles(at)[2]
    at.radio(key="state_blocks_mode").set_value("align").run()
    assert not at.exception and "saved in this run: 64, 96, 104" in _titles(at)[2]
    at.radio(key="state_blocks_retention_en").set_value("reachable").run()
    assert not at.exception and "saved in this run: 104, 96" in _titles(at)[2]
    assert "▶ reachable (0)" in _specs(at)[2]["layout"]["yaxis"]["categoryarray"]
    at.toggle(key="state_blocks_partial").set_value(False).run()
    at.slider(key="state_blocks_step").set_value(3).run()
    assert not at.exception and not at.info  # no partial hit without partial hits
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception and at.title[0].value == "vLLM 状态块"
    assert at.radio(key="state_blocks_retention_zh").value == "reachable" and at.radio(key="state_blocks_mode").value == "align"
    assert at.session_state["state_blocks_step"] == 3
    assert "不动点" in _titles(at)[0] and at.button(key="state_blocks_next").label == "下一步 ▶"
    assert any("已核验" in s.value for s in at.success)


# ---- checkpoint density and policies -------------------------------------------------------------
DENSITY = "app_pages/checkpoint_density.py"


def _bench_csv(monkeypatch, path):
    from model_viz.scenarios import checkpoint_density as dn

    monkeypatch.setattr(dn, "WORKLOADS_CSV", path)
    return path


def test_density_page_without_the_benchmark_csv_shows_how_to_make_it(monkeypatch, tmp_path):
    _bench_csv(monkeypatch, tmp_path / "workloads.csv")
    at = _page(DENSITY)
    assert at.title[0].value == "Checkpoint density and policies" and not at.error
    assert any("kda-ref bench workloads" in i.value for i in at.info)
    assert len(_specs(at)) == 3  # cost model, simulator sweep, tiny engine
    from model_viz.figures import checkpoint_density as dn

    labels = [e.label for e in at.expander]
    assert all(any(cid in lab for lab in labels) for cid in dn.PAGE_CONCEPTS)


def test_density_page_with_a_malformed_csv_shows_an_error(monkeypatch, tmp_path):
    bad = _bench_csv(monkeypatch, tmp_path / "workloads.csv")
    bad.write_text("family,budget_gib,policy\nmulti_turn,4,none\n")
    at = _page(DENSITY)
    assert not at.exception
    assert len(at.error) == 1 and "missing columns token_hit_rate, flops_saved_frac" in at.error[0].value
    assert len(_specs(at)) == 3  # the rest of the page still works


def test_density_page_benchmark_charts_sliders_and_language(monkeypatch, tmp_path):
    from test_viz_block_pages import _write, bench_rows

    _write(_bench_csv(monkeypatch, tmp_path / "workloads.csv"), bench_rows())
    at = _page(DENSITY)
    assert not at.error and not at.exception
    titles = _titles(at)
    assert len(titles) == 5 and titles[2] == "multi-turn chat: token hit rate per policy vs memory budget"
    at.selectbox(key="checkpoint_density_bench_family_en").set_value("few_shot").run()
    assert _titles(at)[2].startswith("few-shot") and _specs(at)[2]["data"] != _specs(at)[3]["data"]
    s0 = _specs(at)
    at.select_slider(key="checkpoint_density_interval_en").set_value(5).run()  # reachable only
    assert not at.exception and "reachable (0)" in _titles(at)[1]
    assert _specs(at)[1]["data"][0]["marker"] != s0[1]["data"][0]["marker"]  # the highlight moved
    at.select_slider(key="checkpoint_density_n").set_value(4096).run()
    assert "every 4096 tokens costs 1.31×" in _titles(at)[0]
    at.select_slider(key="checkpoint_density_budget").set_value(64).run()
    assert not at.exception and _titles(at)[1].startswith("64 GiB")
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception and at.title[0].value == "checkpoint 的密度与策略"
    assert "盈亏平衡" in " ".join(m.label for m in at.metric) and "命中率" in _titles(at)[1]
    # the choices survive the switch: the widgets of the other language start from them
    assert at.select_slider(key="checkpoint_density_interval_zh").value == 5 and "可达（0）" in _titles(at)[1]
    assert at.selectbox(key="checkpoint_density_bench_family_zh").value == "few_shot"
    assert _titles(at)[2].startswith(t("checkpoint_density.family.few_shot", "zh"))  # its name, not its id


def test_block_pages_first_render_time(monkeypatch, tmp_path):
    """Once the scenario / simulator runs are cached, a fresh session renders the pages quickly."""
    _bench_csv(monkeypatch, tmp_path / "missing.csv")
    times = {p: _first_render_seconds(p) for p in (BLOCKS, DENSITY)}
    print("first render (cached):", {k: round(v, 2) for k, v in times.items()})
    assert all(v < 10 for v in times.values()), times
