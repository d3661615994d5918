"""KDA chunkwise-parallel form (WY representation / UT transform), in torch.

Article concepts: ``kda.chunk_form`` (parallel inside a chunk, the state strictly in order from chunk to
chunk — "split into segments, keep the order", ``docs/article.md#s1-3``) and ``kda.chunk_checkpoints``
(the chunk-start states, free checkpoints: SGLang's ``mamba_track`` of chunk-aligned states; fla
``chunk_kda(return_intermediate_states=True)``). Math: Kimi Linear tech report, Eq. 6-9; fla
``fla/ops/kda/chunk_fwd.py::chunk_kda_fwd``. The readable form below is the differentiable one (training);
calls that need no gradient run :mod:`kda_ref.ops.kda_chunk_blocked`.

Design notes: ``docs/kda.md#the-chunk-form-in-torch``.
"""

from __future__ import annotations

import functools

import torch

from ._checks import check_kda_inputs, compute_dtype, seq_offsets
from .chunk_layout import ChunkLayout
from .decay_scores import inverse_decayed_keys, tril_decay_scores
from .kda_chunk_blocked import chunk_kda_blocked, compute_chunk

__all__ = ["ChunkLayout", "chunk_kda", "chunk_kda_impl", "intra_chunk_scores", "tril_decay_scores"]


def intra_chunk_scores(q, k, G, qg, kg, k_inv_t, ok, scale: float = 1.0):
    """``(A_qk, A_kk)`` of every chunk: decayed scores, ``[NCT, HV, C, C]`` each.

    ``A_qk[i, j] = scale * sum_d q_i k_j exp(G_i - G_j)`` for ``j <= i``; ``A_kk`` the same with k on
    both sides for ``j < i`` (no scale, beta not applied). ``qg = scale q exp(G)``, ``kg = k exp(G)`` and
    ``k_inv_t, ok`` come from :func:`inverse_decayed_keys`. Fast path: one matmul ``qg @ k_inv_t`` anchored
    at the chunk start; (chunk, head) pairs with ``ok`` False take :func:`tril_decay_scores`.
    """
    C = G.shape[-2]
    A_qk = qg @ k_inv_t
    A_kk = kg @ k_inv_t
    if ok is not None:
        hard = (~ok).flatten().nonzero().squeeze(1)  # (chunk, head) pairs for the safe path
        flat = lambda t: t.flatten(0, 1)  # noqa: E731  [NCT, HV, ...] -> [NCT*HV, ...]
        safe = tril_decay_scores(torch.stack([flat(q)[hard], flat(k)[hard]]), flat(k)[hard], flat(G)[hard])
        A_qk = flat(A_qk).index_put((hard,), safe[0] * scale).view_as(A_qk)
        A_kk = flat(A_kk).index_put((hard,), safe[1]).view_as(A_kk)
    causal = torch.ones(C, C, dtype=torch.bool, device=G.device).tril()
    return A_qk.masked_fill(~causal, 0.0), A_kk.masked_fill(~causal.tril(-1), 0.0)


def _state_pass_autograd(S, U, W, alpha_last, k_decay_t, steps):
    """The chunk-to-chunk state pass, built from out-of-place ops so autograd can record it.

    Per step (heads folded into the batch): ``v_new = U - W S``; ``S_next = alpha_last * S +
    k_decay^T v_new``. Returns the states at every chunk start ``h [NCT, HV, K, V]``, the
    pseudo-values ``v_new [NCT, HV, C, V]`` (both step-major) and the final states.
    """
    N, HV, K, V = S.shape
    C = U.shape[2]
    h_steps, vnew_steps = [], []
    for start, count in steps:
        sl = slice(start, start + count)
        S_act = S[:count]
        h_steps.append(S_act)
        vn = torch.baddbmm(U[sl].flatten(0, 1), W[sl].flatten(0, 1), S_act.flatten(0, 1), alpha=-1)
        vnew_steps.append(vn.view(count, HV, C, V))
        S_new = torch.baddbmm((alpha_last[sl] * S_act).flatten(0, 1), k_decay_t[sl].flatten(0, 1),
                              vn).view(count, HV, K, V)
        S = S_new if count == N else torch.cat([S_new, S[count:]], dim=0)
    return torch.cat(h_steps, dim=0), torch.cat(vnew_steps, dim=0), S


