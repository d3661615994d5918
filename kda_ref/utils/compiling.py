"""How this package calls ``torch.compile``: the options of every fixed-shape step it compiles (the engine's
static buckets, :mod:`kda_ref.engine.static_decode`, and the MTP layer's draft steps,
:mod:`kda_ref.speculative.mtp_static`) and what a failed compilation raises."""

from __future__ import annotations

import torch

# A fixed-shape step reads the same objects on every call -- its plan tensors, the pools, the model's
# modules -- so two per-call checks are dropped: dynamo's guards on every nn.Module attribute and inductor's
# size / stride assertion on every input (together ~0.2 ms of a ~1.4 ms batch-1 step on the 2-core CPU,
# 2026-12-01). Replacing a module or parameter after a step compiled is therefore not seen (writing
# parameters in place never was: the graph reads the fused weights built before it compiled).
COMPILE_OPTIONS = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe, "size_asserts": False}


def compile_errors() -> tuple[type[Exception], ...]:
    """What a failed compilation raises (dynamo's and inductor's errors). Imported when a step compiles,
    not with this module: ``torch._dynamo`` costs ~1.7 s to import on the 2-core CPU."""
    import torch._dynamo.exc
    import torch._inductor.exc

    return (torch._dynamo.exc.TorchDynamoException, torch._inductor.exc.InductorError,
            torch._inductor.exc.CppCompileError, torch._inductor.exc.InvalidCxxCompiler)
