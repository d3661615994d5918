"""The data side of the prefix-cache pages (no Streamlit): prefix vs KV, checkpoint placement,
restore paths, and the shared step control's arithmetic. Every fact a page displays is checked here
against the engine, and the checks themselves are shown to fail when the fact does not hold."""

import json

import pytest

from kda_ref.cache import BoundaryMismatchError, RadixPrefixCache
from model_viz.scenarios import common as cs
from model_viz.figures import checkpoint_tree as ct_fig
from model_viz.scenarios import checkpoint_tree as ct
from model_viz.scenarios import engine_trace as et
from model_viz.figures import prefix_vs_kv as pk_fig
from model_viz.scenarios import prefix_vs_kv as pk
from model_viz.figures import restore_paths as rp_fig
from model_viz.scenarios import restore_paths as rp
from model_viz.ui import step_control as sc
from model_viz.i18n import in_language


# ---- step control ------------------------------------------------------------------------------
def test_step_control_arithmetic():
    assert sc.clamp(None, 0, 9) == 0 and sc.clamp(12, 0, 9) == 9 and sc.clamp(-3, 0, 9) == 0
    assert sc.clamp(5, 1, 93) == 5 and sc.clamp(0, 1, 93) == 1
    # a grid of values (the three-states page steps the length by 128)
    assert sc.clamp(300, 0, 1000, 128) == 256 and sc.clamp(1000, 0, 1000, 128) == 896
    assert sc.advance(256, 0, 1000, 128) == 384 and sc.advance(896, 0, 1000, 128) == 896
    assert sc.advance(0, 0, 1000, 128, -1) == 0 and sc.advance(3, 0, 9, 1, -1) == 2
    assert sc.clamp(4, 0, 0) == 0  # one frame only
    with pytest.raises(ValueError):
        sc.clamp(1, 0, 9, 0)


# ---- prefix cache is not a KV cache --------------------------------------------------------------
@pytest.fixture(scope="module")
def prefix_run():
    return pk.run()


def test_state_is_reusable_exactly_at_the_checkpoints(prefix_run):
    r = prefix_run
    T = r.T
    assert T == pk.PROMPT_LEN + pk.MAX_TOKENS - 1
    # the chunk-start states of the prefill and the donated end, nothing else
    assert r.checkpoints == [*range(cs.CHUNK, pk.PROMPT_LEN + 1, cs.CHUNK), T]
    assert r.checkpoint_ops[T] == "donate" and r.checkpoint_ops[cs.CHUNK] == "checkpoint_create"
    # KV: every length is a usable prefix; state: only the checkpoint positions
    assert r.kv_len == list(range(1, T + 1))
    assert {L for L in range(1, T + 1) if r.state_len[L - 1] == L} == set(r.checkpoints)
    assert r.state_len[cs.CHUNK - 2] == 0 and r.state_len[cs.CHUNK] == cs.CHUNK  # L=15 -> 0, L=17 -> 16
    assert all(r.state_len[L - 1] == r.deepest(L) for L in range(1, T + 1))
    assert all(a <= b for a, b in zip(r.state_len, r.state_len[1:]))  # a staircase


def test_verified_second_requests_match_a_run_without_cache(prefix_run):
    r = prefix_run
    assert len(r.verified) >= 5
    assert {v.L for v in r.verified} >= {r.T, r.checkpoints[0]}
    assert any(v.reused == 0 for v in r.verified) and any(v.recomputed > 1 for v in r.verified)
    for v in r.verified:
        assert v.reused == r.deepest(v.L) and v.recomputed == v.L - v.reused
        assert v.same_tokens and v.max_diff <= pk.MAX_LOGIT_DIFF and len(v.tokens) == pk.VERIFY_MAX_TOKENS
    assert r.verified_at(r.default_length()) is not None and r.verified_at(2) is None


def test_the_identical_output_check_can_fail(monkeypatch):
    """Compare against a *different* model: the page's "identical output" fact must not hold."""
    from kda_ref import LLM, ModelConfig
    from kda_ref.model import HybridModel

    other = HybridModel(ModelConfig.tiny(), seed=1, chunk_size=cs.CHUNK).eval()
    monkeypatch.setattr(cs, "plain_llm", lambda **kw: LLM(other, chunk_size=cs.CHUNK, max_num_batched_tokens=2048,
                                                          max_num_seqs=64))
    with pytest.raises(cs.ScenarioCheckFailed, match="cached output differs"):
        pk.run()


