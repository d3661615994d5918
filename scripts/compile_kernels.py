"""Compile the Triton KDA kernels for an NVIDIA GPU on a machine without one.

    python scripts/compile_kernels.py [--arch 90] [--dtypes bfloat16 float32]

Triton ships NVIDIA's ``ptxas``, so the real GPU binaries build offline: a kernel that would not compile on
the GPU (``tl.dot`` operands of two dtypes, a tile a tensor core refuses, a wrong store type) fails here
first, before a lent GPU's minutes are spent on it. The host code of ``chunk_kda`` and ``fused_recurrent_kda``
runs on small CPU tensors for each input dtype (bfloat16 with the GPU's plan of bf16 operands,
``kda_ref.ops.triton._common.dot_plan``), every launch it makes is recorded instead of run, and each recorded
kernel is compiled for ``sm_<arch>`` with the argument types and constants of that launch. Prints one line a
kernel (shared memory, registers, spilled bytes where Triton reports them); exit code 1 if any failed.
Compiling only: the numbers a kernel computes are checked by the tests (interpreter) and on a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # real JIT functions: read when kda_ref's kernels are defined
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int64: "i64",
         torch.int32: "i32"}
OPTIONS = ("num_warps", "num_stages")  # launch keywords that are compile options, not kernel arguments


def record_launches(dtype: torch.dtype) -> list[tuple[JITFunction, tuple, dict]]:
    """Every ``kernel[grid](*args, **kwargs)`` the two KDA entry points make for ``dtype`` inputs, recorded
    (the kernel, its arguments, its keywords) and not launched: a varlen prefill over a state pool with
    ``has_initial_state`` and the chunk states asked for (every optional path of the chunk kernels on), then a
    decode step from the same pool."""
    from kda_ref.ops.triton import _common, chunk_kda, fused_recurrent_kda, kda_chunk

    calls: list = []
    plan = _common.DotPlan(torch.bfloat16 if dtype == torch.bfloat16 else torch.float32, "tf32x3")
    launch, dot_plan = JITFunction.__getitem__, kda_chunk.dot_plan
    JITFunction.__getitem__ = lambda self, grid: lambda *a, **kw: calls.append((self, a, kw))
    kda_chunk.dot_plan = lambda device, *dtypes: plan  # the plan a GPU picks for these inputs
    try:
        g = torch.Generator().manual_seed(0)
        T, HV, K = 80, 2, 128
        q, k = (torch.nn.functional.normalize(torch.randn(1, T, 1, K, generator=g), dim=-1).to(dtype)
                for _ in range(2))
        v = torch.randn(1, T, HV, K, generator=g).to(dtype)
        gate = -torch.rand(1, T, HV, K, generator=g).to(dtype)
        beta = torch.rand(1, T, HV, generator=g).to(dtype)
        pool, idx = torch.zeros(3, HV, K, K), torch.tensor([2, 0])
        chunk_kda(q, k, v, gate, beta, initial_state=pool, output_final_state=True,
                  cu_seqlens=torch.tensor([0, 30, T]), return_intermediate_states=True,
                  state_indices=idx, has_initial_state=torch.tensor([True, False]))
        fused_recurrent_kda(q[:, :2].reshape(2, 1, 1, K), k[:, :2].reshape(2, 1, 1, K),
                            v[:, :2].reshape(2, 1, HV, K), gate[:, :2].reshape(2, 1, HV, K),
                            beta[:, :2].reshape(2, 1, HV), initial_state=pool, state_indices=idx)
    finally:
        JITFunction.__getitem__, kda_chunk.dot_plan = launch, dot_plan
    return calls


def signature(fn: JITFunction, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    """``(signature, constants, options)`` of one recorded launch, in ``triton.compile``'s terms: tensors as
    pointers to their dtype, Python ints as ``i64`` or ``i32`` by size, floats as ``fp32``; the keywords that
    are kernel parameters are its ``constexpr`` constants, the others compile options."""
    sig, consts = {}, {}
    for name, a in zip(fn.arg_names, args):
        if isinstance(a, torch.Tensor):
            sig[name] = "*" + TYPES[a.dtype]
        elif isinstance(a, bool) or not isinstance(a, (int, float)):
            raise TypeError(f"{fn.__name__}: argument {name} of type {type(a).__name__} has no signature type")
        else:
            sig[name] = "fp32" if isinstance(a, float) else ("i64" if abs(a) >= 2**31 else "i32")
    for name, value in kwargs.items():
        if name not in OPTIONS:
            sig[name], consts[name] = "constexpr", value
    return sig, consts, {o: kwargs[o] for o in OPTIONS if o in kwargs}


def compile_launch(fn: JITFunction, args: tuple, kwargs: dict, arch: int) -> str:
    """Compile one recorded launch for ``sm_<arch>``; a line on what it needs (raises what Triton raises)."""
    sig, consts, opts = signature(fn, args, kwargs)
    src = triton.compiler.ASTSource(fn, sig, constexprs=consts)
    kernel = triton.compile(src, target=triton.backends.compiler.GPUTarget("cuda", arch, 32), options=opts)
    md = kernel.metadata
    return f"shared={md.shared} B, num_warps={md.num_warps}, {resources(kernel.asm.get('cubin'))}"


def resources(cubin: bytes | None) -> str:
    """Registers a thread and stack bytes (spills) of a compiled kernel, read from its cubin with the
    ``cuobjdump`` Triton ships beside ``ptxas``; "" where there is none."""
    import re
    import subprocess
    import tempfile

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if cubin is None or not tool.is_file():
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", usage)
    return f"registers={m.group(1)}, stack={m.group(2)} B" if m else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Compile the Triton KDA kernels for an NVIDIA GPU without one.")
    p.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100 / H200)")
    p.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"], choices=["bfloat16", "float32", "float16"])
    a = p.parse_args(argv)
    failed = 0
    for name in a.dtypes:
        seen = set()
        for fn, args, kwargs in record_launches(getattr(torch, name)):
            if fn.__name__ in seen:
                continue
            seen.add(fn.__name__)
            try:
                print(f"ok    {name:8s} {fn.__name__:30s} {compile_launch(fn, args, kwargs, a.arch)}", flush=True)
            except Exception as err:  # noqa: BLE001 -- every kernel is tried; the failure is the report
                failed += 1
                print(f"FAIL  {name:8s} {fn.__name__:30s} {type(err).__name__}: {str(err)[:600]}", flush=True)
    print(f"{failed} of the compiles failed for sm_{a.arch}" if failed else f"every kernel compiled for sm_{a.arch}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
