"""``KDAKernelDispatcher``: one KDA call site, a different kernel for each phase.

Article concept ``sglang.kda_dispatcher`` (``docs/article.md#s6-4``): SGLang's ``RadixLinearAttention.forward``
and ``KDAKernelDispatcher``. Extend -> ``chunk_kda`` (chunk-start states are free checkpoints); decode ->
``fused_recurrent_kda``; verify -> the recurrent kernel keeping the state after every draft token (SGLang
``target_verify`` into ``intermediate_states_buffer``; vLLM one state block per draft position,
``spec_state_indices_tensor``). State-pool convention:
sequence n starts from ``state_pool[state_indices[n]]`` (zeros where ``has_initial_state[n]`` is False) and
its final state is written back in place; verify writes nothing. Backend: ``"torch"`` or ``"triton"``, a
:class:`~kda_ref.ops.backend.KernelBackend` (``dispatcher.kernels``).

Design notes: ``docs/kda.md#the-dispatcher-and-the-backends``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable

import torch

from .kda_chunk import chunk_kda as torch_chunk_kda
from .kda_recurrent import recurrent_kda as torch_recurrent_kda
from .kda_recurrent import recurrent_kda_decode_ as torch_recurrent_kda_decode_
from .kda_recurrent import recurrent_kda_verify as torch_recurrent_kda_verify
from .backend import BACKENDS, KERNEL_BACKENDS, TRITON_CHUNK_SIZES, KernelBackend, kernel_backend
from ._checks import check_cu_seqlens, check_initial_flags, check_state_indices
from .pad_rows import gather_rows

__all__ = ["BACKENDS", "KERNEL_BACKENDS", "TRITON_CHUNK_SIZES", "KDAKernelDispatcher", "KDAPhase", "KDAResult",
           "KernelBackend", "KernelChoice", "kernel_backend"]


class KDAPhase(str, Enum):
    EXTEND = "extend"  # prefill, or a chunk of a chunked prefill, or any multi-token append
    DECODE = "decode"  # exactly one new token per sequence
    VERIFY = "verify"  # speculative verification: per-step states for rollback


@dataclass(frozen=True)
class KernelChoice:
    phase: KDAPhase
    backend: str
    kernel: str  # "chunk_kda" | "fused_recurrent_kda"
    # filled in for the on_dispatch hook: which layer called, and for how much work
    layer: int | None = None
    num_seqs: int = 0
    num_tokens: int = 0


@dataclass
class KDAResult:
    o: torch.Tensor  # [1, T, HV, V]
    chunk_states: torch.Tensor | None = None  # [1, NCT, HV, K, V] states at chunk starts (extend)
    step_states: torch.Tensor | None = None  # [1, T, HV, K, V] states after every token (verify)
    choice: KernelChoice | None = None


class KDAKernelDispatcher:
    """Pick and run the KDA kernel for a phase; see the module docstring.

    ``on_dispatch`` (optional) is called with the :class:`KernelChoice` of every call: the trace
    hook that records which kernel ran. A model owns one dispatcher; an engine that traces passes
    its hook per forward, and the model runs that forward on :meth:`with_hook`'s copy, so engines
    sharing a model never see each other's calls.
    """

    def __init__(self, backend: str = "torch", chunk_size: int = 64, on_dispatch: Callable | None = None):
        kernels = kernel_backend(backend)  # ValueError naming ``backend`` for an unknown one
        if (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
                or chunk_size & (chunk_size - 1)):
            raise ValueError(f"chunk_size: must be a positive power of two, got {chunk_size!r}")
        if not kernels.takes_chunk_size(chunk_size):
            raise ValueError(f"chunk_size: the Triton chunk kernel takes {kernels.chunk_sizes}, got {chunk_size}")
        self.kernels = kernels
        self.chunk_size = chunk_size
        self.on_dispatch = on_dispatch

    @property
    def backend(self) -> str:
        """The backend's name (``"torch"`` | ``"triton"``), as :class:`KernelChoice` reports it."""
        return self.kernels.name

    @property
    def uses_triton_mla_decode(self) -> bool:
        """Whether an MLA decode (one query per sequence, paged rows) runs the Triton paged kernel
        (:attr:`KernelBackend.uses_triton_mla_decode`): the question the MLA layer asks."""
        return self.kernels.uses_triton_mla_decode

    def with_hook(self, on_dispatch: Callable | None) -> "KDAKernelDispatcher":
        """A copy of this dispatcher (same backend and chunk size) that calls ``on_dispatch``."""
        return KDAKernelDispatcher(self.kernels, self.chunk_size, on_dispatch)

    def select(self, phase: KDAPhase | str) -> KernelChoice:
        try:
            phase = KDAPhase(phase)
        except ValueError:
            raise ValueError(f"phase: must be one of {[p.value for p in KDAPhase]}, got {phase!r}") from None
        kernel = "chunk_kda" if phase is KDAPhase.EXTEND else "fused_recurrent_kda"
        return KernelChoice(phase=phase, backend=self.backend, kernel=kernel)

    def __call__(
        self,
        phase: KDAPhase | str,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        *,
        state_pool: torch.Tensor,
        state_indices: torch.Tensor,
        cu_seqlens: torch.Tensor,
        has_initial_state: torch.Tensor | None = None,
        scale: float | None = None,
        return_chunk_states: bool = False,
        layer: int | None = None,
        keep_step_states: bool = True,
    ) -> KDAResult:
        """Run KDA for a packed batch (``q: [1, T, H, K]`` ..., ``cu_seqlens: [N+1]``).

        ``keep_step_states=False`` (verify only): outputs without the state after every token --
        ReplaySSM's verify, which recomputes the kept states from the tokens' inputs afterwards."""
        choice = self.select(phase)
        N = cu_seqlens.numel() - 1
        if state_indices.shape != (N,):
            raise ValueError(f"state_indices: must be [N={N}], got {tuple(state_indices.shape)}")
        if choice.phase is KDAPhase.DECODE and q.shape[1] != N:
            raise ValueError(f"q: decode takes exactly one token per sequence ({N}), got T={q.shape[1]}")
        if self.on_dispatch is not None:
            self.on_dispatch(replace(choice, layer=layer, num_seqs=N, num_tokens=q.shape[1]))
        if self.kernels.triton:
            return self._run_triton(choice, q, k, v, g, beta, state_pool, state_indices, cu_seqlens,
                                    has_initial_state, scale, return_chunk_states, keep_step_states)
        return self._run_torch(choice, q, k, v, g, beta, state_pool, state_indices, cu_seqlens,
                               has_initial_state, scale, return_chunk_states, keep_step_states)

    def run_stateless(self, q, k, v, g, beta, *, cu_seqlens: torch.Tensor, scale: float | None = None,
                      layer: int | None = None):
        """Prefill from a zero state, keeping nothing (reference logits, training).

        Uses the torch chunk form whenever autograd is recording (the Triton kernels are
        forward-only), else the configured backend.
        """
        triton = self.kernels.triton and not (torch.is_grad_enabled() and q.requires_grad)
        choice = KernelChoice(phase=KDAPhase.EXTEND, backend=self.backend if triton else "torch",
                              kernel="chunk_kda", layer=layer, num_seqs=cu_seqlens.numel() - 1, num_tokens=q.shape[1])
        if self.on_dispatch is not None:
            self.on_dispatch(choice)
        if triton:
            from . import triton as tk

            return tk.chunk_kda(q, k, v, g, beta, scale=scale, cu_seqlens=cu_seqlens, chunk_size=self.chunk_size)[0]
        return torch_chunk_kda(q, k, v, g, beta, scale=scale, cu_seqlens=cu_seqlens, chunk_size=self.chunk_size)[0]

    def decode_(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                state_pool: torch.Tensor, state_indices: torch.Tensor, cu_seqlens: torch.Tensor,
                scale: float | None = None, slot_range: tuple[int, int] | None = None,
                layer: int | None = None, pad: bool = False) -> torch.Tensor:
        """The decode phase for a trusted caller: the model's all-decode step (``HybridModel`` fast path).

        ``q, k [N, H, K]`` (l2-normalised), ``v [N, HV, V]``, ``g [N, HV, K]``, ``beta [N, HV]``: one token per
        sequence continuing the state in its slot; ``cu_seqlens`` is ``arange(N + 1)``. The state is updated in
        ``state_pool`` in place; nothing is validated (no host syncs), the ``on_dispatch`` hook still sees the
        choice. ``slot_range = (start, N)``: slots ``start .. start + N - 1`` (torch: a view of the pool).
        ``pad=True``: ``PAD_SLOT_ID`` rows allowed (torch backend only, :mod:`kda_ref.ops.pad_rows`). Returns
        ``o [N, HV, V]``.
        """
        if pad and not self.kernels.takes_pad_rows:
            raise ValueError("pad: PAD_SLOT_ID rows need the torch backend (the Triton kernels check their "
                             "slots on the host, which a captured step cannot)")
        N = v.shape[0]
        if self.on_dispatch is not None:
            self.on_dispatch(KernelChoice(phase=KDAPhase.DECODE, backend=self.backend, kernel="fused_recurrent_kda",
                                          layer=layer, num_seqs=N, num_tokens=N))
        if self.kernels.triton:
            from . import triton as tk

            o, _ = tk.fused_recurrent_kda(q[None], k[None], v[None], g[None], beta[None], scale=scale,
                                          initial_state=state_pool, cu_seqlens=cu_seqlens, state_indices=state_indices)
            return o[0]
        return torch_recurrent_kda_decode_(q, k, v, g, beta, state_pool, state_indices, scale=scale,
                                           slot_range=slot_range, pad=pad)

    def verify_(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                state_pool: torch.Tensor, state_indices: torch.Tensor, scale: float | None = None,
                keep_step_states: bool = True, layer: int | None = None, pad: bool = False,
                slot_range: tuple[int, int] | None = None, parents: tuple[int, ...] | None = None,
                corrections: torch.Tensor | None = None):
        """The verify phase for a trusted caller: the model's fused verify step, every sequence
        verifying the same ``L`` tokens (``q, k [N, L, H, K]`` l2-normalised, ``v [N, L, HV, V]``,
        ``g [N, L, HV, K]``, ``beta [N, L, HV]``) from the state in its slot, read and never written.
        ``pad``, ``slot_range``: as :meth:`decode_`. ``parents``: a draft tree
        (:func:`~kda_ref.ops.kda_recurrent.recurrent_kda_verify`), run by the torch kernel on either backend.
        ``corrections``: float32 ``[N, L, HV, V]``, every token's correction (RecoverSSM,
        :mod:`kda_ref.speculative.recoverssm`). Returns ``(o [N, L, HV, V], steps [N, L, HV, K, V] | None)``;
        nothing is validated."""
        if pad and not self.kernels.takes_pad_rows:
            raise ValueError("pad: PAD_SLOT_ID rows need the torch backend (the Triton kernels check their "
                             "slots on the host, which a captured step cannot)")
        N, L = v.shape[:2]
        triton = self.kernels.triton and parents is None
        backend = self.backend if triton else "torch"
        if self.on_dispatch is not None:
            self.on_dispatch(KernelChoice(phase=KDAPhase.VERIFY, backend=backend, kernel="fused_recurrent_kda",
                                          layer=layer, num_seqs=N, num_tokens=N * L))
        # [N, HV, K, V], read only
        if slot_range is not None and not pad:  # PAD rows (index -1) must go through gather_rows
            init = state_pool.narrow(0, *slot_range)
        else:
            init = gather_rows(state_pool, state_indices) if pad else state_pool.index_select(0, state_indices)
        if triton:
            from . import triton as tk

            packed = lambda t: t.reshape(1, N * L, *t.shape[2:])  # noqa: E731  [N, L, ...] -> [1, N*L, ...]
            cu = torch.arange(0, N * L + 1, L, device=v.device)
            steps = (torch.empty(1, N * L, v.shape[2], k.shape[3], v.shape[3], dtype=torch.float32, device=v.device)
                     if keep_step_states else None)
            u = None if corrections is None else corrections.view(1, N * L, *corrections.shape[2:])
            o, _ = tk.fused_recurrent_kda(packed(q), packed(k), packed(v), packed(g), packed(beta), scale=scale,
                                          initial_state=init, cu_seqlens=cu, step_states=steps, corrections=u)
            return o.view(N, L, *o.shape[2:]), None if steps is None else steps.view(N, L, *steps.shape[2:])
        return torch_recurrent_kda_verify(q, k, v, g, beta, init, scale=scale, keep_step_states=keep_step_states,
                                          parents=parents, corrections=corrections)

    @staticmethod
    def _gather_initial(state_pool, state_indices, has_initial_state):
        """The initial states of the torch path, checked as the Triton kernels check them: distinct slots in
        the pool (each final state is written back to its slot), ``[N]`` bool / integer flags. A sequence without
        one starts from zeros, whatever its slot holds (zeroed, not multiplied by 0: a slot left holding inf or
        NaN would give NaN); None when no sequence continues a state (a step of fresh prompts: no gather)."""
        N = state_indices.numel()
        check_state_indices(state_indices, state_pool.shape[0], N)
        if has_initial_state is not None:
            check_initial_flags(has_initial_state, N)
            if not bool(has_initial_state.any()):
                return None
        init = state_pool[state_indices]
        if has_initial_state is not None:
            init.masked_fill_((has_initial_state == 0).view(-1, 1, 1, 1), 0.0)
        return init

    def _run_torch(self, choice, q, k, v, g, beta, pool, idx, cu, has_init, scale, want_chunks, want_steps=True):
        init = self._gather_initial(pool, idx, has_init)
        if choice.phase is KDAPhase.EXTEND:
            o, final, *h = torch_chunk_kda(q, k, v, g, beta, scale=scale, initial_state=init, output_final_state=True,
                                          cu_seqlens=cu, chunk_size=self.chunk_size,
                                          return_intermediate_states=want_chunks)
            pool.index_copy_(0, idx, final.to(pool.dtype))
            return KDAResult(o=o, chunk_states=h[0] if want_chunks else None, choice=choice)
        if choice.phase is KDAPhase.DECODE:
            check_cu_seqlens(cu, q.shape[1], q.shape[0])  # unread below, but a wrong one is refused as Triton does
            # one token per sequence: [1, N, h, D] -> [N, 1, h, D], a plain batch (no varlen walk)
            as_batch = lambda t: t.transpose(0, 1)  # noqa: E731
            o, final = torch_recurrent_kda(as_batch(q), as_batch(k), as_batch(v), as_batch(g), as_batch(beta),
                                           scale=scale, initial_state=init, output_final_state=True)
            pool.index_copy_(0, idx, final.to(pool.dtype))
            return KDAResult(o=as_batch(o), choice=choice)
        if not want_steps:
            o, _ = torch_recurrent_kda(q, k, v, g, beta, scale=scale, initial_state=init, cu_seqlens=cu)
            return KDAResult(o=o, choice=choice)
        o, _, steps = torch_recurrent_kda(q, k, v, g, beta, scale=scale, initial_state=init, cu_seqlens=cu,
                                          return_step_states=True)
        return KDAResult(o=o, step_states=steps, choice=choice)

    def _run_triton(self, choice, q, k, v, g, beta, pool, idx, cu, has_init, scale, want_chunks, want_steps=True):
        from . import triton as tk  # imported on first use: needs a GPU or TRITON_INTERPRET=1

        if choice.phase is KDAPhase.EXTEND:
            o, _, *h = tk.chunk_kda(q, k, v, g, beta, scale=scale, initial_state=pool, cu_seqlens=cu,
                                    chunk_size=self.chunk_size, return_intermediate_states=want_chunks,
                                    state_indices=idx, has_initial_state=has_init)
            return KDAResult(o=o, chunk_states=h[0] if want_chunks else None, choice=choice)
        if choice.phase is KDAPhase.DECODE:
            o, _ = tk.fused_recurrent_kda(q, k, v, g, beta, scale=scale, initial_state=pool, cu_seqlens=cu,
                                          state_indices=idx, has_initial_state=has_init)
            return KDAResult(o=o, choice=choice)
        init = self._gather_initial(pool, idx, has_init)
        if not want_steps:
            o, _ = tk.fused_recurrent_kda(q, k, v, g, beta, scale=scale, initial_state=init, cu_seqlens=cu)
            return KDAResult(o=o, choice=choice)
        steps = torch.empty(1, q.shape[1], v.shape[2], q.shape[3], v.shape[3], dtype=torch.float32, device=q.device)
        o, _ = tk.fused_recurrent_kda(q, k, v, g, beta, scale=scale, initial_state=init, cu_seqlens=cu,
                                      step_states=steps)
        return KDAResult(o=o, step_states=steps, choice=choice)
