"""The first GPU run, prepared: every path of the project that needs a GPU, in one bounded script.

    bash scripts/gpu_check.sh --out OUT_DIR      # on a machine with CUDA (e.g. one H200)
    bash scripts/gpu_check.sh --dry-run          # anywhere: checks imports and arguments, lists the plan

Steps, each a child process with a time limit of its own (a step that fails or runs out of time is
recorded and the next one runs; the limits add up to under 8 minutes):

1. ``install`` -- wheels carried in ``.whl/`` (fla-core for the comparison; what the machine lacks) are
   installed offline into a scratch folder; torch, triton and the GPU are reported;
2. ``triton`` -- the Triton kernel tests run natively (``KDA_TRITON_NATIVE=1``: chunk and fused-recurrent
   KDA over a state pool with ``state_indices``, paged MLA decode, the model on the triton backend),
   fp32 and bf16 tolerances, against the torch references;
3. ``graphs`` -- real CUDA graphs of the static decode and verify buckets, every ``spec_state``: replays
   give the eager engine's tokens and logits; PAD rows leave unowned pool units untouched;
4. ``nccl`` -- context-parallel prefill and a disaggregated prefill -> decode handoff over nccl, two
   processes on the one GPU, against the single-process answers;
5. ``kernels`` -- our Triton ``chunk_kda`` / ``fused_recurrent_kda`` against fla's at T = 2k / 8k / 32k / 128k:
   tokens/s, the ratio, and the fraction of the GPU's bf16 matmul peak measured in the same run; then where
   one ``chunk_kda`` call's device time goes, per kernel, ours beside fla's (torch's profiler);
6. ``engine`` -- the engine's decode tokens/s at batch 1 / 8 / 32, dynamic and with captured graphs.

One summary table is printed and written as ``summary.json`` (and each step's log) under ``--out``.
docs/benchmarks.md ("The first GPU run") says what each step proves and where its numbers go.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = Path("/tmp/kda_gpu_site")
# name -> (time limit in seconds, what it runs)
STEPS = {
    "install": (45, "offline install of .whl/*.whl; report torch, triton, fla and the GPU"),
    "triton": (120, "KDA_TRITON_NATIVE=1 pytest -m triton: the kernel tests natively, fp32 and bf16"),
    "graphs": (45, "pytest tests/test_gpu.py -k 'graphs or pad_rows': real CUDA graphs vs eager"),
    "nccl": (30, "pytest tests/test_gpu.py -k nccl: context parallelism and a handoff over nccl (two GPUs)"),
    "kernels": (165, "our chunk_kda / fused_recurrent_kda vs fla's at T = 2k .. 128k; bf16 matmul peak; profile"),
    "engine": (60, "engine decode tok/s at batch 1, 8, 32: dynamic and captured graphs"),
}
TRITON_TESTS = ["tests/test_triton_kda.py", "tests/test_mla_paged.py", "tests/test_dispatcher.py", "tests/test_engine.py"]
KERNEL_LENGTHS = (2048, 8192, 32768, 131072)
PROFILE_LENGTH = 32768  # T of the profiled chunk_kda call
KERNEL_HEADS = {"H": 32, "K": 128, "V": 128}  # Kimi-Linear-like head count and sizes
MATMUL_N = 8192
REPEATS = 5  # timed calls per measurement, after one warm-up call
DECODE_BATCHES = (1, 8, 32)



# pytest in one process, the project's addopts (two pytest-xdist workers) left out: one GPU is shared
# better by one process, and a GPU image may have pytest without pytest-xdist
ONE_PROCESS = ("-q", "-o", "addopts=", "-p", "no:cacheprovider")

def _env() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _run(cmd: list[str], limit: float, log: Path, extra_env: dict | None = None) -> tuple[bool, str]:
    """Run ``cmd`` for at most ``limit`` seconds, its output into ``log``: ``(ok, the last lines)``."""
    env = {**_env(), **(extra_env or {})}
    with open(log, "w") as f:
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=limit)
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            f.write(f"\n[gpu_check] stopped after its limit of {limit:.0f} s\n")
            ok = False
    lines = log.read_text(errors="replace").strip().splitlines()
    return ok, " | ".join(lines[-3:])[-400:]


def step_command(name: str, out: Path) -> tuple[list[str], dict]:
    """The child command of each step (``install`` runs pip, the others Python)."""
    py = sys.executable
    if name == "install":
        wheels = sorted(str(p) for p in (ROOT / ".whl").glob("*.whl"))
        pip = [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
               "--upgrade", "--target", str(SITE), *wheels] if wheels else None
        probe = ("import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, "
                 "'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '');"
                 "import importlib.util as u; print('fla', bool(u.find_spec('fla')))")
        # the probe in a process of its own: one started before the install misses the new folder
        script = (f"import subprocess, sys; {'subprocess.run(' + repr(pip) + ', check=True);' if pip else ''}"
                  f"subprocess.run([sys.executable, '-c', {probe!r}], check=True)")
        return [py, "-c", script], {}
    if name == "triton":
        cmd = [py, "-m", "pytest", *ONE_PROCESS, "-m", "triton", *TRITON_TESTS]
        return cmd, {"KDA_TRITON_NATIVE": "1"}
    if name == "graphs":
        return [py, "-m", "pytest", *ONE_PROCESS, "-m", "gpu", "tests/test_gpu.py",
                "-k", "graphs or pad_rows"], {}
    if name == "nccl":
        return [py, "-m", "pytest", *ONE_PROCESS, "-m", "gpu", "tests/test_gpu.py",
                "-k", "nccl"], {}
    return [py, str(Path(__file__)), "--measure", name, "--out", str(out)], {}


# ---- the measurements (run in a child process: python scripts/gpu_check.py --measure NAME) ----------------
# They use the GPU when there is one and the CPU otherwise, so that tests/test_gpu_check_script.py runs
# them here at toy sizes: the numbers in docs/benchmarks.md come from the GPU run only.
def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn, repeats: int | None = None) -> float:
    """The median wall time of ``repeats`` (default :data:`REPEATS`) calls of ``fn`` after one warm-up
    call, in seconds."""
    repeats = repeats or REPEATS
    fn()
    _sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def matmul_peak_tflops(n: int | None = None) -> float:
    """bf16 n^3 matrix products on this device, TFLOP/s (the median of :data:`REPEATS` after a warm-up)."""
    import torch

    n = n or MATMUL_N
    a = torch.randn(n, n, device=_device(), dtype=torch.bfloat16)
    b = torch.randn(n, n, device=_device(), dtype=torch.bfloat16)
    return 2 * n ** 3 / _timed(lambda: a @ b) / 1e12


def kda_flops(T: int, H: int, K: int, V: int, C: int = 64) -> float:
    """An estimate of the chunk form's FLOPs: per head and chunk, the intra-chunk scores and the UT
    transform (~C^2 (K + V) x 4) and the state's read, update and output (~C K V x 6)."""
    chunks = -(-T // C)
    return H * chunks * (4 * C * C * (K + V) + 6 * C * K * V)


def measure_kernels(out: Path) -> list[dict]:
    """Our two Triton KDA kernels against fla's at :data:`KERNEL_LENGTHS` (``kernels.json``, a row printed as
    each is measured), then :func:`profile_chunk`."""
    from kda_ref.ops.triton import chunk_kda, fused_recurrent_kda

    try:
        from fla.ops.kda import chunk_kda as fla_chunk, fused_recurrent_kda as fla_recurrent
    except ImportError:
        fla_chunk = fla_recurrent = None
    peak = matmul_peak_tflops()
    H, K, V, rows = KERNEL_HEADS["H"], KERNEL_HEADS["K"], KERNEL_HEADS["V"], []
    for T in KERNEL_LENGTHS:
        q, k, v, gate, beta = kernel_inputs(T)
        ours = {"chunk_kda": lambda: chunk_kda(q, k, v, gate, beta),
                "fused_recurrent_kda": lambda: fused_recurrent_kda(q, k, v, gate, beta)}
        theirs = {"chunk_kda": fla_chunk and (lambda: fla_chunk(q, k, v, gate, beta)),
                  "fused_recurrent_kda": fla_recurrent and (lambda: fla_recurrent(q, k, v, gate, beta))}
        for kernel, fn in ours.items():
            s = _timed(fn)
            row = {"kernel": kernel, "T": T, "ours_tok_s": T / s, "ours_tflops": kda_flops(T, H, K, V) / s / 1e12}
            if theirs[kernel] is not None:
                try:
                    row["fla_tok_s"] = T / _timed(theirs[kernel])
                    row["ratio_ours_over_fla"] = row["ours_tok_s"] / row["fla_tok_s"]
                except Exception as err:  # noqa: BLE001 -- fla's kernel may not take these inputs: recorded
                    row["fla_error"] = f"{type(err).__name__}: {str(err)[:200]}"
            row["fraction_of_bf16_peak"] = row["ours_tflops"] / peak
            rows.append(row)
            # each row as it is measured: a step stopped at its limit still leaves what it measured
            print(json.dumps(row), flush=True)
            (out / "kernels.json").write_text(json.dumps({"bf16_matmul_tflops": peak, "rows": rows}, indent=1))
    profile_chunk(out, {"ours": chunk_kda, "fla": fla_chunk})
    return rows


def kernel_inputs(T: int):
    """bf16 ``q, k, v, g, beta`` of one sequence of ``T`` tokens at :data:`KERNEL_HEADS`, as a model feeds them
    (q, k l2-normalised, g a softplus log decay, beta in (0, 1))."""
    import torch
    import torch.nn.functional as F

    H, K, V, dev = KERNEL_HEADS["H"], KERNEL_HEADS["K"], KERNEL_HEADS["V"], _device()
    g = torch.Generator(device=dev).manual_seed(T)
    q, k = (F.normalize(torch.randn(1, T, H, K, device=dev, generator=g), dim=-1).bfloat16() for _ in range(2))
    v = torch.randn(1, T, H, V, device=dev, generator=g).bfloat16()
    gate = (-F.softplus(torch.randn(1, T, H, K, device=dev, generator=g))).bfloat16()
    beta = torch.rand(1, T, H, device=dev, generator=g).bfloat16()
    return q, k, v, gate, beta


def profile_chunk(out: Path, kernels: dict) -> dict:
    """Where one ``chunk_kda`` call at :data:`PROFILE_LENGTH` spends its device time, kernel by kernel (torch's
    profiler; CPU time where there is no GPU), for each implementation in ``kernels`` (``None``: skipped).
    Written to ``profile.json``: name -> rows of (kernel, calls, microseconds, share of the call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    gpu = torch.cuda.is_available()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    inputs, result = kernel_inputs(PROFILE_LENGTH), {}
    for name, fn in kernels.items():
        if fn is None:
            continue
        fn(*inputs)  # compiled and warm before the profiled call
        _sync()
        with profile(activities=acts) as prof:
            fn(*inputs)
            _sync()
        events = [(e.key, e.count, e.self_device_time_total if gpu else e.self_cpu_time_total)
                  for e in prof.key_averages()]
        events = sorted((e for e in events if e[2] > 0), key=lambda e: -e[2])
        total = sum(us for _, _, us in events) or 1.0
        result[name] = [{"kernel": k, "calls": c, "us": round(us, 1), "share": round(us / total, 3)}
                        for k, c, us in events[:12]]
        print(json.dumps({"profile": name, "T": PROFILE_LENGTH, "top": result[name][:6]}), flush=True)
    (out / "profile.json").write_text(json.dumps({"T": PROFILE_LENGTH, **result}, indent=1))
    return result


def measure_engine(out: Path) -> list[dict]:
    from kda_ref import LLM, ModelConfig, SamplingParams
    from kda_ref.model import HybridModel

    model = HybridModel(ModelConfig.tiny(), seed=0).eval().to(_device())
    rows = []
    for B in DECODE_BATCHES:
        prompts = [[256, *range(1, 200 + n)] for n in range(B)]
        for graphs in (False, True):
            llm = LLM(model, static_decode=graphs, max_num_seqs=max(B, 1), memory_budget_bytes=512 << 20)
            params = SamplingParams(max_tokens=33, ignore_eos=True)
            llm.generate(prompts, params)  # warm-up: captures the buckets
            _sync()
            outs = llm.generate(prompts, params)
            dec = sum(len(o.token_ids) - 1 for o in outs)  # the tokens after each request's first
            span = max(o.metrics["latency_s"] for o in outs) - max(o.metrics["ttft_s"] for o in outs)
            rows.append({"batch": B, "graphs": graphs, "decode_tokens": dec, "decode_tok_s": dec / span})
    (out / "engine.json").write_text(json.dumps(rows, indent=1, default=str))
    return rows


# ---- the driver --------------------------------------------------------------------------------------------
def dry_run() -> int:
    """Imports, files and the plan; exit code 0 when the script would run as it is."""
    import kda_ref  # noqa: F401 -- the project imports
    from kda_ref.ops.triton import chunk_kda, fused_recurrent_kda  # noqa: F401
    import torch

    missing = [t for t in [*TRITON_TESTS, "tests/test_gpu.py"] if not (ROOT / t).is_file()]
    if missing:
        print(f"gpu_check: missing test files {missing}", file=sys.stderr)
        return 1
    print(f"gpu_check --dry-run: torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}; "
          f"wheels in .whl/: {len(list((ROOT / '.whl').glob('*.whl')))}")
    total = 0
    for name, (limit, what) in STEPS.items():
        total += limit
        cmd, env = step_command(name, Path("OUT"))
        print(f"  {name:8s} <= {limit:3d} s  {what}\n           {' '.join(f'{k}={v}' for k, v in env.items())} "
              f"{' '.join(cmd)[:160]}")
    print(f"  at most {total} s in all ({total / 60:.1f} min)")
    return 0


def run_all(out: Path, only: list[str]) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    summary, t_all = {}, time.perf_counter()
    for name in only:
        limit = STEPS[name][0]
        cmd, env = step_command(name, out)
        t0 = time.perf_counter()
        ok, tail = _run(cmd, limit, out / f"{name}.log", env)
        summary[name] = {"ok": ok, "seconds": round(time.perf_counter() - t0, 1), "limit_s": limit, "tail": tail}
        print(f"[gpu_check] {name:8s} {'ok  ' if ok else 'FAIL'} {summary[name]['seconds']:6.1f} s  {tail[-160:]}",
              flush=True)
    summary["total_s"] = round(time.perf_counter() - t_all, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print("\n| step | result | seconds (limit) |\n|---|---|---|")
    for name in only:
        r = summary[name]
        print(f"| {name} | {'ok' if r['ok'] else 'FAILED'} | {r['seconds']} ({r['limit_s']}) |")
    print(f"total {summary['total_s']} s; logs and JSON in {out}")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Every GPU path of kda-viz in one bounded run (see the module docstring).")
    p.add_argument("--dry-run", action="store_true", help="check imports and arguments, list the plan, exit")
    p.add_argument("--out", default="gpu_check_out", help="folder for summary.json and each step's log")
    p.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS), help="run only these steps")
    p.add_argument("--measure", choices=["kernels", "engine"], help=argparse.SUPPRESS)  # a step's child process
    a = p.parse_args(argv)
    if a.dry_run:
        return dry_run()
    out = Path(a.out)
    if a.measure:
        out.mkdir(parents=True, exist_ok=True)
        if a.measure == "kernels":
            measure_kernels(out)  # prints its rows as it goes
        else:
            for r in measure_engine(out):
                print(json.dumps(r, default=str))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; --dry-run checks the script without one", file=sys.stderr)
        return 2
    summary = run_all(out, a.steps)
    return 0 if all(summary[n]["ok"] for n in a.steps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
