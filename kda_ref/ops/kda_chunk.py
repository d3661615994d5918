"""KDA chunkwise-parallel form (WY representation / UT transform), in torch.

Article concepts: ``kda.chunk_form`` (how prefill runs KDA in parallel inside a chunk while the
state still moves strictly in order from chunk to chunk — "split into segments, keep the order",
section 1.3) and ``kda.chunk_checkpoints`` (the state at the start of every chunk falls out of the
computation for free: it is what the prefix cache saves as a checkpoint, SGLang's
``mamba_track`` of chunk-aligned states; fla ``chunk_kda(return_intermediate_states=True)``).

Math (Kimi Linear tech report, Eq. 6-9; fla ``fla/ops/kda/chunk_fwd.py::chunk_kda_fwd``). Inside a
chunk of C tokens with the gates cumsum'd per chunk, ``G_i = sum_{t<=i} g_t``:

    A_kk[i, j] = beta_i * sum_d k_i[d] k_j[d] exp(G_i[d] - G_j[d])      j < i
    A_qk[i, j] =  scale * sum_d q_i[d] k_j[d] exp(G_i[d] - G_j[d])      j <= i
    [W | U]    = (I + A_kk)^-1 Diag(beta) [exp(G) * K | V]              (UT transform)
    V'         = U - W S                                               (pseudo-values)
    O          = (scale Q * exp(G)) S + A_qk V'
    S_next     = Diag(exp(G_C)) S + (K * exp(G_C - G))^T V'

How this module stays fast and safe on a CPU:

* Everything inside a chunk is done for all chunks of all sequences at once with batched matmuls
  and one batched triangular solve; only the short state pass ``S -> S_next`` is a Python loop over
  chunk positions (batched over sequences and heads).
* ``exp(G_i - G_j)`` is never formed as ``exp(G_i) * exp(-G_j)`` over a whole chunk: with strong
  decay ``exp(-G_j)`` overflows. Instead the chunk is halved recursively; the lower-left block of
  each half-pair factorises around the anchor ``a`` = last position of the upper half,
  ``exp(G_i - G_a) * exp(G_a - G_j)``, and both factors are <= 1 for decaying gates. Only tiny
  diagonal blocks (4 x 4) compute the exponent per pair directly. This is the torch analogue of
  fla's sub-chunk anchoring in ``chunk_kda_fwd_intra``.
* Varlen batches: sequences are sorted by chunk count and chunks are laid out step-major, so the
  sequences still running at chunk step j are a prefix of the batch and their chunks a contiguous
  slice; no gathers in the loop.

Differentiable (used with autograd by the training entry point).
"""

from __future__ import annotations

import torch

from ._checks import check_kda_inputs, compute_dtype, seq_offsets

_DIRECT_BLOCK = 4  # diagonal blocks up to this size compute exp(G_i - G_j) per pair


