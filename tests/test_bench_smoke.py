"""The benchmark scripts run end to end on tiny settings (they measure; these only keep them working)."""

from __future__ import annotations

import pathlib

import subprocess

import pytest

import torch

from kda_ref.speculative import SPEC_STATES
from kda_ref.bench import checkpoints, engine, kernels, prefix_cache
from kda_ref.bench.args import parse
from kda_ref.model import HybridModel, ModelConfig
from kda_ref import LLM


def test_kernel_bench_runs():
    res = kernels.run([64], repeats=1, with_anchors=False)
    names = {r["impl"] for r in res["rows"]}
    assert names == {"ours recurrent_kda", "ours chunk_kda", "ours chunk_kda readable"} and all(r["tokens_per_s"] > 0 for r in res["rows"])
    assert "GFLOP/s" in kernels.to_markdown(res)


def test_engine_bench_helpers_run():
    model = HybridModel(ModelConfig.tiny(), seed=0).eval()
    assert engine.ours_prefill(model, 64) > 0
    assert engine.ours_decode(model, 2, 3, prompt_len=16) > 0


def test_prefix_cache_bench_serve_checks_tokens():
    model = HybridModel(ModelConfig.tiny(), seed=0).eval()
    a = prefix_cache.serve(model, "shared_prefix", "none", 8 << 20, max_tokens=2)
    b = prefix_cache.serve(model, "shared_prefix", "branch", 8 << 20, max_tokens=2)
    assert a["outputs"] == b["outputs"]
    assert b["cached_prompt_tokens"] > 0 and a["cached_prompt_tokens"] == 0
    assert b["computed_prompt_tokens"] < a["computed_prompt_tokens"]


def test_checkpoint_drift_bench_runs():
    res = checkpoints.measure(dtypes=("fp32",), turns=1, max_tokens=2)
    (row,) = res["rows"]
    assert row["max_logit_drift"] < 1e-4 and row["token_agreement"] == 1.0
    torch.testing.assert_close(torch.tensor(row["token_agreement"]), torch.tensor(1.0))


def test_workload_policy_benchmark_smoke(tmp_path):
    from kda_ref.bench import workloads as wb

    rows = wb.run(["multi_turn"], [1], ["none", "block dense", "marconi", wb.OURS], requests=40, progress=False)
    assert [r["policy"] for r in rows] == ["none", "block dense", "marconi", wb.OURS]
    assert all(set(r) == set(wb.COLUMNS) for r in rows)
    assert rows[0]["token_hit_rate"] == 0 and rows[1]["token_hit_rate"] > 0
    (c,) = wb.comparisons(rows)
    assert c["ours_vs_marconi_flops"] > 0 and c["marconi_vs_dense_hit_x"] > 0
    assert "| multi_turn | 1 | marconi |" in wb.to_markdown(rows)
    out = tmp_path / "w.csv"
    wb.cli(parse("workloads", ["--requests", "20", "--budgets-gib", "1", "--families", "few_shot", "--policies", "none", "block reachable",
                                "--out-csv", str(out)]))
    assert out.read_text().splitlines()[0].split(",") == wb.COLUMNS
    # the simulator's timing mode writes its rows too (its --out-csv was claimed, then left empty and released)
    wb.cli(parse("workloads", ["--scale", "5", "--out-csv", str(out)]))
    lines = out.read_text().splitlines()
    assert lines[0].startswith("policy,requests,prompt_tokens") and len(lines) == 1 + 4


def test_workload_engine_spot_check_smoke():
    from kda_ref.bench import workloads as wb

    rows = wb.engine_spot_check(families=["shared_system_prompt"], policies=["block reachable"], num_requests=8,
                                progress=False)
    assert [r["policy"] for r in rows] == ["none", "block reachable"]
    assert rows[1]["cached_prompt_tokens"] > 0 and rows[1]["max_logit_drift"] <= 1e-4


def test_spec_tree_bench_compares_widths_and_checks_tokens():
    from kda_ref.bench import spec

    rows = spec.measure_tree(new_tokens=8, k=2, widths=(1, 2), repeats=1)
    assert [r["width"] for r in rows] == [1, 2] and all(r["decode_tok_s"] > 0 for r in rows)
    assert "| tree, width 2 | 2 |" in spec.tree_to_markdown(rows)