def test_prefix_figures_follow_L_on_fixed_axes(prefix_run):
    r = prefix_run
    a, b = pk_fig.strip_figure(r, 56), in_language("zh", pk_fig.strip_figure, r, 57)
    assert a.layout.xaxis.range == b.layout.xaxis.range == (-0.5, r.T + 0.5)
    assert a.data[0].x != b.data[0].x  # the KV bar grows with L
    assert a.data[3].base[0] == 48 and a.data[3].x[0] == 8  # recompute 48..56
    assert "共享" in b.layout.title.text
    s1, s2 = pk_fig.staircase_figure(r, 16), pk_fig.staircase_figure(r, 17)
    assert list(s1.data[1].y) == r.state_len and s1.layout.yaxis.range == s2.layout.yaxis.range
    assert list(s1.data[3].y) == [16, 16] and list(s2.data[3].y) == [17, 16]
    f = pk.memory_facts(r)
    assert f["n_states"] == len(r.checkpoints) and f["dense_kib"] > 100 * f["kv_kib"]


# ---- checkpoint placement ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trees():
    return {p: ct.parse(ct.record(p)) for p in ct.POLICIES}


def _donated(steps):
    return {e.position for s in steps for e in s.events if e.op == "donate"}


def test_policies_place_checkpoints_where_they_say(trees):
    for policy, (header, steps) in trees.items():
        assert header["policy"] == policy and len(steps) == len(ct.SCENARIO)
        donated = _donated(steps)
        every = {"chunk": cs.CHUNK, "every_n": ct.INTERVAL, "branch": None, "sglang": None,
                 "sglang_no_buffer": None}[policy]
        tracked = {e.position for s in steps for e in s.events if e.op == "track"}
        for s in steps:
            for n in s.nodes.values():
                if n["state"] is None:
                    continue
                if policy == "sglang":  # only states a request tracked (one per prefill step, or a decode interval)
                    assert n["end"] in tracked, (policy, n["end"])
                elif policy == "sglang_no_buffer":  # ends of unfinished prefill steps and donated ends
                    step_ends = {e.position for x in steps for e in x.events if e.op == "snapshot"}
                    assert n["end"] in step_ends | donated, (policy, n["end"])
                elif policy == "branch":
                    branching = {e.detail["branching_len"] for x in steps for e in x.events if e.op == "match"}
                    assert n["end"] in donated | branching, (policy, n["end"])
                else:
                    assert n["end"] % every == 0 or n["end"] in donated, (policy, n["end"])
    r0 = {p: sorted(n["end"] for n in trees[p][1][0].nodes.values() if n["state"] is not None) for p in trees}
    # r0 (54 prompt tokens, 32 per step, 3 generated): the dense baseline keeps every chunk and the end;
    # SGLang one state per prefill step (0 + 32; 32 + 16 counted from the step's start) and donates 48,
    # the last tracked state, not the end 56
    assert r0 == {"chunk": [16, 32, 48, 56], "every_n": [32, 56], "branch": [56], "sglang": [32, 48],
                  "sglang_no_buffer": [32, 56]}


def test_reuse_and_events_per_request(trees):
    for policy, (_, steps) in trees.items():
        for s in steps:
            cow = [e for e in s.events if e.op == "copy_on_write" and e.req_id == s.req_id]
            assert s.reused == (cow[0].position if cow else 0)
            match = next(e for e in s.events if e.op == "match" and e.req_id == s.req_id)
            assert match.detail["state_len"] == s.reused <= match.detail["kv_len"]
            assert any(e.op == "donate" and e.req_id == s.req_id for e in s.events)
        if policy != "sglang":
            assert steps[2].reused == len(steps[0].prompt) + ct.MAX_TOKENS - 1  # r2 resumes at r0's donated end
        else:  # SGLang donated r0's last tracked state (48), so r2, which continues r0, resumes there
            assert steps[2].reused == 48
    chunk, branch = trees["chunk"][1], trees["branch"][1]
    # dense checkpoints fill the budget and get evicted; that costs the last request its reuse
    assert any(e.op == "evict" for s in chunk for e in s.events)
    assert "tombstone" in ct_fig.node_kinds(chunk)[-1].values()
    assert chunk[-1].reused < branch[-1].reused
    # under "branch" r1's prefill saves the branching point its match reported, and r4 restores it
    b1 = next(e for e in branch[1].events if e.op == "match")
    assert b1.detail["branching_len"] == 32 and any(e.op == "snapshot" and e.position == 32 for e in branch[1].events)
    assert branch[-1].reused == 32


