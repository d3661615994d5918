"""Bad input is refused before any work, with one typed error naming what is wrong.

* model sizes: the parameter arithmetic equals the built models', and an absurd config (a million
  experts, 200,000 layers, a 200,000-wide hidden state) is refused from its numbers alone, in a
  fraction of a second -- for ``ModelConfig`` objects, ``config.json`` folders and ``LLM`` alike;
* output paths: every output flag of every command is opened before the work, and an OS error is one
  ``error: --flag: ...`` line (exit code 2);
* the command line answers ``--help`` and argument errors before torch is imported;
* readers (workloads, traces, training checkpoints, recipes), cache options, unknown keywords and the
  n-gram drafter's bounds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref import LLM, ModelConfig
from kda_ref.model import CheckpointError, ConfigError, HybridModel, ModelSizeError, parameter_count, save_pretrained
from kda_ref.model.size import MAX_TENSORS, check_fits, model_bytes

GiB = 1 << 30


# ---- model sizes --------------------------------------------------------------------------------------
def _meta_counts(cfg: ModelConfig) -> tuple[int, int]:
    with torch.device("meta"):
        sd = HybridModel(cfg, seed=None).state_dict()
    return sum(v.numel() for v in sd.values()), len(sd)


@pytest.mark.parametrize("cfg", [ModelConfig.tiny(), pytest.param(ModelConfig.kimi_linear_48b(), marks=pytest.mark.slow),
                                 ModelConfig(num_experts=0, num_shared_experts=0, tie_word_embeddings=True)],
                         ids=["tiny", "48b", "dense"])  # 48B: 20k modules on the meta device, ~4 s
def test_the_arithmetic_counts_what_the_model_builds(cfg):
    assert parameter_count(cfg) == _meta_counts(cfg)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(layers=st.integers(1, 6), hidden=st.sampled_from([32, 48, 64]), heads=st.integers(1, 3),
       head_dim=st.sampled_from([8, 16]), experts=st.integers(0, 5), shared=st.integers(0, 2),
       dense=st.integers(0, 6), rope=st.sampled_from([0, 8]), width=st.integers(2, 5))
def test_the_arithmetic_counts_random_configs(layers, hidden, heads, head_dim, experts, shared, dense, rope, width):
    kda = list(range(1, layers)) or [1]
    cfg = ModelConfig(vocab_size=300, hidden_size=hidden, num_hidden_layers=max(layers, 1) + (layers == 1),
                      kda_layers=kda, full_attn_layers=list(range(len(kda) + 1, max(layers, 1) + (layers == 1) + 1)),
                      linear_num_heads=heads, linear_head_dim=head_dim, short_conv_kernel_size=width,
                      num_attention_heads=heads, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=rope,
                      v_head_dim=8, intermediate_size=40, moe_intermediate_size=12, num_experts=experts,
                      num_experts_per_token=min(2, experts) or 1, num_shared_experts=shared,
                      first_k_dense_replace=min(dense, max(layers, 1) + (layers == 1)))
    assert parameter_count(cfg) == _meta_counts(cfg)


def _layers(n: int) -> dict:
    return dict(num_hidden_layers=n, kda_layers=list(range(1, n)), full_attn_layers=[n])


@pytest.mark.parametrize("kw,field", [
    (dict(num_experts=1_000_000), "num_experts"),  # 9 million modules: refused by count
    (_layers(200_000), "num_hidden_layers"),  # refused by count
    (dict(hidden_size=200_000), "hidden_size"),  # 9 GiB of weights over a 1 GiB limit
    (dict(linear_head_dim=100_000), "linear_head_dim"),  # the state slot alone is hundreds of GiB
    (dict(vocab_size=10**9), "vocab_size"),
])
def test_an_absurd_config_object_is_refused_from_its_numbers(monkeypatch, kw, field):
    monkeypatch.setenv("KDA_REF_MEMORY_LIMIT_BYTES", str(GiB))
    cfg = ModelConfig(**kw)
    t0 = time.perf_counter()
    with pytest.raises(ModelSizeError, match=rf"^{field}: "):
        HybridModel(cfg)
    with pytest.raises(ModelSizeError, match=rf"^{field}: "):
        LLM(cfg)
    assert time.perf_counter() - t0 < 1.0  # nothing was built


def test_the_limit_counts_the_smallest_pool_and_can_be_given():
    sizes = model_bytes(ModelConfig.tiny())
    need = sizes["weights"] + sizes["pool_min"]
    assert check_fits(ModelConfig.tiny(), limit_bytes=need)["weights"] == sizes["weights"]
    with pytest.raises(ModelSizeError, match="smallest cache pool"):
        check_fits(ModelConfig.tiny(), limit_bytes=need - 1)  # one byte short of one state slot + one page
    assert check_fits(ModelConfig.tiny(), page_size=None, limit_bytes=sizes["weights"])["pool_min"] == 0
    assert model_bytes(ModelConfig.kimi_linear_48b())["tensors"] < MAX_TENSORS


def test_a_bad_limit_in_the_environment_is_named(monkeypatch):
    monkeypatch.setenv("KDA_REF_MEMORY_LIMIT_BYTES", "lots")
    with pytest.raises(ConfigError, match="^KDA_REF_MEMORY_LIMIT_BYTES: "):
        HybridModel(ModelConfig.tiny())


def test_llm_refuses_an_absurd_config_before_any_pool_or_weights(monkeypatch):
    from kda_ref.engine import llm as llm_mod

    monkeypatch.setenv("KDA_REF_MEMORY_LIMIT_BYTES", str(GiB))
    built = []
    monkeypatch.setattr(llm_mod, "UnifiedMemoryPool", lambda *a, **k: built.append("pool"))
    monkeypatch.setattr(HybridModel, "__init__", lambda *a, **k: built.append("model"))
    with pytest.raises(ModelSizeError, match="^hidden_size: 200000 makes the model need"):
        LLM(ModelConfig(hidden_size=200_000))
    assert not built


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    save_pretrained(HybridModel(ModelConfig.tiny(), seed=0), folder)
    return folder


def _with_config(src, dst, **changes):
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("changes,error,match", [
    (dict(num_experts=1_000_000), ModelSizeError, "^num_experts: 1000000 makes a model of"),
    (dict(num_hidden_layers=200_000, linear_attn_config=dict(kda_layers=list(range(1, 200_000)),
                                                              full_attn_layers=[200_000], num_heads=4, head_dim=64,
                                                              short_conv_kernel_size=4)),
     ModelSizeError, "^num_hidden_layers: 200000 makes a model of"),
    (dict(num_hidden_layers=5_000, linear_attn_config=dict(kda_layers=list(range(1, 5_000)), full_attn_layers=[5_000],
                                                            num_heads=4, head_dim=64, short_conv_kernel_size=4)),
     CheckpointError, "^config: describes a model of .* tensors; the checkpoint holds 115"),
])
def test_an_absurd_config_json_is_refused_before_building(tiny_folder, tmp_path, changes, error, match):
    from kda_ref.model import load_pretrained

    folder = _with_config(tiny_folder, tmp_path / "m", **changes)
    t0 = time.perf_counter()
    with pytest.raises(error, match=match):
        load_pretrained(folder)
    with pytest.raises(error, match=match):
        LLM(str(folder))
    assert time.perf_counter() - t0 < 2.0  # the 5,000-layer case built 5,000 layers (24 s) before this check


def test_a_layer_count_that_the_lists_do_not_cover_is_named():
    with pytest.raises(ConfigError, match="^full_attn_layers: .* partition 1..1000000000000"):
        ModelConfig(num_hidden_layers=10**12)  # not a 10**12-element list first


# ---- cache options and keywords, before the pool -----------------------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(prefix_cache="radix", track_interval=100), "^track_interval: must be a positive multiple"),
    (dict(prefix_cache="radix", checkpoint_policy="every_n", checkpoint_interval=70), "^checkpoint_interval: "),
    (dict(prefix_cache="block", block_size=48, mamba_cache_mode="all"), "^block_size: mamba_cache_mode='all'"),
    (dict(prefix_cache="block", block_size=64, retention_interval=96), "^retention_interval: 96 is not a multiple"),
    (dict(prefix_cache="block", marconi_alpha=float("nan")), "^marconi_alpha: must be a finite number"),
    (dict(max_batch=4), "^max_batch: not an argument of LLM .*; did you mean"),
    (dict(memory_budget=1 << 20), "^memory_budget: not an argument of LLM .*; did you mean 'memory_budget_bytes'"),
])
def test_options_and_keywords_are_refused_before_the_pool(monkeypatch, kw, match):
    from kda_ref.engine import llm as llm_mod

    built = []
    monkeypatch.setattr(llm_mod, "UnifiedMemoryPool", lambda *a, **k: built.append("pool"))
    with pytest.raises(ValueError, match=match):
        LLM(ModelConfig.tiny(), **kw)
    assert not built


# ---- the n-gram drafter -------------------------------------------------------------------------------
def test_prompt_lookup_is_bounded_and_proposals_stay_cheap():
    from kda_ref.speculative.ngram_drafter import MAX_PROMPT_LOOKUP
    from kda_ref.speculative.ngram_drafter import NgramDrafter

    with pytest.raises(ValueError, match="prompt_lookup_max: must be an int in"):
        LLM(ModelConfig.tiny(), speculative="ngram", prompt_lookup_max=10**9)
    with pytest.raises(ValueError, match="prompt_lookup_min / prompt_lookup_max"):
        NgramDrafter(1, MAX_PROMPT_LOOKUP + 1)
    d = NgramDrafter(1, MAX_PROMPT_LOOKUP)
    tokens = [7] * 3000  # every position is an occurrence: the case that was quadratic
    d.propose(0, tokens[:-1], 3)
    t0 = time.perf_counter()
    assert d.propose(0, tokens, 3) == [7]  # the latest occurrence ends one token before the end
    assert time.perf_counter() - t0 < 0.05  # ~0.1 ms here; unbounded it took 0.7 s


# ---- readers: one typed error each --------------------------------------------------------------------
def test_a_workload_with_a_400_digit_number_is_a_workload_error(tmp_path):
    from kda_ref.workloads import WorkloadError, load, make, save

    path = tmp_path / "w.jsonl"
    save(make("multi_turn", seed=0), path)
    head, first, *rest = path.read_text().splitlines()
    req = json.loads(first)
    req["arrival_s"] = int("9" * 400)
    path.write_text("\n".join([head, json.dumps(req), *rest]) + "\n")
    with pytest.raises(WorkloadError, match="line 2: field 'arrival_s' must be a finite number"):
        load(path)
    for bad in (tmp_path / "missing.jsonl", tmp_path):
        with pytest.raises(WorkloadError, match="^path: "):
            load(bad)


def test_a_trace_path_that_cannot_be_read_is_a_trace_error(tmp_path):
    from kda_ref.trace import TraceFormatError, read_jsonl

    for bad, why in ((tmp_path / "missing.jsonl", "No such file"), (tmp_path, "Is a directory")):
        with pytest.raises(TraceFormatError, match=f"^path: cannot read .*{why}"):
            read_jsonl(bad)


def test_a_training_checkpoint_with_an_empty_model_is_named(tmp_path):
    from kda_ref.train import Recipe
    from kda_ref.train.loop import CheckpointFileError, load_checkpoint, train

    recipe = Recipe().replace(steps=2)
    ckpt = tmp_path / "c.pt"
    train(recipe, checkpoint=ckpt, stop_after=1, progress=False)
    st_ = load_checkpoint(ckpt)
    st_["model"] = {}
    torch.save(st_, ckpt)
    with pytest.raises(CheckpointFileError, match="has model state that does not fit the recipe's model"):
        train(recipe, checkpoint=ckpt, progress=False)
    st_ = load_checkpoint(ckpt)
    st_["step"] = -3
    torch.save(st_, ckpt)
    with pytest.raises(CheckpointFileError, match="has step -3"):
        train(recipe, checkpoint=ckpt, progress=False)


# ---- output paths: claimed before the work ---------------------------------------------------------------
def _bad_paths(tmp_path) -> dict[str, str]:
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "no" / "such" / "target")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    return {"device": "/dev/full", "proc": "/proc/kda-x", "sys": "/sys/kda-x", "dangling": str(dangling),
            "long": str(tmp_path / ("n" * 300)), "missing-folder": str(tmp_path / "missing" / "x"),
            "folder": str(tmp_path), "under-a-file": str(a_file / "x")}


@pytest.mark.parametrize("kind", ["device", "proc", "sys", "dangling", "long", "missing-folder", "folder",
                                  "under-a-file"])
def test_generate_trace_is_checked_before_the_model_loads(tmp_path, monkeypatch, capsys, kind):
    from kda_ref import cli
    from kda_ref.engine import llm as llm_mod

    monkeypatch.setattr(llm_mod.LLM, "__init__", lambda *a, **k: pytest.fail("the engine was built"))
    path = _bad_paths(tmp_path)[kind]
    assert cli.main(["generate", "hi", "--model", "random-tiny", "--trace", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --trace: ") and err.count("\n") == 1 and "Traceback" not in err


BENCH_OUTPUTS = [("kernels", "--out"), ("engine", "--out"), ("prefix-cache", "--out-csv"),
                 ("prefix-cache", "--out-json"), ("checkpoints", "--out"), ("workloads", "--out-csv"),
                 ("workloads", "--out-json"), ("spec", "--out"), ("spec-mtp", "--out"), ("cp", "--out"), ("disagg", "--out")]


@pytest.mark.parametrize("bench,flag", BENCH_OUTPUTS)
def test_every_bench_output_is_checked_before_the_benchmark(tmp_path, monkeypatch, capsys, bench, flag):
    import importlib

    from kda_ref import cli
    from kda_ref.bench.args import BENCHES

    module = importlib.import_module(f"kda_ref.bench.{BENCHES[bench][0]}")
    monkeypatch.setattr(module, "cli", lambda a: pytest.fail("the benchmark ran"))
    bad = _bad_paths(tmp_path)
    for path in (bad[k] for k in ("device", "missing-folder", "proc", "dangling")):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["bench", bench, flag, path])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"error: {flag}: " in err and "Traceback" not in err


def test_a_claimed_output_that_is_never_written_is_removed(tmp_path, monkeypatch, capsys):
    from kda_ref import cli

    out = tmp_path / "run.jsonl"
    assert cli.main(["generate", "hi", "--model", "random-tiny", "--max-tokens", "0", "--trace", str(out)]) == 2
    assert "--max-tokens" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("kind,match", [("proc", "--out: cannot write in"), ("under-a-file", "--out: cannot write in"),
                                        ("file", "--out: .* exists and is not a folder")])
def test_train_out_is_checked_before_training(tmp_path, capsys, kind, match):
    from kda_ref.train.__main__ import main as train_main

    bad = _bad_paths(tmp_path)
    path = bad["under-a-file"].removesuffix("/x") if kind == "file" else bad[kind]
    t0 = time.perf_counter()
    assert train_main(["--out", str(path), "--steps", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and __import__("re").search(match, err)
    assert time.perf_counter() - t0 < 5.0  # no corpus built, no training


def test_train_refuses_an_unusable_checkpoint_with_one_line(tmp_path, capsys):
    from kda_ref.train import Recipe
    from kda_ref.train.__main__ import main as train_main
    from kda_ref.train.loop import load_checkpoint, train

    out = tmp_path / "out"
    out.mkdir()
    recipe = Recipe().replace(steps=2)
    train(recipe, checkpoint=out / "checkpoint.pt", stop_after=1, progress=False)
    st_ = load_checkpoint(out / "checkpoint.pt")
    st_["model"] = {}
    torch.save(st_, out / "checkpoint.pt")
    assert train_main(["--out", str(out), "--steps", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "error: checkpoint: " in err and "does not fit" in err


# ---- the command line: flags named, answers before torch ---------------------------------------------
@pytest.mark.parametrize("args,match", [
    (["--max-tokens", "-1"], "error: --max-tokens: must be >= 1, got -1"),
    (["--top-k", "-2"], "error: --top-k: "),
    (["--model", "/nonexistent"], "error: --model: /nonexistent is not a folder"),
])
def test_cli_errors_name_the_flag(capsys, args, match):
    from kda_ref import cli

    base = ["generate", "hi", "--model", "random-tiny", "--max-tokens", "2"]
    assert cli.main(base + args) == 2
    assert capsys.readouterr().err.startswith(match)


@pytest.mark.parametrize("argv", [["--help"], ["generate", "--max-tokens", "x", "hi"], ["bench", "kernels", "--bad"],
                                  ["bench", "workloads", "--out-csv", "/missing/x.csv"], ["train", "--bad"],
                                  ["train", "--help"], ["bench", "spec", "--help"], ["cp", "--help"]])
def test_the_command_line_answers_before_importing_torch(argv):
    code = ("import sys\nfrom kda_ref.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, env=env)
    assert res.stdout.strip().endswith("NO-TORCH"), (res.stdout[-300:], res.stderr[-300:])