def _chunk_kda_readable(q, k, v, g, beta, scale: float, initial_state, N: int, lay: ChunkLayout,
                        dt: torch.dtype):
    """Every stage over all chunks at once, out-of-place (autograd records it).

    Returns ``(o [B, T, HV, V], final states in the layout's sorted order, h [NCT, HV, K, V]
    step-major)``.
    """
    B, T = q.shape[:2]
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    C, NCT, dev = lay.C, lay.total_chunks, q.device
    to_chunks = lambda x: _to_chunks(x, lay, HV, dt)  # noqa: E731
    qc, kc, vc, gc = to_chunks(q), to_chunks(k), to_chunks(v), to_chunks(g)
    bc = to_chunks(beta.unsqueeze(-1))  # [NCT, HV, C, 1]; padding rows have beta = 0
    G = gc.cumsum(dim=2)  # per-chunk cumulative log decay, [NCT, HV, C, K]
    eG = G.exp()
    # q_i scale exp(G_i), k_i exp(G_i): bounded by |q|, |k| for decaying gates; the scale rides on
    # q, so A_qk and the output need no separate scaling
    qg, kg = qc * (eG * scale), kc * eG

    k_inv_t, ok = inverse_decayed_keys(kc, G)
    A_qk, A_kk = intra_chunk_scores(qc, kc, G, qg, kg, k_inv_t, ok, scale)
    # UT transform: T = (I + Diag(beta) A_kk)^-1 once per chunk, then W = T Diag(beta) exp(G) k,
    # U = T Diag(beta) v as two batched matmuls
    eye = torch.eye(C, dtype=dt, device=dev).expand_as(A_kk)
    T_inv = torch.linalg.solve_triangular(A_kk * bc, eye, upper=False, unitriangular=True)
    T_beta = T_inv * bc.transpose(-1, -2)  # T Diag(beta): scale columns once, [NCT, HV, C, C]
    W = T_beta @ kg  # [NCT, HV, C, K]
    U = T_beta @ vc  # [NCT, HV, C, V]

    alpha_last = eG[:, :, -1, :].unsqueeze(-1)  # [NCT, HV, K, 1]: decay over the whole chunk
    # k_i exp(G_C - G_i) as [NCT, HV, K, C]; reuse exp(-G) where it is exact
    if ok is None:
        k_decay_t = k_inv_t * alpha_last
    else:
        k_decay_t = (kc * (G[:, :, -1:, :] - G).exp()).transpose(-1, -2)

    # the only sequential part: walk chunk steps, sequences sorted so the active ones are a prefix
    S = torch.zeros(N, HV, K, V, dtype=dt, device=dev)
    if initial_state is not None:
        S = S + initial_state.to(dt)
    S = S[torch.tensor(lay.order, device=dev)]
    h, v_new, S = _state_pass_autograd(S, U, W, alpha_last, k_decay_t, lay.steps)

    o = torch.baddbmm((A_qk @ v_new).flatten(0, 1), qg.flatten(0, 1), h.flatten(0, 1))  # [NCT*HV, C, V]
    # back to token order with one gather: token t, head hv sits at row (slot(t) // C * HV + hv) * C + slot(t) % C
    slot = lay.token_slot  # [B*T]
    src = ((slot // C).view(-1, 1) * HV + torch.arange(HV, device=dev).view(1, HV)) * C + (slot % C).view(-1, 1)
    o_final = o.reshape(NCT * HV * C, V).index_select(0, src.flatten()).view(B, T, HV, V).to(v.dtype)
    return o_final, S, h


def _to_chunks(x: torch.Tensor, lay: ChunkLayout, HV: int, dt: torch.dtype) -> torch.Tensor:
    """``x [B, T, h, D]`` -> rows ``[(B*T + 1) * h, D]`` (a zero row block appended for padding slots, which
    read it) -> one gather straight into the contiguous chunk layout ``[NCT, HV, C, D]``; grouped value heads:
    value head hv reads q/k head ``hv // (HV / h)``."""
    B, T, h, D = x.shape
    C, NCT = lay.C, lay.total_chunks
    idx = torch.where(lay.token_index < 0, B * T, lay.token_index)
    rows = x.reshape(B * T * h, D).to(dt)
    if NCT * C != B * T:
        rows = torch.cat([rows, rows.new_zeros(h, D)])
    src = idx.view(NCT, 1, C) * h + (torch.arange(HV, device=x.device) // (HV // h)).view(1, HV, 1)
    return rows.index_select(0, src.flatten()).view(NCT, HV, C, D)


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    chunk_size: int = 64,
    return_intermediate_states: bool = False,
):
    """Chunkwise KDA with the same semantics as :func:`kda_ref.ops.recurrent_kda`.

    Args: as :func:`~kda_ref.ops.recurrent_kda`, plus
        chunk_size: a power of two (64 as in fla); T need not be a multiple of it.
        return_intermediate_states: also return ``h``, the state at the START of every chunk of
            every sequence: ``[B, NT, HV, K, V]`` with ``NT = ceil(T / chunk_size)``, or for varlen
            ``[1, sum_n ceil(L_n / chunk_size), HV, K, V]`` (sequence 0's chunks first).

    Returns:
        ``(o, final_state)`` or ``(o, final_state, h)``.

    Readable form when a gradient is needed, else the blocked path. Gates must be finite (a ``-inf`` gate
    gives NaN here). Design notes: ``docs/kda.md#the-chunk-form-in-torch``.
    """
    return chunk_kda_impl(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, chunk_size,
                          return_intermediate_states)


def chunk_kda_impl(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                   chunk_size=64, return_intermediate_states=False, *, impl: str = "auto",
                   block_chunks: int | None = None):
    """:func:`chunk_kda` with the implementation chosen: ``impl`` = ``"auto"`` (blocked unless a
    gradient is needed), ``"readable"`` or ``"blocked"``; ``block_chunks`` sizes the blocked path's
    blocks (None: :func:`~kda_ref.ops.kda_chunk_blocked.block_chunks_for`; tests use small values to cross
    block boundaries)."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size: must be a positive power of two, got {chunk_size!r}")
    if impl not in ("auto", "readable", "blocked"):
        raise ValueError(f"impl: must be 'auto', 'readable' or 'blocked', got {impl!r}")
    if block_chunks is not None and (not isinstance(block_chunks, int) or block_chunks < 1):
        raise ValueError(f"block_chunks: must be None or a positive int, got {block_chunks!r}")
    shapes, offs = check_kda_inputs(q, k, v, g, beta, initial_state, cu_seqlens)
    if _equal_pack(offs, chunk_size):
        return _as_regular_batch(q, k, v, g, beta, scale, initial_state, output_final_state, offs, chunk_size,
                                 return_intermediate_states, impl, block_chunks)
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, g, beta, initial_state))
    if impl == "blocked" and needs_grad:
        raise ValueError("impl: the blocked path is inference-only; inputs require grad")
    fine = compute_chunk(shapes.K, shapes.V)
    if impl != "readable" and not needs_grad and chunk_size > fine:
        res = chunk_kda_impl(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, fine,
                             return_intermediate_states, impl="blocked", block_chunks=block_chunks)
        if not return_intermediate_states:
            return res
        return res[0], res[1], _coarser_chunk_states(res[2], offs, shapes.T, chunk_size, fine)
    B, HV, K, V, N = shapes.B, shapes.HV, shapes.K, shapes.V, shapes.N
    scale = K**-0.5 if scale is None else scale
    dt = compute_dtype(q, k, v, g, beta, initial_state)
    lay = chunk_layout(tuple(seq_offsets(shapes, offs)), shapes.T, chunk_size, q.device)
    if impl == "readable" or needs_grad:
        o, S, h = _chunk_kda_readable(q, k, v, g, beta, scale, initial_state, N, lay, dt)
    else:
        o, S, h = chunk_kda_blocked(q, k, v, g, beta, scale, initial_state, N, lay, dt,
                                    want_states=return_intermediate_states, block_chunks=block_chunks)
    final_state = S[lay.unsort] if output_final_state else None
    if not return_intermediate_states:
        return o, final_state
    h_seq = h[lay.from_seq_major]  # (sequence, chunk) order
    NCT = lay.total_chunks
    h_out = h_seq.view(B, NCT // B, HV, K, V) if offs is None else h_seq.unsqueeze(0)
    return o, final_state, h_out


@functools.lru_cache(maxsize=16)
def chunk_layout(seqs: tuple[tuple[int, int, int], ...], T: int, C: int, device: torch.device) -> ChunkLayout:
    """The :class:`ChunkLayout` of a pack, kept for the next calls (read-only once built): every KDA layer of
    an engine step lays out the same pack, and building one is a Python loop over its chunks. Built outside
    inference mode, so that a layout first made by the engine (under ``torch.inference_mode``) can index
    tensors that autograd saves in a later call."""
    with torch.inference_mode(False):
        return ChunkLayout(list(seqs), T, C, device)


def _equal_pack(offs, C: int) -> bool:
    """A varlen pack of two or more sequences of one length that is a multiple of the chunk: it is a
    regular ``[N, L]`` batch (the blocked path then reads strided views instead of gathering rows)."""
    if offs is None or len(offs) < 3:
        return False
    L = offs[1] - offs[0]
    return L % C == 0 and all(e - s == L for s, e in zip(offs, offs[1:]))


def _as_regular_batch(q, k, v, g, beta, scale, initial_state, output_final_state, offs, C,
                      return_intermediate_states, impl, block_chunks):
    """:func:`chunk_kda_impl` of an :func:`_equal_pack` as the ``[N, L]`` batch it is; outputs in the
    varlen layout (``o [1, N*L, HV, V]``, ``h [1, N*NT, HV, K, V]`` sequence 0's chunks first)."""
    N, L = len(offs) - 1, offs[1] - offs[0]
    as_batch = lambda t: t.view(N, L, *t.shape[2:])  # noqa: E731  [1, N*L, ...] -> [N, L, ...]
    res = chunk_kda_impl(as_batch(q), as_batch(k), as_batch(v), as_batch(g), as_batch(beta), scale,
                         initial_state, output_final_state, None, C, return_intermediate_states,
                         impl=impl, block_chunks=block_chunks)
    o = res[0].view(1, N * L, *res[0].shape[2:])
    if not return_intermediate_states:
        return o, res[1]
    return o, res[1], res[2].view(1, -1, *res[2].shape[2:])  # [N, NT, HV, K, V] -> [1, N*NT, HV, K, V]


def _coarser_chunk_states(h: torch.Tensor, offs, T: int, C: int, fine: int) -> torch.Tensor:
    """Chunk-start states computed in chunks of ``fine`` tokens (:func:`~kda_ref.ops.kda_chunk_blocked.compute_chunk`)
    -> those at the starts of ``C``-token chunks (every ``C / fine``-th), in the same layout
    (``[B, NT, HV, K, V]``, or ``[1, sum_n NT_n, HV, K, V]`` for a varlen pack)."""
    r = C // fine
    if offs is None:
        return h[:, ::r].contiguous()
    lens = [e - s for s, e in zip(offs, offs[1:])]
    walked = [-(-L // fine) for L in lens]  # each sequence's computed chunks
    starts = [sum(walked[:n]) for n in range(len(lens))]
    idx = [start + j * r for start, L in zip(starts, lens) for j in range(-(-L // C))]
    return h[:, torch.tensor(idx, dtype=torch.long, device=h.device)]
