"""The data side of the "vLLM state blocks" and "Checkpoint density and policies" pages (no Streamlit).

Every fact the state-blocks page shows is checked against the engine here a second time, by an
independent run and by the cache's own functions; the density page's numbers are checked against
the cost model, the simulator and the CSV files; each check is shown to fail when the fact does not
hold."""

from __future__ import annotations

import csv
import math
import pathlib
import random

import pytest

from kda_ref import LLM, ModelConfig
from kda_ref.cache.block import BlockHashTable, chain_hashes, retention_mask
from kda_ref.cache.cost import CostModel
from kda_ref.sim import CacheSimulator
from model_viz.scenarios import common as cs
from model_viz.figures import checkpoint_density as dn_fig
from model_viz.scenarios import checkpoint_density as dn
from model_viz.figures import state_blocks as sb_fig
from model_viz.scenarios import state_blocks as sb
from kda_ref.utils import cdiv
from model_viz.i18n import in_language

B, U = sb.BLOCK_SIZE, sb.HASH_UNIT


# ---- the fixed point, replayed ------------------------------------------------------------------------
def _units(n: int, kv: int, states: dict[int, int]) -> list[dict]:
    """``n`` units, the first ``kv`` of them cached, ``states`` = {boundary: slot}."""
    return [{"end": (i + 1) * U, "kv": i < kv, "state": states.get((i + 1) * U)} for i in range(n)]


def test_fixed_point_walks_left_to_right_then_right_to_left():
    units = _units(12, 10, {32: 1, 48: 2})  # KV for 80 tokens; states at a block end (32) and inside one (48)
    r = sb.fixed_point(units, 95, B, U, partial=False)
    assert [x.kv for x in r] == [80, 32] and r[-1].state == 32 and len(r) == 2
    # right to left from the KV match: 80, 72, 64, 56 have no state, 48 is inside a block (skipped), 32 hits
    assert r[0].scanned == [(80, "kv_only"), (72, "kv_only"), (64, "kv_only"), (56, "kv_only"), (48, "skipped"),
                            (40, "kv_only"), (32, "hit")]
    p = sb.fixed_point(units, 95, B, U, partial=True)
    assert p[-1].state == 48 and p[0].scanned[-1] == (48, "hit")
    assert sb.fixed_point(_units(4, 0, {}), 31, B, U, partial=True)[-1].state == 0
    # the KV group bounds the state group: a state beyond the KV match is not reachable
    assert sb.fixed_point(_units(12, 4, {64: 3}), 95, B, U, partial=False)[-1].state == 0


