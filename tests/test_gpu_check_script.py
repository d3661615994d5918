"""scripts/gpu_check.py, the prepared GPU run, checked where there is no GPU.

The script runs once on a lent GPU with a fixed time budget, so a typo found there costs the whole run.
These tests run its dry run (imports, files, plan and limits) and its two measurement functions at toy
sizes on the CPU, so the keyword arguments, JSON files and arithmetic they use are known to work.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_lists_every_step_within_the_budget(gpu_check, capsys):
    assert gpu_check.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for step in ("install", "triton", "graphs", "nccl", "kernels", "engine"):
        assert f"  {step} " in out
    total = int(out.split("at most ")[1].split(" s")[0])
    assert total == sum(limit for limit, _ in gpu_check.STEPS.values())
    assert total <= 8 * 60, "the steps' limits must leave room in a 15-minute device budget for a rerun"
    wrapper = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True)
    assert wrapper.returncode == 0, wrapper.stderr


def test_step_commands_point_at_real_tests(gpu_check, tmp_path):
    cmd, env = gpu_check.step_command("triton", tmp_path)
    assert env == {"KDA_TRITON_NATIVE": "1"} and "-m" in cmd and "triton" in cmd
    for test in gpu_check.TRITON_TESTS:
        assert (ROOT / test).is_file() and test in cmd
    gpu_tests = re.findall(r"^def (test_\w+)", (ROOT / "tests" / "test_gpu.py").read_text(), re.M)
    for step in ("graphs", "nccl"):
        cmd, _ = gpu_check.step_command(step, tmp_path)
        words = cmd[cmd.index("-k") + 1].replace(" or ", " ").split()
        assert any(w in name for w in words for name in gpu_tests), f"the {step} step selects no test"


def test_without_cuda_a_real_run_refuses_with_a_hint(gpu_check, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 2
    assert "--dry-run" in capsys.readouterr().err


def test_kernel_measurement_at_toy_size(gpu_check, tmp_path, monkeypatch):
    """Both kernels, and the comparison rows against a stand-in for fla's module (importing the real fla
    takes seconds here; its kernels are compared on the GPU run)."""
    import types

    from kda_ref.ops import triton as ours

    fake = types.ModuleType("fla.ops.kda")
    fake.chunk_kda, fake.fused_recurrent_kda = ours.chunk_kda, ours.fused_recurrent_kda
    for name, module in (("fla", types.ModuleType("fla")), ("fla.ops", types.ModuleType("fla.ops")),
                         ("fla.ops.kda", fake)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(gpu_check, "KERNEL_LENGTHS", (32,))
    monkeypatch.setattr(gpu_check, "KERNEL_HEADS", {"H": 1, "K": 16, "V": 16})
    monkeypatch.setattr(gpu_check, "MATMUL_N", 64)
    monkeypatch.setattr(gpu_check, "REPEATS", 1)
    monkeypatch.setattr(gpu_check, "PROFILE_LENGTH", 48)
    rows = gpu_check.measure_kernels(tmp_path)
    prof = json.loads((tmp_path / "profile.json").read_text())
    assert prof["T"] == 48 and set(prof) == {"T", "ours", "fla"}
    for name in ("ours", "fla"):  # on the CPU the interpreter's own time: rows sorted, shares of one call
        us = [r["us"] for r in prof[name]]
        assert us and us == sorted(us, reverse=True)
        assert sum(r["share"] for r in prof[name]) <= 1.0 + len(us) * 5e-4  # each share rounded to 3 places
    saved = json.loads((tmp_path / "kernels.json").read_text())
    assert [r["kernel"] for r in saved["rows"]] == ["chunk_kda", "fused_recurrent_kda"] == [r["kernel"] for r in rows]
    for r in rows:
        assert r["T"] == 32 and r["ours_tok_s"] > 0 and "fla_error" not in r
        assert r["ratio_ours_over_fla"] == pytest.approx(r["ours_tok_s"] / r["fla_tok_s"])
        assert r["fraction_of_bf16_peak"] == pytest.approx(r["ours_tflops"] / saved["bf16_matmul_tflops"])


def test_kda_flop_estimate_scales_with_chunks(gpu_check):
    one = gpu_check.kda_flops(64, 1, 128, 128)
    assert one == 4 * 64 * 64 * 256 + 6 * 64 * 128 * 128
    assert gpu_check.kda_flops(65, 1, 128, 128) == 2 * one  # a partial chunk costs a whole one
    assert gpu_check.kda_flops(64, 32, 128, 128) == 32 * one


def test_engine_measurement_at_toy_size(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "DECODE_BATCHES", (2,))
    rows = gpu_check.measure_engine(tmp_path)
    assert [(r["batch"], r["graphs"]) for r in rows] == [(2, False), (2, True)]
    assert all(r["decode_tokens"] == 2 * 32 and r["decode_tok_s"] > 0 for r in rows)
    assert json.loads((tmp_path / "engine.json").read_text())[0]["batch"] == 2


KDA_KERNELS = {"_chunk_gate_cumsum_kernel", "_chunk_kda_intra_kernel", "_chunk_kda_wy_kernel", "_chunk_kda_walk_kernel",
               "_chunk_kda_output_kernel", "_fused_recurrent_kda_kernel"}


@pytest.mark.slow
def test_kda_kernels_compile_for_an_h200_offline(tmp_path):
    """``scripts/compile_kernels.py`` builds every Triton KDA kernel for sm_90 (H100 / H200) with the ptxas Triton
    ships, from the launches the host code makes for bfloat16 and float32 inputs: a kernel that would not
    compile on the GPU (a ``tl.dot`` of two dtypes, a bad store) fails here, not in a lent GPU's minutes.
    Its own process, without ``TRITON_INTERPRET`` (real JIT functions), and a fresh Triton cache."""
    import os

    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").is_file():
        pytest.skip("this Triton wheel ships no ptxas")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "scripts/compile_kernels.py", "--arch", "90"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    built = [line.split() for line in r.stdout.splitlines() if line.startswith("ok ")]
    assert {(dtype, name) for _, dtype, name, *_ in built} == {(d, k) for d in ("bfloat16", "float32") for k in KDA_KERNELS}
    assert "every kernel compiled for sm_90" in r.stdout
