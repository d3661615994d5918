"""Segment transition maps of KDA, and their prefix scan: the math of context parallelism (KCP).

Article concept ``cp.prefix_scan`` (``docs/article.md#s0``, the summary table's context-parallel row):
each rank's segment is an affine map ``S -> A S + B`` of its incoming state, with the decay before the
erase as in :func:`kda_ref.ops.recurrent_kda`; maps compose associatively, so the ranks' incoming states
are a prefix scan of their maps. :func:`segment_map_reference` builds a map token by token,
:func:`segment_map` from the chunk form's ``W``, ``U`` (fla ``fla/ops/cp/chunk_delta_h.py``; SGLang
``chunk_delta_h_cp.py::cp_local_transition``). :func:`pack` / :func:`unpack` use fla's ``hm = [S | M]``
layout, ``[HV, K, V + K]`` (SGLang's ``[H | M]``), which the ranks all-gather.
Design notes: ``docs/context_parallel.md#each-slice-is-an-affine-map``.
"""

from __future__ import annotations

import torch

from ..ops.decay_scores import inverse_decayed_keys
from ..ops.kda_chunk import intra_chunk_scores


def identity_map(HV: int, K: int, V: int, dtype=torch.float32, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(I, 0)``: the map of an empty segment."""
    A = torch.eye(K, dtype=dtype, device=device).expand(HV, K, K).clone()
    return A, torch.zeros(HV, K, V, dtype=dtype, device=device)


def compose(later: tuple[torch.Tensor, torch.Tensor], earlier: tuple[torch.Tensor, torch.Tensor]):
    """``later o earlier``: run ``earlier``'s segment, then ``later``'s. ``A [HV, K, K]``, ``B [HV, K, V]``."""
    (A2, B2), (A1, B1) = later, earlier
    return A2 @ A1, torch.baddbmm(B2, A2, B1)


def apply_map(m: tuple[torch.Tensor, torch.Tensor], S: torch.Tensor) -> torch.Tensor:
    """``A S + B`` for a state ``S [HV, K, V]``."""
    A, B = m
    return torch.baddbmm(B, A, S.to(A.dtype))


def pack(m: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``(A, B)`` -> one ``[HV, K, V + K]`` tensor in fla's ``hm`` layout ``[B | A]`` (``[S | M]``), what a
    rank sends."""
    A, B = m
    return torch.cat([B, A], dim=-1)


def unpack(hm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``hm [HV, K, V + K]`` (``[S | M]``) -> ``(A [HV, K, K], B [HV, K, V])``."""
    V = hm.shape[-1] - hm.shape[-2]
    return hm[..., V:], hm[..., :V]


def segment_map_reference(k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor):
    """The map of one segment, token by token: ``k [T, HV, K]`` (l2-normalised), ``v [T, HV, V]``,
    ``g [T, HV, K]`` (log decay), ``beta [T, HV]`` -> ``(A [HV, K, K], B [HV, K, V])`` in their dtype."""
    T, HV, K = k.shape
    A, B = identity_map(HV, K, v.shape[-1], dtype=k.dtype, device=k.device)
    eye = torch.eye(K, dtype=k.dtype, device=k.device)
    for t in range(T):
        kt, bt = k[t], beta[t][:, None, None]  # [HV, K], [HV, 1, 1]
        At = (eye - bt * kt[:, :, None] * kt[:, None, :]) * g[t].exp()[:, None, :]  # (I - b k k^T) Diag(alpha)
        Bt = bt * kt[:, :, None] * v[t][:, None, :]  # b k v^T
        A, B = compose((At, Bt), (A, B))
    return A, B


def chunk_maps(k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, chunk_size: int = 64):
    """Every chunk's map of one segment, from the UT transform: ``(M [NC, HV, K, K], b [NC, HV, K, V])``.

    The segment is padded to whole chunks with identity tokens (``k = 0``, ``g = 0``, ``beta = 0``)."""
    T, HV, K = k.shape
    C = chunk_size
    NC = max(1, -(-T // C))
    pad = NC * C - T

    def chunks(x: torch.Tensor) -> torch.Tensor:  # [T, HV, D] -> [NC, HV, C, D]
        x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])]) if pad else x
        return x.view(NC, C, HV, -1).transpose(1, 2)

    kc, vc, gc, bc = chunks(k), chunks(v), chunks(g), chunks(beta[..., None])  # bc [NC, HV, C, 1]
    G = gc.cumsum(dim=2)  # per-chunk cumulative log decay
    kg = kc * G.exp()
    k_inv_t, ok = inverse_decayed_keys(kc, G)
    _, A_kk = intra_chunk_scores(kc, kc, G, kg, kg, k_inv_t, ok)  # only A_kk is needed (q := k)
    eye = torch.eye(C, dtype=k.dtype, device=k.device).expand_as(A_kk)
    T_beta = torch.linalg.solve_triangular(A_kk * bc, eye, upper=False, unitriangular=True) * bc.transpose(-1, -2)
    W, U = T_beta @ kg, T_beta @ vc  # [NC, HV, C, K], [NC, HV, C, V]
    gamma = G[:, :, -1, :].exp()  # [NC, HV, K]: the decay over the whole chunk
    k_decay_t = (kc * (G[:, :, -1:, :] - G).exp()).transpose(-1, -2)  # [NC, HV, K, C]
    M = torch.diag_embed(gamma) - k_decay_t @ W  # S -> Diag(gamma) S - k_decay^T W S ...
    return M, k_decay_t @ U  # ... + k_decay^T U


def segment_map(k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, chunk_size: int = 64):
    """The map ``(A [HV, K, K], B [HV, K, V])`` of one segment, from its chunks' maps (see
    :func:`chunk_maps`), composed in order. Same arguments as :func:`segment_map_reference`."""
    M, b = chunk_maps(k, v, g, beta, chunk_size)
    A, B = M[0], b[0]
    for c in range(1, M.shape[0]):
        A, B = compose((M[c], b[c]), (A, B))
    return A, B


def exclusive_scan(maps: list[tuple[torch.Tensor, torch.Tensor]], initial: torch.Tensor | None = None):
    """The incoming state of every segment: ``S_in[0] = initial`` (zeros when ``None``), ``S_in[r] =
    A_{r-1} S_in[r-1] + B_{r-1}``; and the state after the last segment. Returns ``(S_in list, final)``.

    This is the fold every rank runs after the all-gather of the ranks' maps (fla's merge of
    ``pre_num_ranks`` predecessors; SGLang replays the chain over all ranks so every rank also gets
    the global final state). A log-step (Hillis-Steele) scan would compose maps pairwise in
    ``log2 R`` rounds of point-to-point exchange, each rank sending one ``[HV, K, V + K]`` map per
    round, at the price of composing ``K x K`` matrices instead of applying them to a state: with
    a handful of ranks the all-gather and an ``R``-step fold are cheaper (``docs/context_parallel.md``).
    """
    A0, B0 = maps[0]
    S = torch.zeros_like(B0) if initial is None else initial.to(B0.dtype)
    incoming = []
    for m in maps:
        incoming.append(S)
        S = apply_map(m, S)
    return incoming, S
