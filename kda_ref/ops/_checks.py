"""Input validation shared by every KDA implementation (torch references and Triton kernels).

All KDA entry points accept the flash-linear-attention layout:

    q, k : [B, T, H, K];  v : [B, T, HV, V] with HV % H == 0 (grouped value heads, "GVA")
    g    : [B, T, HV, K]  per-step log decay (alpha_t = exp(g_t) in (0, 1]);  beta : [B, T, HV] post-sigmoid
    state : [N, HV, K, V]  K-first, float32 (float64 accepted for the references)
    cu_seqlens : int tensor [N+1], only with B == 1 (varlen packing, as in fla / vLLM / SGLang)

A bad argument raises ``ValueError`` that names the argument, before any state is touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class KDAShapes:
    """Sizes read off validated KDA inputs."""

    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    N: int  # number of sequences (B, or len(cu_seqlens) - 1 in varlen mode)


def _need(cond: bool, name: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{name}: {msg}")


def check_cu_seqlens(cu_seqlens: torch.Tensor, total_tokens: int, batch: int) -> list[int]:
    """Validate ``cu_seqlens`` and return it as a Python list of offsets."""
    _need(isinstance(cu_seqlens, torch.Tensor), "cu_seqlens", "must be a torch.Tensor")
    _need(batch == 1, "cu_seqlens", f"varlen input needs B == 1, got B = {batch}")
    _need(cu_seqlens.dim() == 1, "cu_seqlens", f"must be 1-D, got shape {tuple(cu_seqlens.shape)}")
    _need(
        not cu_seqlens.dtype.is_floating_point and cu_seqlens.dtype != torch.bool,
        "cu_seqlens",
        f"must be an integer tensor, got {cu_seqlens.dtype}",
    )
    _need(cu_seqlens.numel() >= 2, "cu_seqlens", "needs at least two entries (N + 1 with N >= 1)")
    offs = [int(x) for x in cu_seqlens.tolist()]
    _need(offs[0] == 0, "cu_seqlens", f"must start at 0, got {offs[0]}")
    _need(
        all(b > a for a, b in zip(offs, offs[1:])),
        "cu_seqlens",
        f"must be strictly increasing (no empty sequences), got {offs}",
    )
    _need(
        offs[-1] == total_tokens,
        "cu_seqlens",
        f"last entry {offs[-1]} must equal the number of tokens T = {total_tokens}",
    )
    return offs


def check_kda_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    *,
    state_from_pool: bool = False,
) -> tuple[KDAShapes, list[int] | None]:
    """Check layouts, dtypes and the varlen description; return sizes and the offsets list.

    With ``state_from_pool`` the initial state is a pool ``[P, HV, K, V]`` indexed by
    ``state_indices`` and its first dimension is not checked against N here.
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        _need(isinstance(t, torch.Tensor), name, "must be a torch.Tensor")
        _need(t.dtype in FLOAT_DTYPES, name, f"must be a floating tensor, got {t.dtype}")
    _need(q.dim() == 4, "q", f"must be [B, T, H, K], got shape {tuple(q.shape)}")
    B, T, H, K = q.shape
    _need(T >= 1, "q", "needs at least one token (T >= 1)")
    _need(B >= 1 and H >= 1 and K >= 1, "q", f"needs B, H, K >= 1, got shape {tuple(q.shape)}")
    _need(k.shape == q.shape, "k", f"must match q's shape {tuple(q.shape)}, got {tuple(k.shape)}")
    _need(v.dim() == 4 and v.shape[:2] == (B, T), "v", f"must be [B={B}, T={T}, HV, V], got {tuple(v.shape)}")
    HV, V = v.shape[2], v.shape[3]
    _need(HV >= 1 and V >= 1, "v", f"needs HV, V >= 1, got shape {tuple(v.shape)}")
    _need(HV % H == 0, "v", f"number of value heads HV={HV} must be a multiple of H={H}")
    _need(g.shape == (B, T, HV, K), "g", f"must be [B, T, HV, K] = {(B, T, HV, K)}, got {tuple(g.shape)}")
    _need(beta.shape == (B, T, HV), "beta", f"must be [B, T, HV] = {(B, T, HV)}, got {tuple(beta.shape)}")
    offs = None
    N = B
    if cu_seqlens is not None:
        offs = check_cu_seqlens(cu_seqlens, T, B)
        N = len(offs) - 1
    if initial_state is not None:
        _check_initial_state(initial_state, N, HV, K, V, state_from_pool)
    return KDAShapes(B=B, T=T, H=H, HV=HV, K=K, V=V, N=N), offs


