"""Host-side helpers shared by the Triton KDA kernels (validation, state-pool plumbing, launch sizes).

Nothing here launches a kernel. Every check runs before a kernel is launched, so a bad argument
raises ``ValueError`` (naming the argument) before anything is written to a state pool. The state-pool
arguments mirror SGLang's ``KDAKernelDispatcher`` and vLLM 0.32.0's recurrent KDA kernels: sequence ``n``
reads ``pool[state_indices[n]]`` and its final state is written back in place.

Design notes: ``docs/kda.md#the-triton-kda-kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import KDAShapes, _need, check_initial_flags, check_kda_inputs, check_state_indices

#: Largest key / value head size the kernels accept (fla asserts the same bound, ``K <= 256``).
MAX_HEAD_DIM = 256


def next_pow2(x: int) -> int:
    """Smallest power of two >= x (block sizes of ``tl.arange`` must be powers of two)."""
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


@dataclass(frozen=True)
class DotPlan:
    """How the walk and the output kernels of the chunk form multiply: the dtype of the operands they store and
    feed to ``tl.dot`` (the accumulators are always float32), and the ``input_precision`` of float32 dots."""

    operand: torch.dtype
    precision: str


def dot_plan(device: torch.device, *dtypes: torch.dtype) -> DotPlan:
    """The one place that picks the chunk kernels' arithmetic (:func:`~kda_ref.ops.triton.kda_chunk.chunk_kda`
    passes q's, k's and v's dtypes).

    All bfloat16 on a GPU: bfloat16 operands for the walk and the output (``w``, ``u``, ``qg``, ``kg``, ``v'``,
    the chunk states, and ``A_qk`` as it enters the output's dot), float32 accumulation, as fla stores them
    in the inputs' dtype; ``G``, the intra-chunk scores and the UT inverse are computed and stored in float32.
    Anything else, the CPU interpreter included (its bfloat16 ``tl.dot`` is not faithful): float32 operands.
    Float32 dots use "tf32x3" on NVIDIA GPUs from Ampere on (three TF32 tensor-core products, about fp32
    accuracy), "ieee" elsewhere; bfloat16 dots ignore it (Triton's three-product pass takes float32 only).
    """
    gpu = device.type == "cuda"
    tf32x3 = gpu and torch.version.hip is None and torch.cuda.get_device_capability(device)[0] >= 8
    bf16 = gpu and bool(dtypes) and all(dt == torch.bfloat16 for dt in dtypes)
    return DotPlan(torch.bfloat16 if bf16 else torch.float32, "tf32x3" if tf32x3 else "ieee")


@dataclass
class PreparedInputs:
    """Validated, kernel-ready inputs of one KDA call."""

    shapes: KDAShapes
    offs: list[int] | None  # cu_seqlens as a Python list (varlen) or None
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    scale: float
    state: torch.Tensor | None  # [N, HV, K, V] read-only copy, or the [P, HV, K, V] pool itself
    cu_seqlens: torch.Tensor | None  # int64 device tensor [N + 1]
    state_indices: torch.Tensor | None  # int64 device tensor [N]
    has_initial_state: torch.Tensor | None  # int32 device tensor [N] (1 = read the state)


def prepare_kda_call(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    state_indices: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
) -> PreparedInputs:
    """Validate every argument shared by both kernels and make the tensors contiguous.

    Reuses :func:`kda_ref.ops._checks.check_kda_inputs` (``state_from_pool=True`` when
    ``state_indices`` is given) and adds the Triton-specific limits (``K, V <= 256``) and the
    state-pool checks (indices in range, no duplicates, pool is float32 and contiguous because the
    kernel writes into it in place).
    """
    pool_mode = state_indices is not None
    if pool_mode:
        _need(initial_state is not None, "state_indices", "needs initial_state (the state pool [P, HV, K, V])")
    shapes, offs = check_kda_inputs(
        q, k, v, g, beta, initial_state, cu_seqlens, state_from_pool=pool_mode
    )
    _need(shapes.K <= MAX_HEAD_DIM, "k", f"Triton kernels support K, V <= {MAX_HEAD_DIM}, got K = {shapes.K}")
    _need(shapes.V <= MAX_HEAD_DIM, "v", f"Triton kernels support K, V <= {MAX_HEAD_DIM}, got V = {shapes.V}")
    device = q.device
    for name, t in (("k", k), ("v", v), ("g", g), ("beta", beta)):
        _need(t.device == device, name, f"must be on {device}, got {t.device}")

    idx_dev = None
    if pool_mode:
        idx_dev = _check_state_pool(state_indices, initial_state, shapes.N, device)
        state = initial_state  # the pool itself: the kernels write into it
    else:
        # Read-only initial state: a float32 contiguous copy when needed, never written.
        state = None if initial_state is None else initial_state.to(device=device, dtype=torch.float32).contiguous()
    flags = None
    if has_initial_state is not None:
        flags = _check_initial_flags(has_initial_state, initial_state, shapes.N, device)
    cu = None
    if cu_seqlens is not None:
        cu = cu_seqlens.to(device=device, dtype=torch.int64).contiguous()

    scale = shapes.K**-0.5 if scale is None else float(scale)
    return PreparedInputs(shapes=shapes, offs=offs, q=q.contiguous(), k=k.contiguous(), v=v.contiguous(),
                          g=g.contiguous(), beta=beta.contiguous(), scale=scale, state=state, cu_seqlens=cu,
                          state_indices=idx_dev, has_initial_state=flags)


def _check_state_pool(
    state_indices: torch.Tensor, pool: torch.Tensor, N: int, device: torch.device
) -> torch.Tensor:
    """Check the state-pool form (``state_indices`` into the ``[P, HV, K, V]`` pool ``pool``): the slots
    (:func:`~kda_ref.ops._checks.check_state_indices`), and the pool float32, contiguous and on ``device``,
    since the kernels write the final states into it in place. Returns the slots as an int64 tensor on
    ``device``.
    """
    check_state_indices(state_indices, pool.shape[0], N)
    _need(
        pool.dtype == torch.float32,
        "initial_state",
        f"the state pool is written in place and must be float32, got {pool.dtype}",
    )
    _need(pool.is_contiguous(), "initial_state", "the state pool must be contiguous")
    _need(pool.device == device, "initial_state", f"must be on {device}")
    return state_indices.to(device=device, dtype=torch.int64)


def _check_initial_flags(
    has_initial_state: torch.Tensor, initial_state: torch.Tensor | None, N: int, device: torch.device
) -> torch.Tensor:
    """Check ``has_initial_state`` (:func:`~kda_ref.ops._checks.check_initial_flags`) and return it as int32
    on ``device`` (1 = read the sequence's initial state, 0 = start from zeros)."""
    _need(initial_state is not None, "has_initial_state", "given without initial_state")
    check_initial_flags(has_initial_state, N)
    return (has_initial_state != 0).to(device=device, dtype=torch.int32)
