"""How this package calls ``torch.compile``: the options of every fixed-shape step it compiles (the engine's
static buckets, :mod:`kda_ref.engine.static_decode`, and the MTP layer's draft steps,
:mod:`kda_ref.speculative.mtp_static`) and what a failed compilation raises."""

from __future__ import annotations

import logging
import time
from typing import Callable

import torch

log = logging.getLogger("kda_ref")
ACCUMULATED_LIMIT = 1 << 16  # graphs of one code object per process (dynamo's default stops at 256)

# A fixed-shape step reads the same objects on every call -- its plan tensors, the pools, the model's
# modules -- so two per-call checks are dropped: dynamo's guards on every nn.Module attribute and inductor's
# size / stride assertion on every input (together ~0.2 ms of a ~1.4 ms batch-1 step on the 2-core CPU,
# 2026-12-01). Replacing a module or parameter after a step compiled is therefore not seen (writing
# parameters in place never was: the graph reads the fused weights built before it compiled).
COMPILE_OPTIONS = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe, "size_asserts": False}


# ``gemm=True`` (``LLM(compile_gemm=True)``): the step's matrix products become inductor's C++ GEMM template
# (``max_autotune`` with the ``CPP`` backend alone: one candidate, nothing benchmarked) over weights frozen
# into the graph and prepacked for it (``freezing``: the template takes only a constant right operand).
# On the 2-core CPU a product of 4 rows by a 128 x 578 weight read from memory took 41 us in MKL's sgemm
# (it packs the weight on every call) and 10 us in the template; one row 9 and 6 us (2026-12-06).
GEMM_OPTIONS = {"max_autotune": True, "max_autotune_gemm_backends": "CPP"}


def compile_errors() -> tuple[type[Exception], ...]:
    """What a failed compilation raises (dynamo's and inductor's errors). Imported when a step compiles,
    not with this module: ``torch._dynamo`` costs ~1.7 s to import on the 2-core CPU."""
    import torch._dynamo.exc
    import torch._inductor.exc

    return (torch._dynamo.exc.TorchDynamoException, torch._inductor.exc.InductorError,
            torch._inductor.exc.CppCompileError, torch._inductor.exc.InvalidCxxCompiler)


def compile_and_run(fn: Callable, args: tuple, what: str, guard_filter_fn=None, gemm: bool = False):
    """``torch.compile`` the fixed-shape step ``fn`` (inductor, ``fullgraph``, no dynamic shapes, its own
    recompilation cache) and run it once on ``args``, which compiles it: ``(output, the compiled step,
    seconds)``. A failed compilation (:func:`compile_errors`, raised while the compiler traces fake tensors,
    before anything ran) is logged as a warning naming ``what`` and returns ``(None, None, 0.0)``: the
    caller runs ``fn`` eagerly from then on. An error while the graph runs propagates as an eager step's.
    ``guard_filter_fn`` replaces :data:`COMPILE_OPTIONS`' (the MTP draft chains keep no guard). The
    engine's static buckets and the MTP draft chains compile through it. ``gemm``: :data:`GEMM_OPTIONS`, the
    weights frozen into the graph (a parameter written after it compiled is not seen)."""
    import torch._inductor.config

    options = dict(COMPILE_OPTIONS)  # a copy: torch.compile pops guard_filter_fn from it
    if guard_filter_fn is not None:
        options["guard_filter_fn"] = guard_filter_fn
    if gemm:
        options.update(GEMM_OPTIONS)
    step = torch.compile(fn, fullgraph=True, dynamic=False, isolate_recompiles=True, options=options)
    log.info("compiling %s (torch.compile, inductor) ...", what)
    t0 = time.perf_counter()
    try:
        # every engine compiles the same code: past 256 graphs of it in one process dynamo would stop adding them
        # freezing is read while dynamo traces (which tensors become the graph's constants), not only by inductor
        with torch._dynamo.config.patch(accumulated_recompile_limit=ACCUMULATED_LIMIT), \
                torch._inductor.config.patch(freezing=gemm):
            out = step(*args)
    except compile_errors() as e:  # raised while compiling, before the graph ran: nothing was written
        log.warning("compiling %s failed; it runs eagerly: %s: %s", what, type(e).__name__, e)
        return None, None, 0.0
    seconds = time.perf_counter() - t0
    log.info("compiled %s in %.1f s", what, seconds)
    return out, step, seconds