def test_tree_layout_is_fixed_across_steps(trees):
    _, steps = trees["chunk"]
    lay = ct_fig.layout(steps)
    for s in steps:
        for pid, n in s.nodes.items():
            assert lay.pos[pid][0] == n["end"]  # x is the node's boundary
    assert lay.pos["root"] == (0.0, 0.0) and lay.lanes >= 2
    f0, f4 = ct_fig.tree_figure(steps, 0, lay), in_language("zh", ct_fig.tree_figure, steps, 4, lay)
    assert f0.layout.xaxis.range == f4.layout.xaxis.range and f0.layout.yaxis.range == f4.layout.yaxis.range
    assert f0.data[0].x != f4.data[0].x  # the tree grew
    # the checkpoint nodes of r0 that still hold their state after r1 are drawn at the same places
    f1 = ct_fig.tree_figure(steps, 1, lay)
    pts0 = set(zip(f0.data[3].x, f0.data[3].y))
    pts1 = set(zip(f1.data[3].x, f1.data[3].y))
    kept = [p for p, n in steps[0].nodes.items() if n["state"] is not None and steps[1].nodes.get(p, {}).get("state")]
    assert kept and all(lay.pos[p] in pts0 & pts1 for p in kept)
    assert steps[1].branch_points() and not steps[0].branch_points()
    kinds0 = ct_fig.node_kinds(steps)[0]
    assert set(kinds0.values()) == {"checkpoint"}
    assert "kv_only" in ct_fig.node_kinds(steps)[1].values()  # r1's match split r0's edge


def test_tree_trace_round_trip_and_bad_uploads(trees):
    text = ct.record("branch")
    header, steps = ct.parse(text.encode())
    assert [s.label for s in steps] == [lab for lab, _ in ct.SCENARIO]
    lines = text.splitlines()
    hdr = json.loads(lines[0])
    del hdr["tree_steps"]
    with pytest.raises(et.TraceError) as e:
        ct.parse("\n".join([json.dumps(hdr), *lines[1:]]))
    assert e.value.key == "checkpoint_tree.err.no_tree"
    hdr = json.loads(lines[0])
    hdr["tree_steps"][1]["tree"][0]["parent"] = "nope"
    with pytest.raises(et.TraceError) as e:
        ct.parse("\n".join([json.dumps(hdr), *lines[1:]]))
    assert e.value.key == "checkpoint_tree.err.bad_tree" and "parent" in in_language("en", e.value.message) and "parent" in in_language("zh", e.value.message)
    with pytest.raises(et.TraceError) as e:
        ct.parse(b'{"schema": "kda-viz-trace", "version": 1}\n{"kind": "cache", "step": "x"}\n')
    assert e.value.key == "common.trace.err.format"


def test_a_trace_is_described_by_its_own_policy_and_checkpoint_size(trees):
    """The tree page names the policy a trace was recorded under (a canned run's, or an engine header's
    ``checkpoint_policy``), and weighs what the tree holds by the checkpoint unit, which a compressing
    ``checkpoint_dtype`` makes smaller than a state."""
    header, steps = trees["branch"]
    assert ct.trace_policy(header) == "branch"
    assert ct.trace_policy({"engine": {"checkpoint_policy": "every_n"}}) == "every_n"
    assert ct.trace_policy({"engine": {"checkpoint_policy": "nope"}}) is None and ct.trace_policy({}) is None
    s = steps[-1]
    assert s.num_states() > 0
    assert ct.held_bytes(header, s) == s.num_states() * header["state_bytes"]  # the canned run: exact states
    bf16 = {"state_bytes": 112128, "checkpoint_unit_bytes": 62976}
    assert ct.held_bytes(bf16, s) == s.num_states() * 62976
    assert ct.held_bytes({"state_bytes": 112128}, s) == s.num_states() * 112128 and ct.held_bytes({}, s) == 0


def test_header_notes_name_what_the_views_cannot_show_whole():
    assert et.header_notes({"dropped": 0}) == [] and et.header_notes({"dropped": True, "engines": 1}) == []
    assert et.header_notes({"dropped": 51, "engines": 2}) == [("common.trace.dropped", {"n": 51}),
                                                              ("common.trace.engines", {"n": 2})]


def test_event_lines_in_both_languages(trees):
    _, steps = trees["chunk"]
    ops = {e.op for s in steps for e in s.events}
    assert {"match", "backoff", "copy_on_write", "checkpoint_create", "snapshot", "donate", "evict"} <= ops
    for s in steps:
        en, zh = in_language("en", ct_fig.event_lines, s), in_language("zh", ct_fig.event_lines, s)
        assert len(en) == len(zh) == len([e for e in s.events if e.op in cs.CACHE_OPS_SHOWN]) > 0
    assert any("tombstone" in ln for ln in in_language("en", ct_fig.event_lines, steps[3]))