def test_fixed_point_equals_the_engine_cache_on_random_tables():
    """The page's replay against ``BlockHashTable.find_longest_cache_hit`` on random tables."""
    rng = random.Random(0)
    for trial in range(200):
        partial = trial % 2 == 0
        cache = BlockHashTable(B, U, free_kv=lambda ids: None, free_state=lambda slot: None, allow_partial=partial)
        base = [rng.randrange(256) for _ in range(96)]
        for _ in range(rng.randrange(1, 4)):  # a few cached prefixes of random length sharing ``base``
            cut = rng.randrange(0, 96)
            seq = base[:cut] + [rng.randrange(256) for _ in range(rng.randrange(8, 64))]
            n = len(seq) // U * U
            h = chain_hashes(seq, U)
            cache.insert_kv(h, list(range(1000 * trial, 1000 * trial + n // U)), n)
            for p in range(U, n + 1, U):
                if (p % B == 0 or partial) and rng.random() < 0.3:
                    cache.insert_state(h, p, rng.randrange(10_000))
        query = base[:rng.randrange(8, 96)] + [rng.randrange(256) for _ in range(rng.randrange(0, 20))]
        known = len(query) - 1
        units = sb._snapshot_units(cache, query[:known])
        hit = cache.find_longest_cache_hit(chain_hashes(query[:known], U), known)
        rounds = sb.fixed_point(units, known, B, U, partial)
        assert (rounds[-1].state, rounds[0].kv, len(rounds)) == (hit.state_len, hit.junction_len, hit.rounds), trial


def test_offered_boundaries_follow_the_mode():
    # one step 0..64 (chunk states at 16, 32, 48), decode steps after 104
    assert sb.offered_boundaries("all", 0, [64, 104, 105], 105) == [32, 64, 96]
    assert sb.offered_boundaries("align", 0, [64, 104, 105], 105) == [64]
    # a step starting at 40 delivers chunk states at 56, 72, ...: not the block boundary 64
    assert sb.offered_boundaries("all", 0, [40, 69, 70], 70) == [32]
    assert sb.offered_boundaries("all", 64, [96, 100], 100) == [96]


# ---- the canned scenario ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dense():
    return sb.run("all", "dense", True)


def _independent(mode, retention, partial):
    """The same scenario on a fresh engine, read only through ``LLM.stats`` and ``llm.prefix_cache.table``."""
    llm = LLM(cs.tiny_model(cs.CHUNK), prefix_cache="block", chunk_size=cs.CHUNK, block_size=B, hash_unit=U,
              mamba_cache_mode=mode, retention_interval=sb.retention_value(retention), partial_hits=partial,
              max_num_batched_tokens=sb.TOKEN_BUDGET)
    out = []
    for prompt in sb.scenario_prompts():
        before = llm.stats()["cached_prompt_tokens"]
        o = llm.generate([prompt], cs.params(sb.MAX_TOKENS))[0]
        seq = (prompt + o.token_ids)[: len(prompt) + len(o.token_ids) - 1]
        h = chain_hashes(seq, U)
        states = {p: llm.prefix_cache.table.node_at(h, p).state for p in range(U, len(seq) // U * U + 1, U)
                  if llm.prefix_cache.table.node_at(h, p) is not None and llm.prefix_cache.table.node_at(h, p).state is not None}
        out.append((llm.stats()["cached_prompt_tokens"] - before, states))
    return out


def test_hits_and_states_equal_an_independent_engine_run(dense):
    indep = _independent("all", "dense", True)
    for s, (reused, states) in zip(dense.steps, indep):
        assert s.hit == reused, s.label  # the fixed point = the engine's cached_prompt_tokens
        assert {u["end"]: u["state"] for u in s.after if u["state"] is not None} == states, s.label
    assert [s.hit for s in dense.steps] == [0, 64, 32, 80, 104]
    assert [s.junction for s in dense.steps] == [0, 80, 40, 80, 104]


def test_block_table_is_null_blocks_then_the_hits_state(dense):
    for s in dense.steps:
        if not s.hit:
            assert s.admit_table == [] and s.hit_slot is None
            continue
        n = cdiv(s.hit, B)
        assert s.admit_table == [None] * (n - 1) + [s.hit_slot]
        # the slot is the state the table held at the hit before the request
        assert s.units[s.hit // U - 1]["state"] == s.hit_slot is not None
        cow = [e for e in s.events if e["op"] == "copy_on_write" and e["req_id"] == s.req_id]
        assert cow[0]["detail"] == {"checkpoint": s.hit_slot, "active": s.active_slot}
        assert s.active_slot != s.hit_slot  # copy-on-write into the request's own slot
    r3 = dense.steps[3]
    assert r3.partial and r3.hit == 80 and len(r3.admit_table) == 3 and r3.admit_table[:2] == [None, None]
    assert any(e["op"] == "partial_hit" for e in r3.events)
    assert not dense.steps[1].partial and dense.steps[1].admit_table[0] is None


def test_retention_masks_equal_retention_mask(dense):
    for i, s in enumerate(dense.steps):
        m = dense.masks(i)
        for name in sb.RETENTIONS:
            assert m[name] == retention_mask(s.boundaries(), sb.retention_value(name), s.reachable())
    r0 = dense.steps[0]
    assert r0.boundaries() == [32, 64, 96] and r0.reachable() == [96, 104]
    assert dense.masks(0) == {"dense": [True] * 3, "interval": [False, True, True], "reachable": [False, False, True]}


def test_modes_and_retentions_save_where_they_say(dense):
    align = sb.run("align", "dense", True)
    reach = sb.run("all", "reachable", False)
    assert [x["pos"] for x in dense.steps[0].saved] == [32, 64, 96, 104]  # every block + the partial tail
    assert [x["pos"] for x in align.steps[0].saved] == [64, 96, 104]  # only step ends on a block
    assert align.steps[0].offered == [64, 96] and dense.steps[0].offered == [32, 64, 96]
    assert [(x["pos"], x["op"]) for x in reach.steps[0].saved] == [(96, "commit")]  # the replay point only
    assert reach.steps[0].pending == [32, 64, 96]
    assert reach.steps[1].hit == 0 and reach.steps[1].targets == [64]  # first divergence: no junction state yet
    for run_ in (align, reach):
        for i, s in enumerate(run_.steps):
            keep = dict(zip(s.boundaries(), run_.masks(i)[run_.retention]))
            assert all(keep[x["pos"]] for x in s.saved if x["pos"] % B == 0)
            assert all(s.same_tokens and s.max_diff <= sb.MAX_LOGIT_DIFF for s in run_.steps)


def test_the_checks_can_fail(monkeypatch):
    """A wrong reference, a wrong replay: the page must refuse to show the facts."""
    good = sb.reference_outputs()
    bad = tuple(([t + 1 for t in toks], logits) for toks, logits in good)
    monkeypatch.setattr(sb, "reference_outputs", lambda: bad)
    with pytest.raises(cs.ScenarioCheckFailed, match="cached output differs"):
        sb.run("align", "dense", False)
    monkeypatch.setattr(sb, "reference_outputs", lambda: good)
    real = sb.fixed_point

    def optimistic(*args):  # claims the state group hits wherever the KV group does
        rounds = real(*args)
        return rounds[:-1] + [sb.Round(rounds[-1].start, rounds[-1].kv, rounds[0].kv, [])]

    monkeypatch.setattr(sb, "fixed_point", optimistic)
    with pytest.raises(cs.ScenarioCheckFailed, match="r1: replayed fixed point 80"):
        sb.run("align", "dense", False)


def test_figures_step_on_fixed_axes(dense):
    figs = [sb_fig.hit_figure(dense, i) for i in range(5)]
    assert len({f.layout.xaxis.range for f in figs}) == 1 and figs[0].layout.xaxis.range == (-2, 130)
    assert figs[0].layout.title.text != figs[1].layout.title.text
    assert "hit = 64" in figs[1].layout.title.text and "2 rounds" in figs[1].layout.title.text
    star = [d for d in figs[1].data if d.name == "the state found"][0]
    assert list(star.x) == [64]
    t0, t3 = sb_fig.table_figure(dense, 0), in_language("zh", sb_fig.table_figure, dense, 3)
    assert t0.layout.xaxis.range == t3.layout.xaxis.range
    assert [a.text for a in t3.layout.annotations if a.text] == [f"写时复制：槽位 {dense.steps[3].hit_slot} → 槽位 "
                                                                 f"{dense.steps[3].active_slot}"]
    assert "2 null block(s) + 1 real" in sb_fig.table_figure(dense, 3).layout.title.text
    rf = sb_fig.retention_figure(dense, 0)
    assert "▶ dense (None)" in list(rf.layout.yaxis.categoryarray)
    assert "keeps 32, 64, 96" in rf.layout.title.text
    last = len(dense.steps) - 1  # r4 repeats a prompt exactly: no boundary past its hit, rows still named
    assert not dense.steps[last].boundaries()
    rl = sb_fig.retention_figure(dense, last)
    assert rl.layout.yaxis.type == "category" and set(rl.layout.yaxis.categoryarray) <= {
        y for d in rl.data for y in (d.y or ())}
    assert any(a.text == "no block boundary past the hit: this request computed nothing new"
               for a in rl.layout.annotations)
    u = in_language("zh", sb_fig.reuse_figure, dense, 2)
    assert list(u.data[0].y) == [s.hit for s in dense.steps] and "复用" in u.layout.title.text


def test_event_lines_in_both_languages(dense):
    for s in dense.steps:
        en, zh = in_language("en", sb_fig.event_lines, s), in_language("zh", sb_fig.event_lines, s)
        assert len(en) == len(zh) == len([e for e in s.events if e["op"] in sb.EVENT_OPS]) > 0
    lines = in_language("en", sb_fig.event_lines, dense.steps[3])
    assert any("partial_hit" in ln and "vllm.state_block.partial_hit" in ln for ln in lines)


# ---- checkpoint density: cost model ---------------------------------------------------------------------
def test_cost_facts_match_the_48b_arithmetic():
    f = dn.cost_facts()
    assert round(f["state_mib"], 1) == 41.4 and f["kv_bytes_per_token"] == 8064
    assert round(f["break_even_tokens"]) == 5384
    assert round(dn.ratio(64)) == 84 and round(dn.ratio(4096), 1) == 1.3 and round(dn.ratio(1024), 1) == 5.3
    c = dn.cost_model()
    for r in dn.break_even_rows():
        assert math.isclose(r["ratio"] * r["N"] * c.kv_bytes_per_token, c.state_bytes)
        assert r["recompute_tokens"] == (r["N"] - 1) / 2 and r["recompute_ms"] > 0
    ms = [r["recompute_ms"] for r in dn.break_even_rows()]
    assert ms == sorted(ms)  # sparser checkpoints recompute more


def test_cost_figure_marks_the_interval_on_fixed_axes():
    a, b = dn_fig.cost_figure(256), in_language("zh", dn_fig.cost_figure, 4096)
    assert a.layout.xaxis.range == b.layout.xaxis.range and a.layout.yaxis.range == b.layout.yaxis.range
    assert list(a.data[2].x) == [256] and list(b.data[2].x) == [4096]
    assert math.isclose(a.data[2].y[0], dn.ratio(256))
    assert "倍" in b.layout.title.text


# ---- checkpoint density: simulator ----------------------------------------------------------------------------
def test_simulate_equals_the_simulator_and_shows_the_dilemma():
    s = dn.simulate("long_document_qa", None, 1.0, "lru")
    direct = CacheSimulator(ModelConfig.kimi_linear_48b(), "block", 2**30, dn.options(None, "lru"),
                            cost=CostModel(ModelConfig.kimi_linear_48b())).run(dn.workload("long_document_qa").requests)
    assert s["token_hit_rate"] == direct.token_hit_rate and s["evictions"] == direct.evictions
    sparse = dn.simulate("long_document_qa", 0, 1.0, "lru")
    # dense per-block states at a small budget: many more evictions, fewer tokens reused
    assert s["evictions"] > 5 * sparse["evictions"] and s["token_hit_rate"] < sparse["token_hit_rate"]
    assert s["requests"] == dn.REQUESTS["long_document_qa"] and s["wall_s"] < 30
    assert dn.workload("few_shot").stats()["num_requests"] == dn.NUM_REQUESTS
    with pytest.raises(ValueError, match="^interval"):
        dn.options(300, "lru")
    assert "error" in dn.simulate("long_document_qa", None, 0.05, "lru")  # a budget too small: no crash


def test_sweep_figure_plots_the_rows():
    rows = [{"token_hit_rate": 0.1 * k, "flops_saved_frac": 0.05 * k, "mean_checkpoint_gib": 0.5, "evictions": k}
            for k in range(len(dn.INTERVALS))]
    rows[2] = {"error": "too small"}
    f = dn_fig.sweep_figure(rows, 1024, 4.0)
    ys = list(f.data[0].y)
    assert ys[1] == 0.1 and math.isnan(ys[2]) and list(f.data[2].y)[0] == 0.125
    assert list(f.data[0].marker.opacity) == [0.45, 1.0, 0.45, 0.45, 0.45, 0.45]
    assert f.layout.yaxis.range == (0, 1.05) and "every 1024" in f.layout.title.text
    failed = dn_fig.sweep_figure(rows, dn.INTERVALS[2], 4.0)  # the selected setting is the one that failed
    assert "cannot run" in failed.layout.title.text and "nan" not in failed.layout.title.text


# ---- checkpoint density: the benchmark CSVs ---------------------------------------------------------------------
def _write(path: pathlib.Path, rows: list[dict], cols=None) -> pathlib.Path:
    cols = cols or list(rows[0])
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return path


def bench_rows() -> list[dict]:
    from kda_ref.bench.workloads import COLUMNS

    rows = []
    for fam in ("multi_turn", "few_shot"):
        for b in (4, 16, 64):
            for k, pol in enumerate(("none", "block dense", "marconi")):
                r = dict.fromkeys(COLUMNS, 0)
                r.update(family=fam, budget_gib=b, policy=pol, cache="block", token_hit_rate=0.1 * k + b / 200,
                         flops_saved_frac=0.1 * k, alpha="")
                rows.append(r)
    return rows


def test_load_bench_reads_a_good_file(tmp_path):
    rows = dn.load_bench(_write(tmp_path / "w.csv", bench_rows()))
    assert len(rows) == 18 and rows[4]["budget_gib"] == 16.0 and rows[4]["policy"] == "block dense"
    assert dn.families_in(rows) == ["multi_turn", "few_shot"] and rows[0]["alpha"] == ""


@pytest.mark.parametrize("mutate, msg", [
    (lambda rows: [{k: v for k, v in r.items() if k != "flops_saved_frac"} for r in rows],
     "missing columns flops_saved_frac"),
    (lambda rows: [dict(r, token_hit_rate="n/a") if i == 3 else r for i, r in enumerate(rows)],
     "line 5: token_hit_rate"),
    (lambda rows: [dict(r, budget_gib="") if i == 0 else r for i, r in enumerate(rows)], "line 2: budget_gib is empty"),
    (lambda rows: [dict(r, token_hit_rate=1.7) for r in rows], "not a fraction"),
    (lambda rows: [dict(r, family="") for r in rows], "empty text field"),
])
def test_load_bench_refuses_a_malformed_file(tmp_path, mutate, msg):
    path = _write(tmp_path / "bad.csv", mutate(bench_rows()))
    with pytest.raises(dn.BenchError) as e:
        dn.load_bench(path)
    assert e.value.key == "checkpoint_density.bench.bad" and msg in in_language("en", e.value.message) and msg in in_language("zh", e.value.message)
    assert "bad.csv" in in_language("en", e.value.message)


def test_load_bench_missing_empty_or_binary_file(tmp_path):
    with pytest.raises(dn.BenchError) as e:
        dn.load_bench(tmp_path / "nope.csv")
    assert e.value.key == "checkpoint_density.bench.missing" and dn.BENCH_COMMAND in in_language("en", e.value.message)
    assert dn.BENCH_COMMAND in in_language("zh", e.value.message)
    (tmp_path / "empty.csv").write_text("family,budget_gib,policy,token_hit_rate,flops_saved_frac\n")
    with pytest.raises(dn.BenchError, match="checkpoint_density.bench.bad") as e:
        dn.load_bench(tmp_path / "empty.csv")
    assert "no data rows" in in_language("en", e.value.message)
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(dn.BenchError) as e:
        dn.load_bench(tmp_path / "bin.csv")
    assert e.value.key == "checkpoint_density.bench.bad"


def test_bench_figure_per_family_and_policy(tmp_path):
    rows = dn.load_bench(_write(tmp_path / "w.csv", bench_rows()))
    hit = dn_fig.bench_figure(rows, "few_shot", "token_hit_rate")
    assert [d.name for d in hit.data] == ["none", "block dense", "marconi"]
    assert [d.type for d in hit.data] == ["scatter"] * 3
    # a dot chart: a row per policy (row 2: marconi), the budgets 4, 16, 64 GiB nudged within it
    assert list(hit.data[2].customdata) == ["4", "16", "64"]
    assert list(hit.data[2].x) == pytest.approx([0.22, 0.28, 0.52]) and [round(y) for y in hit.data[2].y] == [2, 2, 2]
    assert list(hit.layout.yaxis.ticktext) == ["none", "block dense", "marconi"]
    fl = in_language("zh", dn_fig.bench_figure, rows, "multi_turn", "flops_saved_frac")
    assert [d.type for d in fl.data] == ["bar"] * 3 and list(fl.data[1].y) == pytest.approx([0.1] * 3)
    assert fl.layout.yaxis.range == (0, 1.05) and "多轮对话" in fl.layout.title.text  # the family's name, not its id
    assert "few-shot" in hit.layout.title.text and "few_shot" not in hit.layout.title.text
    assert hit.data[1].marker.color == fl.data[1].marker.color  # one colour per policy in both charts
    with pytest.raises(ValueError):
        dn_fig.bench_figure(rows, "few_shot", "hits")


def test_prefix_csv_of_the_repo_and_its_figure():
    rows = dn.load_prefix()
    assert len(rows) >= 10 and set(dn.families_in(rows, "workload")) >= {"shared_prefix", "multi_turn"}
    f = dn_fig.prefix_figure(rows, "shared_prefix")
    chunk = [r for r in rows if r["workload"] == "shared_prefix" and r["policy"].startswith("dense")
             and r["budget_mb"] == 2.0][0]
    bar = f.data[0]  # the smallest budget
    k = list(bar.x).index(chunk["policy"])
    assert bar.y[k] == pytest.approx(chunk["cached_prompt_tokens"] / chunk["prompt_tokens"])
