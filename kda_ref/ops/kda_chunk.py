"""KDA chunkwise-parallel form (WY representation / UT transform), in torch.

Article concepts: ``kda.chunk_form`` (how prefill runs KDA in parallel inside a chunk while the
state still moves strictly in order from chunk to chunk — "split into segments, keep the order",
section 1.3) and ``kda.chunk_checkpoints`` (the state at the start of every chunk falls out of the
computation for free: it is what the prefix cache saves as a checkpoint, SGLang's
``mamba_track`` of chunk-aligned states; fla ``chunk_kda(return_intermediate_states=True)``).

Math (Kimi Linear tech report, Eq. 6-9; fla ``fla/ops/kda/chunk_fwd.py::chunk_kda_fwd``). Inside a
chunk of C tokens with the gates cumsum'd per chunk, ``G_i = sum_{t<=i} g_t``:

    A_kk[i, j] = beta_i * sum_d k_i[d] k_j[d] exp(G_i[d] - G_j[d])      j < i
    A_qk[i, j] =          sum_d q_i[d] k_j[d] exp(G_i[d] - G_j[d])      j <= i
    [W | U]    = (I + A_kk)^-1 Diag(beta) [exp(G) * K | V]              (UT transform)
    V'         = U - W S                                               (pseudo-values)
    O          = (scale Q * exp(G)) S + scale A_qk V'
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


def intra_chunk_scores(x: torch.Tensor, y: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """Causal decayed scores of every chunk, ``[..., C, C]`` (see :func:`tril_decay_scores`).

    Fast path, per (chunk, head): when every ``|G|`` of the chunk stays under a dtype limit,
    ``exp(G_i - G_j) = exp(G_i) * exp(-G_j)`` with both factors finite and normal, so the whole
    block is one matmul. The anchor is the chunk start, so a score never depends on a gate after
    ``max(i, j)`` (causal, unlike a mid-chunk anchor). Chunks whose gates decay too hard for that
    take the always-safe recursive path.
    ``x: [S, NCT, HV, C, D]`` (S stacked operands), ``y, G: [NCT, HV, C, D]``.
    """
    limit = _FACTOR_LIMIT[G.dtype]
    C = G.shape[-2]
    ok = G.abs().amax(dim=(-1, -2)) <= limit  # [NCT, HV]
    causal = torch.ones(C, C, dtype=torch.bool, device=G.device).tril()
    if bool(ok.all()):
        eG = G.exp()
        return ((x * eG) @ (y / eG).transpose(-1, -2)).masked_fill(~causal, 0.0)
    if not bool(ok.any()):
        return tril_decay_scores(x, y, G)
    # mixed: fast for the easy (chunk, head) pairs, recursive for the hard ones
    flat = lambda t: t.flatten(-4, -3)  # noqa: E731  [..., NCT, HV, C, D] -> [..., NCT*HV, C, D]
    xf, yf, Gf, okf = flat(x), flat(y), flat(G), ok.flatten()
    easy, hard = okf.nonzero().squeeze(1), (~okf).nonzero().squeeze(1)
    eG = Gf[easy].exp()
    out_easy = ((xf[..., easy, :, :] * eG) @ (yf[easy] / eG).transpose(-1, -2)).masked_fill(~causal, 0.0)
    out_hard = tril_decay_scores(xf[..., hard, :, :], yf[hard], Gf[hard])
    out = torch.cat([out_easy, out_hard], dim=-3)
    order = torch.cat([easy, hard]).argsort()
    return out[..., order, :, :].unflatten(-3, G.shape[:2])


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

    def to_chunks(x: torch.Tensor, heads_from: int) -> torch.Tensor:
        # [B, T, h, D] -> [B*T + 1, h, D] (zero row appended for padding) -> [NCT, C, h, D]
        flat = x.reshape(B * T, *x.shape[2:]).to(dt)
        flat = torch.cat([flat, flat.new_zeros(1, *flat.shape[1:])], dim=0)
        out = flat[idx].unflatten(0, (NCT, C))
        if heads_from != HV:  # grouped value heads: q/k head h serves value heads h*G .. h*G+G-1
            out = out.repeat_interleave(HV // heads_from, dim=2)
        return out.transpose(1, 2)  # [NCT, HV, C, D]

    qc, kc, vc, gc = to_chunks(q, H), to_chunks(k, H), to_chunks(v, HV), to_chunks(g, HV)
    bc = to_chunks(beta.unsqueeze(-1), HV)  # [NCT, HV, C, 1]; padding rows have beta = 0
    G = gc.cumsum(dim=2)  # per-chunk cumulative log decay, [NCT, HV, C, K]

    # intra-chunk scores for q and k together: [2, NCT, HV, C, C]
    scores = intra_chunk_scores(torch.stack([qc, kc]), kc, G)
    A_qk = scores[0]
    A_kk = scores[1].tril(-1) * bc  # strictly lower, row i scaled by beta_i

    # UT transform: (I + A_kk) [W | U] = Diag(beta) [exp(G) k | v]
    rhs = bc * torch.cat([kc * G.exp(), vc], dim=-1)  # [NCT, HV, C, K + V]
    WU = torch.linalg.solve_triangular(A_kk, rhs, upper=False, unitriangular=True)
    W, U = WU[..., :K], WU[..., K:]

    g_last = G[:, :, -1:, :]  # [NCT, HV, 1, K]
    k_decay = kc * (g_last - G).exp()  # [NCT, HV, C, K]: k_i * exp(G_C - G_i) <= k_i
    alpha_last = g_last.squeeze(2).exp().unsqueeze(-1)  # [NCT, HV, K, 1]

    # the only sequential part: walk chunk steps, sequences sorted so the active ones are a prefix
    S = torch.zeros(N, HV, K, V, dtype=dt, device=dev)
    if initial_state is not None:
        S = S + initial_state.to(dt)
    S = S[torch.tensor(lay.order, device=dev)]
    h_steps, vnew_steps = [], []
    for start, count in lay.steps:
        sl = slice(start, start + count)
        S_act = S[:count]
        h_steps.append(S_act)
        v_new = U[sl] - W[sl] @ S_act  # [count, HV, C, V]
        vnew_steps.append(v_new)
        S_new = alpha_last[sl] * S_act + k_decay[sl].transpose(-1, -2) @ v_new
        S = S_new if count == N else torch.cat([S_new, S[count:]], dim=0)
    h = torch.cat(h_steps, dim=0)  # [NCT, HV, K, V], step-major
    v_new = torch.cat(vnew_steps, dim=0)  # [NCT, HV, C, V]

    o = (qc * G.exp()) @ h + A_qk @ v_new  # [NCT, HV, C, V]
    o = o * scale
    # [NCT, HV, C, V] -> [NCT*C, HV, V] -> token order [B*T, HV, V] -> [B, T, HV, V]
    o_rows = o.transpose(1, 2).reshape(NCT * C, HV, V)
    valid = lay.token_index >= 0
    out = torch.zeros(B * T, HV, V, dtype=dt, device=dev)
    out = out.index_copy(0, lay.token_index[valid], o_rows[valid])
    o_final = out.view(B, T, HV, V).to(v.dtype)

    final_state = S[lay.unsort] if output_final_state else None
    if not return_intermediate_states:
        return o_final, final_state
    h_seq = h[lay.from_seq_major]  # (sequence, chunk) order
    h_out = h_seq.view(B, NCT // B, HV, K, V) if offs is None else h_seq.unsqueeze(0)
    return o_final, final_state, h_out