# ---- restore paths ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def restores():
    return {(q, m): rp.run(q, m) for q, m in [("mid", "none"), ("mid", "boundary"), ("mid", "conv"), ("turn", "none")]}


def test_correct_restore_matches_the_run_without_cache(restores):
    r = restores[("mid", "none")]
    assert (r.kv_len, r.state_len, r.restored_from) == (57, 48, 48)
    assert r.check_ok and not r.check_msg and r.recorded_boundary == 48
    assert r.ckpt_slot != r.active_slot  # copy-on-write into a fresh slot
    assert sum(n for _, _, n in r.chunks) == r.N - 48 and r.chunks[0][1] == 48
    assert r.tokens == r.ref_tokens == r.correct_tokens and max(r.diffs) <= rp.SAME_TOL
    t = restores[("turn", "none")]
    assert t.kv_len == t.state_len == t.cached_len  # the next turn hits the donated end exactly
    assert t.recompute == t.N - t.cached_len and t.same_tokens


def test_restoring_the_wrong_boundary_diverges(restores):
    b, c = restores[("mid", "boundary")], restores[("mid", "conv")]
    good = restores[("mid", "none")]
    assert b.restored_from == 32 and not b.check_ok and "boundary 32" in b.check_msg and "48 tokens" in b.check_msg
    assert b.state_diff > 0.1 and b.conv_diff > 0.1
    # conv windows written wrong under the right record: the check (records, not tensors) passes them
    assert c.state_diff == 0.0 and c.conv_diff > 0.1 and c.check_ok and not c.check_msg
    for r in (b, c):
        assert max(r.diffs) > rp.BROKEN_MIN and max(r.correct_diffs) <= rp.SAME_TOL
        assert r.correct_tokens == good.tokens  # the reference side is the correct run
        assert (r.kv_len, r.state_len) == (57, 48)  # same match and back-off; only the state is wrong
    # the bypass was local to that run: the engine's check still refuses a wrong boundary
    llm = cs.radix_llm()
    toks = cs.text_tokens(rp.PROMPT, rp.PROMPT_LEN)
    llm.generate([toks], cs.params(2))
    slot = llm.prefix_cache.tree.match_prefix(toks[:32]).state_slot
    with pytest.raises(BoundaryMismatchError):
        llm.prefix_cache.check_boundary(slot, toks[:48], list(range(48)))


def test_the_break_it_check_can_fail(monkeypatch):
    """If the engine accepted any checkpoint, the page must not claim that it refuses one."""
    monkeypatch.setattr(RadixPrefixCache, "check_boundary", lambda self, *a, **k: None)
    with pytest.raises(cs.ScenarioCheckFailed, match="accepted a checkpoint"):
        rp.run("short", "boundary")


def test_the_conv_fault_is_said_to_pass_only_if_it_does(monkeypatch):
    """The page says the check passes a conv fault written under the right record; if it refused it, the page
    would be wrong, and the run says so."""
    calls = []

    def refuse(self, *a, **k):  # the honest restore's check passes; the faulty slot's is refused
        calls.append(a)
        if len(calls) > 1:
            raise BoundaryMismatchError("refused")

    monkeypatch.setattr(RadixPrefixCache, "check_boundary", refuse)
    with pytest.raises(cs.ScenarioCheckFailed):
        rp.run("short", "conv")


def test_restore_figures_step_on_fixed_axes(restores):
    r = restores[("mid", "boundary")]
    figs = [rp_fig.path_figure(r, i) for i in range(len(rp.STEPS))]
    assert len({f.layout.title.text for f in figs}) == len(rp.STEPS)
    assert len({f.layout.xaxis.range for f in figs}) == 1
    assert [len(f.data) for f in figs] == sorted(len(f.data) for f in figs) and len(figs[-1].data) > len(figs[0].data)
    d = in_language("zh", rp_fig.divergence_figure, r)
    assert len(d.data) == 2 and d.layout.yaxis.type == "log" and "错误恢复" in d.layout.title.text
    assert len(rp_fig.divergence_figure(restores[("mid", "none")]).data) == 1
    for i in range(len(rp.STEPS)):
        assert in_language("en", rp_fig.step_text, r, i) and in_language("zh", rp_fig.step_text, r, i)
    assert "32" in in_language("en", rp_fig.step_text, r, rp.STEPS.index("restore"))
