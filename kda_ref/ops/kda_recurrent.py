"""KDA recurrent form: the readable, token-by-token reference.

Article concept: the KDA recurrence (``docs/article.md#s1-1``, ``#s2-1``, ``kda.recurrence``). Per
value head, with state ``S in R^{K x V}``::

    S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,   alpha_t = exp(g_t)
    o_t = S_t^T (scale * q_t)                                                 (read AFTER the update)

Semantics match fla ``fla/ops/kda/naive.py::naive_recurrent_kda``, plus ``cu_seqlens`` varlen packing.
Decode counterparts: fla ``fused_recurrent_kda``; SGLang ``KDAKernelDispatcher`` decode path, vLLM 0.32.0
``fused_recurrent_kda_packed_decode`` (called by
``vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py::KimiGatedDeltaNetAttention._forward``).

Design notes: ``docs/kda.md#the-recurrent-fast-paths``.
"""

from __future__ import annotations

import torch

from ._checks import check_kda_inputs, compute_dtype, seq_offsets
from .pad_rows import gather_rows, scatter_rows_, write_rows


def recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    return_step_states: bool = False,
):
    """Token-by-token KDA.

    Args:
        q, k: ``[B, T, H, K]`` (not normalised here: apply :func:`kda_ref.ops.l2norm` first); v: ``[B, T, HV, V]``;
            g: ``[B, T, HV, K]`` log decay; beta: ``[B, T, HV]`` post-sigmoid; scale: default ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` float32 (N = B, or N = len(cu_seqlens) - 1). Not modified.
        output_final_state: also return the state after the last token of every sequence.
        cu_seqlens: ``[N + 1]`` int offsets of packed sequences (requires ``B == 1``).
        return_step_states: also return the state after every token, ``[B, T, HV, K, V]``
            (used by speculative verification to roll back to any accepted position).

    Returns:
        ``(o, final_state)`` with ``o: [B, T, HV, V]`` in ``v.dtype`` and ``final_state:
        [N, HV, K, V]`` float32 (float64 for float64 inputs) or ``None``; with
        ``return_step_states`` a third element, the per-token states.
    """
    shapes, offs = check_kda_inputs(q, k, v, g, beta, initial_state, cu_seqlens)
    B, T, H, HV, K, V = shapes.B, shapes.T, shapes.H, shapes.HV, shapes.K, shapes.V
    scale = K**-0.5 if scale is None else scale
    dt = compute_dtype(q, k, v, g, beta, initial_state)
    # [B, T, H, K] -> [B, T, HV, K]: value head hv reads query/key head hv // (HV / H)
    qf, kf = q.to(dt).repeat_interleave(HV // H, dim=2) * scale, k.to(dt).repeat_interleave(HV // H, dim=2)
    vf, gf, bf = v.to(dt), g.to(dt), beta.to(dt)
    seqs, (qf, kf, vf, gf, bf) = _batched_if_equal(offs, seq_offsets(shapes, offs), (qf, kf, vf, gf, bf))
    Bx, Tx = qf.shape[:2]
    o = torch.zeros(Bx, Tx, HV, V, dtype=dt, device=v.device)
    steps = torch.zeros(Bx, Tx, HV, K, V, dtype=dt, device=v.device) if return_step_states else None
    S0 = torch.zeros(shapes.N, HV, K, V, dtype=dt, device=v.device)
    if initial_state is not None:
        S0 = S0 + initial_state.to(dt)
    # every row runs the whole time axis: one batched loop; else one loop per sequence
    whole = all(e - s == Tx for _, s, e in seqs) and len(seqs) == Bx
    groups = [(slice(None), 0, Tx, S0)] if whole else [(slice(b, b + 1), s, e, S0[n:n + 1]) for n, (b, s, e) in enumerate(seqs)]
    finals = [_walk(rows, start, end, S, qf, kf, vf, gf, bf, o, steps) for rows, start, end, S in groups]
    final_state = torch.cat(finals) if output_final_state else None
    if return_step_states:
        return o.reshape(B, T, HV, V).to(v.dtype), final_state, steps.reshape(B, T, HV, K, V)
    return o.reshape(B, T, HV, V).to(v.dtype), final_state



def _batched_if_equal(offs, seqs, tensors):
    """Packed sequences of one length (e.g. a decode batch, one token each) as a batch: ``[1, N*L, h, D]`` ->
    ``[N, L, h, D]`` and the sequences ``(row, 0, L)``; anything else unchanged."""
    lengths = {e - s for _, s, e in seqs}
    if offs is None or len(lengths) != 1:
        return seqs, tensors
    L = lengths.pop()
    return [(n, 0, L) for n in range(len(seqs))], tuple(x.reshape(len(seqs), L, *x.shape[2:]) for x in tensors)


def _walk(rows, start: int, end: int, S, qf, kf, vf, gf, bf, o, steps):
    """The recurrence over tokens ``[start, end)`` of the batch ``rows`` from state ``S [b, HV, K, V]``: writes
    each token's output into ``o`` (and its state into ``steps``); returns the last state."""
    for t in range(start, end):
        k_t = kf[rows, t]  # [b, HV, K]
        S = S * gf[rows, t].exp()[..., None]  # Diag(alpha_t) S
        v_old = torch.einsum("bhk,bhkv->bhv", k_t, S)  # S^T k_t: what the state recalls for k_t
        S = S + torch.einsum("bhk,bhv->bhkv", bf[rows, t, :, None] * k_t, vf[rows, t] - v_old)  # erase + write
        o[rows, t] = torch.einsum("bhk,bhkv->bhv", qf[rows, t], S)
        if steps is not None:
            steps[rows, t] = S
    return S

def recurrent_kda_decode_(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    state_indices: torch.Tensor,
    scale: float | None = None,
    slot_range: tuple[int, int] | None = None,
    pad: bool = False,
) -> torch.Tensor:
    """One decode token per sequence, the state read from and written back to ``state_pool`` in place.

    The fast path beside :func:`recurrent_kda` (tested against it), **without input validation** (trusted
    callers: the model's decode step). Torch analogue of fla ``fused_recurrent_kda`` with ``state_indices``:
    vLLM 0.32.0's ``fused_recurrent_kda_packed_decode``, SGLang ``KDAKernelDispatcher`` decode. Under
    ``torch.compile`` the update is :func:`_step_fused`. Design notes: ``docs/kda.md#the-recurrent-fast-paths``.

    Args:
        q, k: ``[N, H, K]``, already l2-normalised; v: ``[N, HV, V]``; g: ``[N, HV, K]`` log decay;
            beta: ``[N, HV]`` post-sigmoid.
        state_pool: float32 ``[P, HV, K, V]``; slot ``state_indices[n]`` holds sequence n's state
            before the token and receives the state after it.
        state_indices: ``[N]`` distinct slots.
        scale: query scale, default ``K ** -0.5``.
        slot_range: ``(start, N)`` when ``state_indices`` is exactly ``start .. start + N - 1``: the
            states are then updated through a view of the pool, with no gather / scatter copy.
        pad: ``state_indices`` may hold ``PAD_SLOT_ID`` rows (a static-shape step): they start from a
            zero state, write nothing and output zeros (:mod:`kda_ref.ops.pad_rows`).

    Returns:
        ``o [N, HV, V]`` in ``v.dtype``.
    """
    N, HV, V = v.shape
    K = k.shape[-1]
    scale = K**-0.5 if scale is None else scale
    dt = state_pool.dtype
    if q.shape[1] != HV:  # grouped value heads: value head hv reads query/key head hv // group
        q, k = q.repeat_interleave(HV // q.shape[1], dim=1), k.repeat_interleave(HV // k.shape[1], dim=1)
    if not (q.dtype == k.dtype == v.dtype == g.dtype == beta.dtype == dt):  # no comprehension when they match
        q, k, v, g, beta = (t.to(dt) for t in (q, k, v, g, beta))
    if torch.compiler.is_compiling():
        # traced: the same update as products and sums, which inductor fuses into loops, and the pool read
        # and written only through the operators of kda_ref.ops.pad_rows (never a view or a plain index op)
        S = gather_rows(state_pool, state_indices)  # [N, HV, K, V], PAD rows zero
        o = _step_fused(S, q * scale, k, v, g, beta)
        scatter_rows_(state_pool, state_indices, S)
        if pad:
            o.view(N, HV * V).masked_fill_((state_indices < 0)[:, None], 0.0)
        return o.to(v.dtype)
    if pad:
        S = gather_rows(state_pool, state_indices)  # [N, HV, K, V], PAD rows zero, written back below
    elif slot_range is not None:
        S = state_pool.narrow(0, slot_range[0], slot_range[1])  # [N, HV, K, V], a view: updated in place
    else:
        S = state_pool.index_select(0, state_indices)  # [N, HV, K, V], a copy, written back below
    S.mul_(g.exp().unsqueeze(-1))  # Diag(alpha_t) S
    Sf = S.view(N * HV, K, V)  # one [K, V] matrix per (sequence, head)
    kf = k.reshape(N * HV, 1, K)
    recalled = torch.bmm(kf, Sf).view(N, HV, 1, V)  # S^T k_t: what the state recalls for k_t
    delta = (v.unsqueeze(-2) - recalled).mul_(beta[..., None, None])  # [N, HV, 1, V]: beta_t (v_t - S^T k_t)
    Sf.baddbmm_(kf.transpose(1, 2), delta.view(N * HV, 1, V))  # S += k_t delta^T   (erase + write)
    o = torch.bmm(q.reshape(N * HV, 1, K) * scale, Sf)  # [NHV, 1, V]: o_t = S_t^T (scale q_t)
    if pad or slot_range is None:  # else S is a view of the pool: already written
        write_rows(state_pool, state_indices, S, pad)
    if pad:
        o.view(N, HV * V).masked_fill_((state_indices < 0)[:, None], 0.0)
    return o.view(N, HV, V).to(v.dtype)


def recurrent_kda_verify(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    scale: float | None = None,
    keep_step_states: bool = True,
    parents: tuple[int, ...] | None = None,
    corrections: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``L`` tokens for each of ``N`` sequences from their states, keeping the state after every token
    and writing nothing back: the fast path of a speculative verify step (``L = 1 + k``), beside
    :func:`recurrent_kda` (``return_step_states=True``) and tested against it. No input validation:
    the model's verify step builds its arguments.

    Counterparts: SGLang ``TritonKDAKernel.target_verify`` (``disable_state_update=True``,
    ``intermediate_states_buffer``); fla ``fused_recurrent_kda`` over vLLM's ``1 + num_spec`` state
    blocks. Under ``torch.compile`` the update is :func:`_step_fused`.
    Design notes: ``docs/kda.md#the-recurrent-fast-paths``.

    Args:
        q, k: ``[N, L, H, K]``, already l2-normalised; v: ``[N, L, HV, V]``; g: ``[N, L, HV, K]`` log
            decay; beta: ``[N, L, HV]``.
        initial_state: ``[N, HV, K, V]`` fp32, read only.
        scale: query scale, default ``K ** -0.5``.
        keep_step_states: also return the state after every token (False: ReplaySSM keeps inputs).
        parents: a draft tree laid out as one row (:mod:`kda_ref.engine.tree_verify`): token ``t`` starts
            from the state after token ``parents[t]`` (``-1``: the initial state), ``parents[t] < t``;
            ``None``: a chain. SGLang's tree verify follows each node's parent index the same way.
        corrections: a float32 ``[N, L, HV, V]`` buffer that receives every token's correction
            ``u_t = beta_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)`` (RecoverSSM's record,
            :mod:`kda_ref.speculative.recoverssm`; vLLM ``_kda_recoverssm_verify_kernel``).

    Returns:
        ``(o [N, L, HV, V] in v.dtype, steps [N, L, HV, K, V] fp32 or None)``; ``steps`` is ``None``
        unless ``keep_step_states``.
    """
    N, L, HV, V = v.shape
    K = k.shape[-1]
    scale = K**-0.5 if scale is None else scale
    dt = initial_state.dtype
    if q.shape[2] != HV:  # grouped value heads: value head hv reads query/key head hv // group
        q, k = (t.repeat_interleave(HV // t.shape[2], dim=2) for t in (q, k))
    q, k, v, g, beta = (t if t.dtype == dt else t.to(dt) for t in (q, k, v, g, beta))
    if parents is not None and (len(parents) != L or any(not -1 <= p < t for t, p in enumerate(parents))):
        raise ValueError(f"parents: token t's parent must lie in [-1, t) for each of the {L} tokens, got {parents}")
    if torch.compiler.is_compiling():  # products and sums per token, which inductor fuses into loops
        return _verify_fused(q, k, v, g, beta, initial_state, scale, keep_step_states, parents, corrections)
    return _verify_bmm(q, k, v, g, beta, initial_state, scale, keep_step_states, parents, corrections)


def _verify_fused(q, k, v, g, beta, initial_state, scale, keep_step_states, parents, corrections=None):
    """The traced form of :func:`recurrent_kda_verify` (same arguments, already cast and
    head-expanded): one :func:`_step_fused` per token on a clone of the state."""
    L = v.shape[1]
    S = initial_state.clone()  # [N, HV, K, V]
    outs, states = [], []
    for t in range(L):
        if parents is not None and parents[t] != t - 1:  # a tree: continue from the parent's state
            S = (initial_state if parents[t] < 0 else states[parents[t]]).clone()
        outs.append(_step_fused(S, q[:, t] * scale, k[:, t], v[:, t], g[:, t], beta[:, t],
                                None if corrections is None else corrections[:, t]))
        if keep_step_states or parents is not None:
            states.append(S.clone())
    o = torch.stack(outs, dim=1)  # [N, L, HV, V]
    return o.to(v.dtype), torch.stack(states, dim=1) if keep_step_states else None  # [N, L, HV, K, V]


def _verify_bmm(q, k, v, g, beta, initial_state, scale, keep_step_states, parents, corrections=None):
    """The eager form of :func:`recurrent_kda_verify` (same arguments, already cast and
    head-expanded): three batched ops per token over all ``N * HV`` heads, every state written once
    into one ``[L, N * HV, K, V]`` buffer, then every token's output in one ``bmm``."""
    N, L, HV, V = v.shape
    K = k.shape[-1]
    dt = initial_state.dtype
    NHV = N * HV
    # token-major operands: [N, L, HV, ...] -> [L, N * HV, ...], so that token t's rows are one block
    def token_major(t: torch.Tensor, *shape: int) -> torch.Tensor:
        return t.reshape(L, NHV, *shape) if N == 1 else t.transpose(0, 1).reshape(L, NHV, *shape)
    alphas = token_major(g, K, 1).exp()  # [L, NHV, K, 1]
    b = beta.unsqueeze(-1)  # [N, L, HV, 1]
    kb, bv = token_major(k * b, 1, K), token_major(v * b, 1, V)  # beta_t k_t^T [L, NHV, 1, K], beta_t v_t [L, NHV, 1, V]
    ks = token_major(k, K, 1)  # k_t as a column: [L, NHV, K, 1]
    steps = torch.empty(L, NHV, K, V, dtype=dt, device=v.device)  # the state after every token
    deltas = torch.empty(L, NHV, 1, V, dtype=dt, device=v.device)  # every token's correction u_t
    S0 = S = initial_state.reshape(NHV, K, V)
    per_token = zip(alphas.unbind(0), kb.unbind(0), bv.unbind(0), ks.unbind(0), steps.unbind(0), deltas.unbind(0))
    for t, (alpha_t, kb_t, bv_t, k_t, S_t, u_t) in enumerate(per_token):  # three ops per token, each state written once
        if parents is not None:  # a tree: the state this token continues from is its parent's
            S = S0 if parents[t] < 0 else steps[parents[t]]
        torch.mul(S, alpha_t, out=S_t)  # Diag(alpha_t) S
        torch.baddbmm(bv_t, kb_t, S_t, alpha=-1, out=u_t)  # u_t = beta_t (v_t - S^T k_t): [NHV, 1, V]
        S = S_t.baddbmm_(k_t, u_t)  # S + k_t u_t^T   (erase + write)
    if corrections is not None:
        corrections.copy_(deltas.view(L, N, HV, V).transpose(0, 1))  # [N, L, HV, V]
    # o_t = S_t^T (scale q_t) for every token at once: [L * NHV, 1, K] @ [L * NHV, K, V]
    o = torch.bmm(token_major(q * scale, 1, K).view(L * NHV, 1, K), steps.view(L * NHV, K, V))
    o = o.view(L, N, HV, V).transpose(0, 1)  # [N, L, HV, V]
    steps = steps.view(L, N, HV, K, V).transpose(0, 1) if keep_step_states else None
    return o.to(v.dtype), steps


def _step_fused(S: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                beta: torch.Tensor, delta_out: torch.Tensor | None = None) -> torch.Tensor:
    """One delta-rule token on ``S [N, HV, K, V]`` in place, as elementwise products and sums (``q`` already
    scaled; ``q, k, g [N, HV, K]``, ``v [N, HV, V]``, ``beta [N, HV]``): ``o [N, HV, V]``. The form the
    compiled decode and verify steps use; eagerly each line would be a pass over memory, so the eager
    paths use batched matmuls instead (tested against each other). ``delta_out [N, HV, V]``: receives the
    correction written (RecoverSSM's record)."""
    S.mul_(g.exp().unsqueeze(-1))  # Diag(alpha_t) S
    recalled = (S * k.unsqueeze(-1)).sum(-2)  # S^T k_t: [N, HV, V]
    delta = (v - recalled) * beta.unsqueeze(-1)  # beta_t (v_t - S^T k_t)
    if delta_out is not None:
        delta_out.copy_(delta)
    S.add_(k.unsqueeze(-1) * delta.unsqueeze(-2))  # S += k_t delta^T
    return (S * q.unsqueeze(-1)).sum(-2)  # o_t = S_t^T q_t


def segment_corrections(steps: torch.Tensor, initial: torch.Tensor, cu_seqlens: torch.Tensor, k: torch.Tensor,
                        v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """Every token's correction ``u_t = beta_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)`` read off known states:
    ``steps [T, HV, K, V]`` the state after every token of sequences packed by ``cu_seqlens [N + 1]``,
    ``initial [N, HV, K, V]`` each sequence's state before its first token, ``k [T, H, K]``, ``v [T, HV, V]``,
    ``g [T, HV, K]``, ``beta [T, HV]``. Returns ``u [T, HV, V]`` in the states' dtype.

    The reference path's RecoverSSM record (a verify inside a mixed step runs the reference recurrence,
    which keeps the states anyway); the fused verify kernels store ``u`` as they go instead
    (``corrections=`` of :func:`recurrent_kda_verify` and the Triton kernel), tested against this."""
    dt = steps.dtype
    prev = torch.empty_like(steps)  # [T, HV, K, V]: the state before every token
    prev[1:] = steps[:-1]
    prev[cu_seqlens[:-1]] = initial.to(dt)  # a sequence's first token continues its initial state
    if k.shape[1] != v.shape[1]:  # grouped value heads: value head hv reads key head hv // group
        k = k.repeat_interleave(v.shape[1] // k.shape[1], dim=1)
    decayed = prev * g.to(dt).exp().unsqueeze(-1)  # Diag(alpha_t) S_{t-1}
    recalled = torch.einsum("thkv,thk->thv", decayed, k.to(dt))  # (Diag(alpha_t) S_{t-1})^T k_t
    return beta.to(dt).unsqueeze(-1) * (v.to(dt) - recalled)