def tril_decay_scores(x: torch.Tensor, y: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """``M[..., i, j] = sum_d x_i[d] y_j[d] exp(G_i[d] - G_j[d])`` for ``j <= i``, 0 above.

    ``x: [..., C, D]`` (may broadcast against ``y``), ``y, G: [..., C, D]``; C a power of two.
    Uses the anchored recursive factorisation described in the module docstring.
    """
    C = G.shape[-2]
    if C <= _DIRECT_BLOCK:
        diff = G[..., :, None, :] - G[..., None, :, :]  # [..., C(i), C(j), D]
        causal = torch.ones(C, C, dtype=torch.bool, device=G.device).tril()
        decay = diff.masked_fill(~causal[:, :, None], float("-inf")).exp()
        return (x[..., :, None, :] * decay * y[..., None, :, :]).sum(-1)
    h = C // 2
    # [..., C, D] -> [..., 2, h, D]: both halves recurse as one batch
    split = lambda t: t.unflatten(-2, (2, h))  # noqa: E731
    diag = tril_decay_scores(split(x), split(y), split(G))  # [..., 2, h, h]
    anchor = G[..., h - 1 : h, :]  # [..., 1, D]: last position of the upper half
    left = x[..., h:, :] * (G[..., h:, :] - anchor).exp()  # rows i >= h, factor <= 1
    right = y[..., :h, :] * (anchor - G[..., :h, :]).exp()  # cols j < h, factor <= 1
    lower = left @ right.transpose(-1, -2)  # [..., h, h]
    zeros = torch.zeros_like(lower)
    top = torch.cat([diag[..., 0, :, :], zeros], dim=-1)
    bottom = torch.cat([lower, diag[..., 1, :, :]], dim=-1)
    return torch.cat([top, bottom], dim=-2)  # [..., C, C]


# |G| bound under which exp(G) and exp(-G) are both finite and normal, with margin
_FACTOR_LIMIT = {torch.float32: 60.0, torch.float64: 600.0}


def inverse_decayed_keys(k: torch.Tensor, G: torch.Tensor):
    """``(k * exp(-G))^T`` as ``[..., K, C]`` and the (chunk, head) mask where it is safe to use.

    When every ``|G|`` of a (chunk, head) stays under a dtype limit, ``exp(-G)`` is finite and
    normal and ``exp(G_i - G_j) = exp(G_i) * exp(-G_j)`` loses nothing. The mask is ``None`` when
    every pair is safe (decided by one pass over G, the common case); elsewhere ``exp(-G)`` is
    clamped so the discarded values stay finite.
    """
    limit = _FACTOR_LIMIT[G.dtype]
    lo, hi = torch.aminmax(G)
    if bool(max(-lo, hi) <= limit):
        return (k * torch.exp(-G)).transpose(-1, -2), None
    ok = G.abs().amax(dim=(-1, -2)) <= limit  # [NCT, HV]
    return (k * torch.exp((-G).clamp(max=limit))).transpose(-1, -2), ok


def intra_chunk_scores(q, k, G, qg, kg, k_inv_t, ok, scale: float = 1.0):
    """``(A_qk, A_kk)`` of every chunk: decayed scores, ``[NCT, HV, C, C]`` each.

    ``A_qk[i, j] = scale * sum_d q_i k_j exp(G_i - G_j)`` for ``j <= i``; ``A_kk`` the same with k on
    both sides for ``j < i`` (no scale, beta not applied). ``qg = scale q exp(G)``, ``kg = k exp(G)`` and
    ``k_inv_t, ok`` from :func:`inverse_decayed_keys` are passed in because the caller needs them
    anyway.

    Fast path: each block is one matmul ``qg @ k_inv_t``. The anchor is the chunk start, so a score
    never depends on a gate after ``max(i, j)`` (causal, unlike a mid-chunk anchor). (Chunk, head)
    pairs whose gates decay too hard for that (``ok`` False) take the always-safe recursive path
    (:func:`tril_decay_scores`).
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


def _state_pass_inplace(S, U, W, alpha_last, k_decay_t, steps):
    """Same as :func:`_state_pass_autograd` for inference: writes ``h`` and ``v_new`` straight into
    preallocated buffers (``out=``), so nothing is concatenated afterwards."""
    N, HV, K, V = S.shape
    NCT, _, C, _ = U.shape
    h = torch.empty(NCT, HV, K, V, dtype=S.dtype, device=S.device)
    v_new = torch.empty(NCT, HV, C, V, dtype=S.dtype, device=S.device)
    for start, count in steps:
        sl = slice(start, start + count)
        h[sl] = S[:count]
        torch.baddbmm(U[sl].flatten(0, 1), W[sl].flatten(0, 1), h[sl].flatten(0, 1), alpha=-1,
                      out=v_new[sl].flatten(0, 1))
        S_new = torch.baddbmm((alpha_last[sl] * h[sl]).flatten(0, 1), k_decay_t[sl].flatten(0, 1),
                              v_new[sl].flatten(0, 1)).view(count, HV, K, V)
        S = S_new if count == N else torch.cat([S_new, S[count:]], dim=0)
    return h, v_new, S


class ChunkLayout:
    """Where every token of every sequence sits in the chunked, step-major layout.

    Sequences are sorted by their number of chunks (descending); chunk step j of every sequence
    that still has one is stored contiguously, so ``steps[j] = (start, count)`` describes the
    slice of chunks and the prefix of (sorted) sequences active at step j.
    """

    def __init__(self, seqs: list[tuple[int, int, int]], T: int, C: int, device: torch.device):
        self.C = C
        lengths = [e - s for _, s, e in seqs]
        self.n_chunks = [(L + C - 1) // C for L in lengths]
        self.order = sorted(range(len(seqs)), key=lambda n: -self.n_chunks[n])  # sorted pos -> seq
        max_nc = self.n_chunks[self.order[0]]
        self.steps: list[tuple[int, int]] = []
        # chunk id of (seq n, chunk c) in (sequence, chunk) order, for the returned checkpoints
        seq_major_base = [0]
        for nc in self.n_chunks:
            seq_major_base.append(seq_major_base[-1] + nc)
        self.total_chunks = seq_major_base[-1]
        token_index: list[int] = []  # flat token row for every slot of the chunk layout
        to_seq_major: list[int] = []
        start = 0
        for j in range(max_nc):
            active = [n for n in self.order if self.n_chunks[n] > j]
            self.steps.append((start, len(active)))
            start += len(active)
            for n in active:
                b, s, e = seqs[n]
                row0 = b * T + s + j * C
                for i in range(C):
                    token_index.append(row0 + i if s + j * C + i < e else -1)
                to_seq_major.append(seq_major_base[n] + j)
        self.token_index = torch.tensor(token_index, dtype=torch.long, device=device)
        # inverse: the layout slot of every real token, in token order
        valid = (self.token_index >= 0).nonzero().squeeze(1)
        self.token_slot = torch.empty(T * (seqs[-1][0] + 1), dtype=torch.long, device=device)
        self.token_slot[self.token_index[valid]] = valid
        # step-major chunk position -> (sequence, chunk) order position, and its inverse
        self.to_seq_major = torch.tensor(to_seq_major, dtype=torch.long, device=device)
        self.from_seq_major = torch.empty_like(self.to_seq_major)
        self.from_seq_major[self.to_seq_major] = torch.arange(len(to_seq_major), device=device)
        self.unsort = torch.empty(len(seqs), dtype=torch.long, device=device)
        self.unsort[torch.tensor(self.order, device=device)] = torch.arange(len(seqs), device=device)


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
    """
    if not isinstance(chunk_size, int) or chunk_size < 1 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size: must be a positive power of two, got {chunk_size!r}")
    shapes, offs = check_kda_inputs(q, k, v, g, beta, initial_state, cu_seqlens)
    B, T, H, HV, K, V, N = shapes.B, shapes.T, shapes.H, shapes.HV, shapes.K, shapes.V, shapes.N
    C = chunk_size
    scale = K**-0.5 if scale is None else scale
    dt = compute_dtype(q, k, v, g, beta, initial_state)
    dev = q.device
    seqs = seq_offsets(shapes, offs)
    lay = ChunkLayout(seqs, T, C, dev)
    NCT = lay.total_chunks
    # padding slots (-1) read the zero row appended at B*T
    idx = torch.where(lay.token_index < 0, B * T, lay.token_index)
    padded = NCT * C != B * T

    def to_chunks(x: torch.Tensor) -> torch.Tensor:
        # [B, T, h, D] -> rows [(B*T + 1) * h, D] (a zero row block appended for padding) ->
        # one gather straight into the contiguous chunk layout [NCT, HV, C, D]; grouped value
        # heads: value head hv reads q/k head hv // (HV / h)
        h, D = x.shape[2], x.shape[3]
        rows = x.reshape(B * T * h, D).to(dt)
        if padded:
            rows = torch.cat([rows, rows.new_zeros(h, D)])
        src = idx.view(NCT, 1, C) * h + (torch.arange(HV, device=dev) // (HV // h)).view(1, HV, 1)
        return rows.index_select(0, src.flatten()).view(NCT, HV, C, D)

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
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, g, beta, initial_state)):
        h, v_new, S = _state_pass_autograd(S, U, W, alpha_last, k_decay_t, lay.steps)
    else:
        h, v_new, S = _state_pass_inplace(S, U, W, alpha_last, k_decay_t, lay.steps)

    o = torch.baddbmm((A_qk @ v_new).flatten(0, 1), qg.flatten(0, 1), h.flatten(0, 1))  # [NCT*HV, C, V]
    # back to token order with one gather: token t, head hv sits at row (slot(t) // C * HV + hv) * C + slot(t) % C
    slot = lay.token_slot  # [B*T]
    src = ((slot // C).view(-1, 1) * HV + torch.arange(HV, device=dev).view(1, HV)) * C + (slot % C).view(-1, 1)
    o_final = o.reshape(NCT * HV * C, V).index_select(0, src.flatten()).view(B, T, HV, V).to(v.dtype)

    final_state = S[lay.unsort] if output_final_state else None
    if not return_intermediate_states:
        return o_final, final_state
    h_seq = h[lay.from_seq_major]  # (sequence, chunk) order
    h_out = h_seq.view(B, NCT // B, HV, K, V) if offs is None else h_seq.unsqueeze(0)
    return o_final, final_state, h_out