def test_spec_bench_runs_and_checks_tokens():
    from kda_ref.bench import spec

    rows = spec.measure(new_tokens=6, ks=(1,), repeats=1, lookup_mins=(2,))
    n = len(SPEC_STATES)
    assert len(rows) == 2 * (1 + n + 1) and all(r["same_tokens"] for r in rows)
    assert [r["prompt_lookup_min"] for r in rows if r["workload"] == "repetitive"] == [None] + [1] * n + [2]
    assert "| repetitive | ngram, n >= 2 | 1 | per_step |" in spec.to_markdown(rows)
    assert {r["spec_state"] for r in rows if r["method"] == "ngram"} == set(SPEC_STATES)
    plain = [r for r in rows if r["method"] == "plain"]
    assert all(r["speedup"] == 1.0 and r["decode_speedup"] == 1.0 for r in plain)
    assert all(r["decode_tok_s"] > 0 for r in rows)
    assert all(r["decode_steps"] == 5 and r["ceiling"] == 1.0 for r in plain)  # one step per token after the first
    for r in rows:  # every decode step emits at least one token, a verify step up to 1 + k
        assert 5 / (1 + (r["k"] or 0)) <= r["decode_steps"] <= 5 and r["ceiling"] == 5 / r["decode_steps"]
    replay = next(r for r in rows if r["spec_state"] == "replay")
    per_step = next(r for r in rows if r["spec_state"] == "per_step")
    assert replay["rollback_bytes_48b"] < per_step["rollback_bytes_48b"] / 20
    assert "| repetitive | ngram | 1 | replay |" in spec.to_markdown(rows)


def test_spec_bench_refuses_a_request_too_short_for_decode_tok_s():
    from kda_ref.bench import spec

    with pytest.raises(ValueError, match="new_tokens"):
        spec.measure(new_tokens=1, ks=(1,), repeats=1)


def test_static_decode_bench_compares_both_modes_on_the_same_tokens():
    from kda_ref.bench import spec

    rows = spec.measure_static(batches=(1, 3), new_tokens=3, prompt_len=20, repeats=1, modes=("dynamic", "static"))
    assert [(r["batch"], r["mode"]) for r in rows] == [(1, "dynamic"), (1, "static"), (3, "dynamic"), (3, "static")]
    assert all(r["tok_s"] > 0 for r in rows) and all(r["x_dynamic"] == 1.0 for r in rows if not r["static_decode"])
    assert all(r["compile_s"] == 0 for r in rows)
    assert "| 3 | static |" in spec.static_to_markdown(rows)
    with pytest.raises(ValueError, match="modes"):
        spec.measure_static(modes=("static", "eager"))


@pytest.mark.slow
def test_cp_bench_runs_processes_and_checks_the_logits():
    from kda_ref.bench import cp

    rows = cp.measure(lengths=(64,), ranks=(2,), timeout=60)
    assert [(r["tokens"], r["ranks"]) for r in rows] == [(64, 1), (64, 2)]
    assert rows[1]["sent_bytes_per_rank"] > 0 and rows[1]["max_logit_diff"] < 1e-3
    assert "| 64 | 2 |" in cp.to_markdown(rows)
    big = cp.arithmetic_48b(lengths=(131072,), ranks=(4,))
    assert big[0]["kda_maps"] == 80 * 2**20 and "| 131,072 | 4 |" in cp.arithmetic_markdown(big)


def test_disagg_bench_measures_bytes_by_kind_and_checks_tokens():
    from kda_ref.bench import disagg

    rows = disagg.measure(lengths=(40,), requests=2, new_tokens=3)
    r = rows[0]
    assert r["kv"] + r["state"] + r["conv"] == r["arith_total"]  # the measured handoff is the arithmetic
    assert r["transfer_s"] >= 0 and "| 40 |" in disagg.to_markdown(rows)
    big = disagg.arithmetic_48b(lengths=(1024,))
    assert big[0]["state"] == 20 * 32 * 128 * 128 * 4 and "84%" in disagg.arithmetic_markdown(big)


def test_verify_cost_bench_times_every_verify_length_against_decode():
    from kda_ref.bench import spec

    rows = spec.measure_verify_cost(max_tokens=3, iters=2, prompt_len=20)
    assert [r["tokens"] for r in rows] == [1, 2, 3] and rows[0]["x_decode"] == 1.0
    assert all(r["ms"] > 0 for r in rows)
    table = spec.verify_cost_to_markdown(rows)
    assert "| 1 (decode) |" in table and f"| eager | 3 | {rows[2]['ms']:.2f} |" in table


def test_verify_cost_bench_times_the_static_buckets_too():
    from kda_ref.bench import spec

    rows = spec.measure_verify_cost(max_tokens=3, iters=2, prompt_len=20, static=True)
    assert [(r["tokens"], r["mode"]) for r in rows] == [(1, "static"), (2, "static"), (3, "static")]
    assert rows[0]["x_decode"] == 1.0 and all(r["ms"] > 0 for r in rows)
    assert "| static | 2 |" in spec.verify_cost_to_markdown(rows)