def _check_initial_state(s: torch.Tensor, N: int, HV: int, K: int, V: int, state_from_pool: bool) -> None:
    """:func:`check_kda_inputs`' checks of ``initial_state``: a float32 / float64 ``[N, HV, K, V]`` tensor, or a
    pool ``[P, HV, K, V]`` (``state_from_pool``)."""
    _need(isinstance(s, torch.Tensor), "initial_state", "must be a torch.Tensor")
    _need(s.dtype in (torch.float32, torch.float64), "initial_state",
          f"the recurrent state is kept in float32, got {s.dtype}")
    if state_from_pool:
        _need(s.dim() == 4 and s.shape[1:] == (HV, K, V), "initial_state",
              f"state pool must be [P, HV={HV}, K={K}, V={V}], got {tuple(s.shape)}")
    else:
        _need(s.shape == (N, HV, K, V), "initial_state", f"must be [N, HV, K, V] = {(N, HV, K, V)}, got {tuple(s.shape)}")


def seq_offsets(shapes: KDAShapes, offs: list[int] | None) -> list[tuple[int, int, int]]:
    """(batch row, start, end) of every sequence, for both the padded-batch and varlen layouts."""
    if offs is None:
        return [(b, 0, shapes.T) for b in range(shapes.B)]
    return [(0, s, e) for s, e in zip(offs, offs[1:])]


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32: the references never compute in half precision."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def check_state_indices(state_indices: torch.Tensor, pool_size: int, N: int) -> list[int]:
    """``state_indices`` into a state pool of ``pool_size`` slots: N distinct integers in ``[0, pool_size)``
    (the final states are written back to those slots, so a repeated slot would lose a sequence's state).
    Both backends check it (the Triton kernels in :func:`kda_ref.ops.triton._common.prepare_kda_call`, the
    torch path in :class:`kda_ref.ops.dispatcher.KDAKernelDispatcher`). Returns the slots as a list."""
    _need(isinstance(state_indices, torch.Tensor), "state_indices", "must be a torch.Tensor")
    _need(not state_indices.dtype.is_floating_point and state_indices.dtype != torch.bool, "state_indices",
          f"must be an integer tensor, got {state_indices.dtype}")
    _need(state_indices.dim() == 1 and state_indices.numel() == N, "state_indices",
          f"must be 1-D with one slot per sequence (N = {N}), got shape {tuple(state_indices.shape)}")
    idx = [int(x) for x in state_indices.tolist()]
    bad = [i for i in idx if not 0 <= i < pool_size]
    _need(not bad, "state_indices", f"slots must lie in [0, {pool_size}) (pool size), got {bad}")
    _need(len(set(idx)) == len(idx), "state_indices", f"slots must be distinct, got {idx}")
    return idx


def check_initial_flags(has_initial_state: torch.Tensor, N: int) -> None:
    """``has_initial_state``: ``[N]``, bool or integer (non-zero: read the sequence's initial state; zero:
    start from zeros) -- not a float, which would scale the state instead of choosing it."""
    _need(isinstance(has_initial_state, torch.Tensor), "has_initial_state", "must be a torch.Tensor")
    _need(has_initial_state.dim() == 1 and has_initial_state.numel() == N, "has_initial_state",
          f"must be [N] = [{N}], got shape {tuple(has_initial_state.shape)}")
    _need(not has_initial_state.dtype.is_floating_point, "has_initial_state",
          f"must be a bool (or integer) tensor, got {has_initial_state.dtype}")