@pytest.mark.slow
def test_spec_bench_compiled_rows_keep_the_tokens_and_compare_within_their_mode():
    from kda_ref.bench import spec
    from kda_ref.engine.static_decode import cpp_compiler

    if cpp_compiler() is None:
        pytest.skip("inductor needs a C++ compiler on the CPU")
    rows = spec.measure(new_tokens=6, ks=(1,), repeats=1, torch_compile=True)
    compiled = [r for r in rows if r["torch_compile"]]
    assert [(r["method"], r["spec_state"]) for r in compiled if r["workload"] == "random"] == [
        ("plain", None), ("ngram", "per_step"), ("ngram", "slots")]  # the compiled modes measure() documents
    assert all(r["same_tokens"] for r in rows)
    assert all(r["decode_speedup_same_mode"] == 1.0 for r in compiled if r["method"] == "plain")
    assert "ngram, compiled" in spec.to_markdown(rows)


def test_commit_cost_bench_times_every_strategy():
    """Every registered strategy at both sizes, both kept counts; a strategy that switches slots commits
    nothing, so its commit is the cheapest."""
    from kda_ref.bench.spec_commit import SIZES, commit_cost_to_markdown, measure_commit_cost

    rows = measure_commit_cost(k=2, batches=(1,), iters=2)
    assert len(rows) == len(SIZES) * 2 * len(SPEC_STATES)
    assert {r["spec_state"] for r in rows} == set(SPEC_STATES) and all(r["verify_ms"] > 0 for r in rows)
    for size in SIZES:
        for kept in (1, 3):
            case = {r["spec_state"]: r for r in rows if r["size"] == size and r["kept"] == kept}
            assert case["slots"]["commit_ms"] <= min(r["commit_ms"] for r in case.values())
    assert "| 3 of 3 | recoverssm |" in commit_cost_to_markdown(rows)


def test_mtp_bench_compares_mtp_and_ngram_drafts_with_the_plain_tokens():
    from kda_ref.bench import spec_mtp

    rows = spec_mtp.measure_mtp(new_tokens=6, ks=(1,), repeats=1, states=("recoverssm",))
    assert [(r["workload"], r["method"]) for r in rows] == [(w, m) for w in ("repetitive", "random", "held-out")
                                                            for m in ("plain", "ngram", "mtp")]
    assert all(r["same_tokens"] for r in rows) and rows[0]["x_plain"] == 1.0
    mtp = [r for r in rows if r["method"] == "mtp"]
    assert all(1 <= r["tokens_per_verify"] <= 2 and 0 <= r["acceptance"] <= 1 for r in mtp)
    assert all(r["draft_ms"] > 0 and r["step_ms"] > 0 for r in mtp)  # each draft timed, apart from its verify
    # one engine serves every workload: each row counts its own workload's verify steps (one request of 6
    # tokens: at most 5), not the ones the engine ran before
    assert all(1 <= r["verify_steps"] <= 5 for r in rows if r["method"] != "plain")
    assert all(r["draft_ms"] is None and r["step_ms"] > 0 for r in rows if r["method"] == "plain")
    assert "| repetitive | mtp | 1 | recoverssm |" in spec_mtp.to_markdown(rows)


def test_a_drafts_time_is_counted_apart_from_the_verify_step():
    """``step_times``: the verify step is the decode time less the drafts', over the verify steps; the counters
    the warm-up left are not counted."""
    from kda_ref.bench.spec_mtp import step_times

    before = {"spec_draft_calls": 2, "spec_draft_seconds": 0.5, "spec_verify_steps": 2}
    after = {"spec_draft_calls": 12, "spec_draft_seconds": 0.51, "spec_verify_steps": 12}
    got = step_times(before, after, decode_s=0.05, tokens=20)
    assert got["draft_ms"] == pytest.approx(1.0) and got["step_ms"] == pytest.approx(4.0)
    assert step_times({}, {}, decode_s=0.05, tokens=20) == {"draft_ms": None, "step_ms": pytest.approx(2.5)}


def _fill_row(cache, rnd, latency, wall, reader=False):
    return {"cache": cache, "round": rnd, "reader": reader, "phase": "fill 1x", "requests": 58,
            "latency_mean_ms": latency, "latency_p90_ms": latency, "wall_s": wall, "step_ms": 1.0,
            "observers_ms": 0.1, "hit_tokens": 0, "server_ms": 1.0, "offline_ms": 1.0, "server_over_offline": 1.0,
            "whole_ms": 1.0, "whole_over_offline": 1.0}


def test_the_fill_table_pairs_each_ratio_with_its_own_rounds_no_cache_server():
    """Three rounds, the machine slow in the first (no cache 200 ms): radix's ratios are 1.05, 1.10 and 1.50,
    median 1.10 -- where the medians of the raw latencies (150 / 100) would say 1.50."""
    from kda_ref.bench import serve_fill

    rows = [_fill_row("none", 0, 200.0, 2.0), _fill_row("radix", 0, 210.0, 2.1),
            _fill_row("radix", 1, 110.0, 1.1), _fill_row("none", 1, 100.0, 1.0),
            _fill_row("none", 2, 100.0, 1.0), _fill_row("radix", 2, 150.0, 1.5)]
    table = serve_fill.to_markdown(rows)
    assert "| radix | no | fill 1x | 58 | 3 | 150 / 150 | 1.10 (1.05-1.50) | 1.5 | 1.10 (1.05-1.50) |" in table
    assert "| none | no | fill 1x | 58 | 3 | 100 / 100 | 1.00 (1.00-1.00) |" in table


def test_the_fill_benchmarks_live_reader_is_a_process_that_is_gone_after():
    from kda_ref.bench import serve_fill

    with serve_fill.live_reader("http://127.0.0.1:9", every_s=0.05) as proc:
        assert proc.poll() is None  # polling (and failing to connect, quietly)
    assert proc.poll() is not None


def test_the_idle_request_is_timed_by_a_client_process_of_its_own():
    """The idle figure's client is another process (a thread here would share the server's GIL): its four
    streamed and four whole requests reach the server, and a server that cannot answer is an error naming
    why, not a time."""
    pytest.importorskip("uvicorn")
    from kda_ref.bench import serve_fill
    from kda_ref.server.live import LiveTrace
    from kda_ref.server.serve import ServerThread, make_server

    model = HybridModel(ModelConfig.micro(), seed=0).eval()
    ring = LiveTrace()
    llm = LLM(model, tracer=ring)
    with ServerThread(make_server(llm, ring, model_name="micro")) as url:
        got = serve_fill.idle_ratio(LLM(model), url, 3)
        assert llm.stats()["generated_tokens"] == 2 * 4 * 3
        more = serve_fill.idle_ratio(LLM(model), url, 3, runs=5)  # kda-ref bench serve --idle: medians of more
        assert llm.stats()["generated_tokens"] == 2 * 4 * 3 + 2 * 6 * 3  # a warm-up each, then the runs
    for r in (got, more):
        assert r["server_ms"] > 0 and r["offline_ms"] > 0 and r["whole_ms"] > 0
        assert r["server_over_offline"] == pytest.approx(r["server_ms"] / r["offline_ms"])
        assert r["whole_over_offline"] == pytest.approx(r["whole_ms"] / r["offline_ms"])
    with pytest.raises(RuntimeError, match="the idle request failed"):
        serve_fill.idle_ratio(LLM(model), "http://127.0.0.1:9", 3)


def test_a_fill_phase_reads_the_engine_process_counters():
    """A phase against a server as kda-ref serve runs it: the engine's step and observer times and its
    step count come through the pipe (they grow with the phase), and a shared prefix's hits are counted."""
    pytest.importorskip("uvicorn")
    from kda_ref.bench import serve_fill
    from kda_ref.server.engine_core import CoreSpec
    from kda_ref.server.serve import ServerThread, make_process_server

    srv = make_process_server(CoreSpec("random-micro", {"prefix_cache": "radix"}, 1, 64, "micro", trace_steps=16))
    prefix = serve_fill.unique_prompts(1, 0, 256)[0]
    with ServerThread(srv) as url:
        before = srv.loop.counters()
        row = serve_fill.run_phase(srv, url, "shared", [(prefix + [i + 1], 3) for i in range(3)], 1)
        after = srv.loop.counters()
    assert row["failed"] == 0 and row["requests"] == 3 and row["hit_tokens"] > 0
    assert after["steps"] > before["steps"] and row["step_ms"] > 0 and row["observers_ms"] > 0


def test_every_benchmark_ends_with_one_report(tmp_path, capsys):
    """``report`` prints the last tables a blank line apart and writes the numbers to the claimed ``--out``;
    without ``--out`` it writes nothing. The modules that end with it keep no JSON writing of their own."""
    import json as json_mod

    from kda_ref.bench.args import parse
    from kda_ref.bench.report import report

    out = tmp_path / "cp.json"
    report(parse("cp", ["--out", str(out)]), {"measured": [1, 2]}, "| a |", "| b |")
    assert capsys.readouterr().out == "| a |\n\n| b |\n"
    assert json_mod.loads(out.read_text()) == {"measured": [1, 2]}
    report(parse("cp", []), {"x": 1})
    assert capsys.readouterr().out == ""
    rows, both = [{"a": 1, "b": 2.5}, {"a": 3, "b": 4.0}], (tmp_path / "w.csv", tmp_path / "w.json")
    report(parse("prefix-cache", ["--out-csv", str(both[0]), "--out-json", str(both[1])]), {"rows": rows}, "t",
           csv_rows=rows)
    assert both[0].read_text().splitlines() == ["a,b", "1,2.5", "3,4.0"]
    assert json_mod.loads(both[1].read_text()) == {"rows": rows}
    bench = pathlib.Path(__file__).resolve().parents[1] / "kda_ref" / "bench"
    for name in ("checkpoints", "cp", "disagg", "engine", "kernels", "prefill", "prefix_cache", "spec", "spec_mtp",
                 "serve", "workloads"):
        text = (bench / f"{name}.py").read_text()
        assert "report(a, " in text and "json.dump" not in text, name


def test_prefill_bench_times_a_tree_in_a_process_of_its_own():
    """One round over this checkout on a tiny case: the worker process imports kda_ref from the tree, the
    rows carry tokens/s, the machine's matmul rate and the ratio to the first tree (itself: 1.0)."""
    from kda_ref.bench import prefill
    from kda_ref.train import load_trained

    model = load_trained()
    one, two = prefill.useful_flops(model, 1, 64), prefill.useful_flops(model, 2, 64)
    assert two == pytest.approx(2 * one)
    # the demo's one MLA layer is its last: a prompt's cost is linear in L (its KDA layers, and one query over L
    # keys), but for what runs at the last row alone -- the head, the last layer's MoE, its queries and output
    c, per_row = model.config, 2 * model.lm_head.weight.numel()
    for name, p in model.model.layers[-1].named_parameters():
        if p.dim() == 2 and (name.startswith("block_sparse_moe.") or name.split(".")[1] in ("q_proj", "o_proj")):
            per_row += 2 * p.numel() * (c.num_experts_per_token / c.num_experts if ".experts." in name else 1)
    assert 2 * one - prefill.useful_flops(model, 1, 128) == pytest.approx(per_row)
    res = prefill.run([prefill.HERE], [(2, 64)], repeats=1, steps=1, threads=1, kind="kimi_linear")
    rows = prefill.summarize(res, [(2, 64)], {"2x64": two})
    assert len(rows) == 1 and rows[0]["tok_s"] > 0 and rows[0]["matmul_gflops"] > 0 and rows[0]["speedup"] == 1.0
    assert f"| 2x64 | {res['labels'][0]} |" in prefill.to_markdown(rows, res["labels"][0])


def test_prefill_bench_times_each_tree_once_under_a_label_of_its_own(tmp_path):
    """``--trees`` naming this checkout adds nothing (before, its rows were timed and printed twice), and two
    checkouts of one commit get labels of their own (their timings would otherwise be pooled as one tree's)."""
    from kda_ref.bench import prefill

    assert prefill.trees_to_time([str(prefill.HERE), prefill.HERE / "."]) == [prefill.HERE]
    assert prefill.trees_to_time([tmp_path]) == [tmp_path.resolve(), prefill.HERE]
    other = tmp_path / "again"
    other.mkdir()
    assert prefill.tree_labels([tmp_path, other]) == [tmp_path.name, "again"]  # not checkouts: folder names
    twins = [tmp_path / "twin1", tmp_path / "twin2"]
    for twin in twins:  # two clean checkouts of this commit
        subprocess.run(["git", "clone", "-q", "--shared", str(prefill.HERE), str(twin)], check=True, timeout=120)
    head = prefill.tree_label(twins[0])
    assert prefill.tree_labels(twins) == [f"{head} (twin1)", f"{head} (twin2)"]


def test_prefill_bench_arguments_are_checked_before_anything_runs(tmp_path):
    from kda_ref.bench.args import parse

    for bad in (["--cases", "8by128"], ["--cases", "0x128"], ["--trees", str(tmp_path)], ["--repeats", "0"],
                ["--decode", "8"]):
        with pytest.raises(SystemExit):
            parse("prefill", bad)
    assert parse("prefill", ["--cases", "4x64"]).cases == ["4x64"]
