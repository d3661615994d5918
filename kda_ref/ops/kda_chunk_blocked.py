"""The chunk form for inference, walked in cache-sized blocks of chunks (the fast CPU path).

Same math as the readable :mod:`kda_ref.ops.kda_chunk` (article concept ``kda.chunk_form``; fla
``fla/ops/kda/chunk_fwd.py::chunk_kda_fwd``), arranged the way fla's fused kernels arrange it: every
stage (gates, intra-chunk scores, UT transform, state pass, output) runs on a block of ``block_chunks``
chunks while it is still in cache. Per-channel factorised scores, the steep channels apart (fla's
counterpart: ``fla/ops/kda/chunk_intra.py::chunk_kda_fwd_intra``). Inference only (no autograd);
``chunk_kda`` routes here when no gradient is needed.

Design notes: ``docs/kda.md#the-chunk-form-in-torch``; measured in ``docs/benchmarks.md``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .chunk_layout import ChunkLayout
from .decay_scores import FACTOR_LIMIT, channel_range, decay_exp, wide_decay_scores

# The blocked path computes in chunks of at most this many tokens, whatever chunk the caller lays out: the
# chunk-start states it returns are then every (C / compute_chunk)-th it computed. fla's secondary chunking
# splits a 64-token chunk into 16-token sub-chunks for the intra-chunk part and keeps the 64-token state walk
# (on a GPU the walk is the sequential part); on this CPU a walk in 32-token steps was faster in every case
# measured at K = V = 128 (2,048 tokens, one thread: 35 -> 31 ms at H = 4; 28 -> 9 ms with gates that decay
# hard, which a 64-token chunk cannot factorise), the quadratic work per chunk halving. Narrower heads
# (:func:`compute_chunk`) walk 16-token steps. docs/benchmarks.md.
COMPUTE_CHUNK = 32
NARROW_COMPUTE_CHUNK = 16  # heads with K, V <= NARROW_HEAD
NARROW_HEAD = 64


def compute_chunk(K: int, V: int) -> int:
    """The chunk length the blocked path walks for heads of ``K x V``: :data:`COMPUTE_CHUNK`, or
    :data:`NARROW_COMPUTE_CHUNK` when both are at most :data:`NARROW_HEAD`. Why, and the measurements:
    ``docs/kda.md#the-chunk-form-in-torch``."""
    return NARROW_COMPUTE_CHUNK if max(K, V) <= NARROW_HEAD else COMPUTE_CHUNK


BLOCK_BYTES = 1 << 20  # a block tensor's size: 8 chunks x 4 heads x 64 tokens x 128 fp32, where it was measured


def block_chunks_for(HV: int, C: int, K: int, V: int, dt: torch.dtype) -> int:
    """Chunks per block so that one ``[n, HV, C, max(K, V)]`` block tensor fills :data:`BLOCK_BYTES`: 16
    chunks of 32 tokens at H = 4, K = V = 128, fp32 (8 of 64 where the block size was measured,
    ``docs/benchmarks.md``); more for narrower heads, where fewer, larger blocks mean fewer torch calls."""
    per_chunk = HV * C * max(K, V) * torch.empty(0, dtype=dt).element_size()
    return max(1, BLOCK_BYTES // per_chunk)


class _Sources:
    """Where a block's q / k / v / g / beta rows come from, in the chunk layout ``[n, HV, C, D]``.

    ``regular``: strided views ``[steps, B, H, GQ, C, D]`` of the caller's tensors (``GQ = HV / H``); buffers
    are viewed with the same 6-d shape (:meth:`shaped`). Otherwise (varlen or padded batches) token rows with
    a zero row for padding slots, each block gathered with one ``index_select``.
    """

    def __init__(self, q, k, v, g, beta, lay: ChunkLayout, B: int, T: int, HV: int, dt: torch.dtype):
        self.B, self.T, self.HV, self.C = B, T, HV, lay.C
        self.H = q.shape[2]
        self.GQ = HV // self.H
        self.dt = dt
        self.regular = lay.regular
        self.lay = lay
        q, k, v, g, beta = (x.to(dt) for x in (q, k, v, g, beta))  # no copy unless half precision
        if self.regular:
            NC, C, H, GQ = T // self.C, self.C, self.H, self.GQ
            self.views = {
                # [B, T, h, D] -> [NC, B, H, GQ, C, D]; q/k broadcast over the GQ value heads of a group
                "q": q.view(B, NC, C, H, 1, -1).expand(-1, -1, -1, -1, GQ, -1).permute(1, 0, 3, 4, 2, 5),
                "k": k.view(B, NC, C, H, 1, -1).expand(-1, -1, -1, -1, GQ, -1).permute(1, 0, 3, 4, 2, 5),
                "v": v.view(B, NC, C, H, GQ, -1).permute(1, 0, 3, 4, 2, 5),
                "beta": beta.view(B, NC, C, H, GQ, 1).permute(1, 0, 3, 4, 2, 5),
            }
            self.g_tok = g.reshape(B, NC, C, HV * g.shape[3])  # token layout, per chunk [C, HV*K]
        else:
            # token rows [(B*T + 1) * h, D]: the last h rows are zeros, read by padding slots
            self.rows = {}
            for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta.unsqueeze(-1))):
                h, D = x.shape[2], x.shape[3]
                self.rows[name] = (torch.cat([x.reshape(B * T * h, D), x.new_zeros(h, D)]), h)

    def shaped(self, buf: torch.Tensor, n: int) -> torch.Tensor:
        """The first ``n`` chunks of a chunk-layout buffer, in the shape the sources have."""
        if not self.regular:
            return buf[:n]
        return buf[:n].view(n // self.B, self.B, self.H, self.GQ, self.C, buf.shape[-1])

    def get(self, name: str, c0: int, c1: int, j0: int, j1: int) -> torch.Tensor:
        """Chunks ``[c0, c1)`` (= steps ``[j0, j1)``) of one input, as a view or a gathered copy."""
        if self.regular:
            return self.views[name][j0:j1]
        rows, h = self.rows[name]
        n = c1 - c0
        tok = self.lay.token_index[c0 * self.C : c1 * self.C].view(n, 1, self.C)
        tok = torch.where(tok < 0, self.B * self.T, tok)  # padding -> the zero rows
        heads = torch.arange(self.HV, device=rows.device) // (self.HV // h)  # value head -> q/k head
        return rows.index_select(0, (tok * h + heads.view(1, self.HV, 1)).flatten()).view(n, self.HV, self.C, -1)

    def gate_cumsum(self, out: torch.Tensor, c0: int, c1: int, j0: int, j1: int) -> None:
        """``G`` (per-chunk cumulative log decay) of chunks ``[c0, c1)`` into ``out[:n]``: one ``cumsum`` over
        each chunk's tokens, read through the layout change (88 against 135 us for a matmul by a lower
        triangle of ones and a copy, 8 x 128 tokens, H = 2, K = 64, docs/benchmarks.md)."""
        n = c1 - c0
        if self.regular:
            steps = j1 - j0
            # token layout [B, steps, C, HV, K] read as the chunk layout [steps, B, HV, C, K]
            g = self.g_tok[:, j0:j1].view(self.B, steps, self.C, self.HV, -1).permute(1, 0, 3, 2, 4)
            torch.cumsum(g, dim=3, out=out[:n].view(steps, self.B, self.HV, self.C, -1))
        else:
            torch.cumsum(self.get("g", c0, c1, j0, j1), dim=-2, out=out[:n])


def chunk_kda_blocked(q, k, v, g, beta, scale: float, initial_state, N: int, lay: ChunkLayout, dt: torch.dtype,
                      want_states: bool, block_chunks: int | None = None):
    """Chunkwise KDA over validated inputs; returns ``(o, final_states_sorted, h_or_None)``.

    ``lay`` is the step-major :class:`~kda_ref.ops.chunk_layout.ChunkLayout`; the final states come
    back in its sorted sequence order and ``h`` (when ``want_states``) in its step-major chunk
    order, exactly as the readable path produces them, so :func:`~kda_ref.ops.kda_chunk.chunk_kda`
    reorders both the same way.
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    dev = q.device
    src = _Sources(q, k, v, g, beta, lay, B, T, HV, dt)
    blocks = lay.blocks(block_chunks or block_chunks_for(HV, lay.C, K, V, dt))
    mx = max(c1 - c0 for c0, c1, _, _ in blocks)
    ws = _Workspace(mx, HV, lay.C, K, V, lay.total_chunks, want_states, dt, dev)
    S = torch.zeros(N, HV, K, V, dtype=dt, device=dev)  # the carry, sequences in sorted order
    if initial_state is not None:
        S.copy_(initial_state[torch.tensor(lay.order, device=dev)])
    out = _Output(lay, B, T, HV, V, v.dtype, dev)

    for c0, c1, j0, j1 in blocks:
        n = c1 - c0
        blk = _block_operands(src, ws, c0, c1, j0, j1)  # gates, intra-chunk scores, UT transform
        # the sequential part: chunk steps of this block, each chunk's q exp(G) h read while h is in cache
        vnb, obb = ws.vn[:n], ws.ob[:n]
        _state_pass(S, ws.h_all[c0:c1] if want_states else None, blk, vnb, obb, lay.steps[j0:j1], c0)
        # o = scale (q exp(G) h + A_qk V'), back to token order
        obb.flatten(0, 1).baddbmm_(blk.A_qk.flatten(0, 1), vnb.flatten(0, 1), beta=scale, alpha=scale)
        out.write(obb, c0, c1, j0, j1)
    return out.result(), S, ws.h_all


class _Workspace:
    """Per-block work buffers, allocated once and reused by every block (a block of ``n`` chunks
    uses their first ``n`` rows), the chunk states ``h`` and the constant ``[C, C]`` matrices."""

    def __init__(self, mx: int, HV: int, C: int, K: int, V: int, total_chunks: int, want_states: bool,
                 dt: torch.dtype, dev: torch.device):
        def buf(*shape):
            return torch.empty(mx, *shape, dtype=dt, device=dev)

        self.K, self.V = K, V
        self.G, self.qg, self.kg, self.kd = (buf(HV, C, K) for _ in range(4))
        # the shifted exponent, its exp and the factors of the scores (_factors)
        self.e, self.ee, self.lq, self.lk, self.kinv = (buf(HV, C, K) for _ in range(5))
        self.vbeta, self.U, self.vn, self.ob = (buf(HV, C, V) for _ in range(4))
        self.W = buf(HV, C, K)
        self.bcol = buf(HV, C, 1)
        self.A_qk, self.A_kk = buf(HV, C, C), buf(HV, C, C)
        # every chunk's start state, kept only when the caller wants them
        self.h_all = torch.empty(total_chunks, HV, K, V, dtype=dt, device=dev) if want_states else None
        self.upper = ~torch.ones(C, C, dtype=torch.bool, device=dev).tril()
        self.eye = torch.eye(C, dtype=dt, device=dev).expand(mx, HV, C, C)
        self.limit = FACTOR_LIMIT[dt]


class _BlockOperands(NamedTuple):
    """What the state pass and the output of one block read (views of the :class:`_Workspace`)."""

    A_qk: torch.Tensor  # [n, HV, C, C] intra-chunk scores, lower incl. the diagonal, scale not applied
    W: torch.Tensor  # [n, HV, C, K] Tm (beta k exp(G))
    U: torch.Tensor  # [n, HV, C, V] Tm (beta v)
    qg: torch.Tensor  # [n, HV, C, K] q exp(G)
    kd: torch.Tensor  # [n, HV, C, K] k exp(G_C - G)
    alpha: torch.Tensor  # [n, HV, K, 1] exp(G_C), the decay over each chunk


def _block_operands(src: _Sources, ws: _Workspace, c0: int, c1: int, j0: int, j1: int) -> _BlockOperands:
    """Gates, intra-chunk scores and UT transform of chunks ``[c0, c1)`` (= steps ``[j0, j1)``),
    the part of a block that is parallel over its chunks. Writes into the first rows of ``ws``."""
    n, HV, C, V = c1 - c0, src.HV, src.C, ws.V
    sh = lambda b: src.shaped(b, n)  # noqa: E731
    get = lambda name: src.get(name, c0, c1, j0, j1)  # noqa: E731
    src.gate_cumsum(ws.G, c0, c1, j0, j1)  # G, the per-chunk cumulative log decay
    q_src, k_src, beta_src = get("q"), get("k"), get("beta")
    bcb = ws.bcol[:n]
    sh(bcb).copy_(beta_src)
    vbetab = torch.mul(get("v"), beta_src, out=sh(ws.vbeta)).view(n, HV, C, V)
    f = _factors(ws, n, sh, q_src, k_src, bcb)
    Aq = torch.matmul(f.left_q, f.right.transpose(-1, -2), out=ws.A_qk[:n])  # scale not applied yet
    Ak = torch.matmul(f.left_k, f.right.transpose(-1, -2), out=ws.A_kk[:n])  # beta on its rows
    if f.hard.shape[1]:
        _add_hard_channels(ws, n, sh, q_src, k_src, bcb, f.hard)
    Aq.masked_fill_(ws.upper, 0.0)
    T_inv = torch.linalg.solve_triangular(Ak, ws.eye[:n], upper=False, unitriangular=True)
    Wb = torch.matmul(T_inv, ws.kg[:n], out=ws.W[:n])
    Ub = torch.matmul(T_inv, vbetab, out=ws.U[:n])
    return _BlockOperands(Aq, Wb, Ub, ws.qg[:n], ws.kd[:n], f.alpha)


class _Factors(NamedTuple):
    """The per-channel factors of a block's scores (views of the :class:`_Workspace`)."""

    left_q: torch.Tensor  # [n, HV, C, K] q exp(G + s)
    left_k: torch.Tensor  # [n, HV, C, K] beta k exp(G + s)
    right: torch.Tensor  # [n, HV, C, K] k exp(-G - s), 0 on the hard channels
    hard: torch.Tensor  # [n*HV, h] the channels no shift fits (:func:`hard_channels`), maybe h = 0
    alpha: torch.Tensor  # [n, HV, K, 1] exp(G_C)


def _factors(ws: _Workspace, n: int, sh, q_src, k_src, bcb) -> _Factors:
    """The scores' factors and, from the same exponential, ``q exp(G)``, ``beta k exp(G)`` and ``k exp(G_C - G)``
    (into ``ws.qg``, ``ws.kg``, ``ws.kd``): one ``exp`` pass over the block instead of three.

    Per channel a shift ``s``: ``0`` where ``|G| <= L`` (:data:`~kda_ref.ops.decay_scores.FACTOR_LIMIT`), the
    centring shift where the range is at most ``2L``; the rest (:func:`hard_channels`) are left to
    :func:`_add_hard_channels`. Design notes: ``docs/kda.md#the-chunk-form-in-torch``.
    """
    Gb, limit = ws.G[:n], ws.limit
    HV, C, K = Gb.shape[1:]
    lo, hi = channel_range(Gb)  # [n, HV, 1, K] each channel's range over the chunk
    near = (lo >= -limit) & (hi <= limit)  # s = 0 works
    G_C = Gb[:, :, -1:, :]  # [n, HV, 1, K] each chunk's total
    alpha = decay_exp(G_C.transpose(-1, -2).contiguous())  # [n, HV, K, 1] exp(G_C)
    anchored = bool(near.all())  # every channel: the factors are q exp(G) and beta k exp(G) themselves
    if anchored:
        e = Gb
    else:
        shift = torch.where(near, 0.0, (lo + hi) * -0.5)  # centre the range: |G + s| <= L where it is at most 2L
        e = torch.add(Gb, shift, out=ws.e[:n]).clamp_(-limit, limit)  # G + s, finite on the hard channels too
    ee = torch.exp(e, out=ws.ee[:n])
    right = torch.div(k_src, sh(ee), out=sh(ws.kinv)).view(n, HV, C, K)
    left_q = torch.mul(sh(ee), q_src, out=sh(ws.qg if anchored else ws.lq)).view(n, HV, C, K)
    left_k = torch.mul(sh(ee), k_src, out=sh(ws.kg if anchored else ws.lk)).view(n, HV, C, K).mul_(bcb)
    if anchored:
        torch.mul(right, ee[:, :, -1:, :], out=ws.kd[:n])
        return _Factors(left_q, left_k, right, torch.empty(n * HV, 0, dtype=torch.long, device=Gb.device), alpha)
    unshift = torch.exp(shift.neg())  # [n, HV, 1, K]: exp(-s) <= 1
    torch.mul(left_q, unshift, out=ws.qg[:n])
    torch.mul(left_k, unshift, out=ws.kg[:n])
    torch.mul(right, decay_exp(G_C + shift), out=ws.kd[:n])
    hard = hard_channels(~(near | (hi - lo <= 2 * limit)).squeeze(-2), lo.squeeze(-2), hi.squeeze(-2))
    right.flatten(0, 1).scatter_(-1, hard.unsqueeze(1).expand(-1, C, -1), 0.0)  # [n*HV, C, h] zeros
    return _Factors(left_q, left_k, right, hard, alpha)


class _Output:
    """Where the blocks' outputs go: straight into ``[B, T, HV, V]`` for a regular batch (through a
    per-chunk view), else into token rows ``[B*T*HV, V]`` plus one dump row for the padding slots."""

    def __init__(self, lay: ChunkLayout, B: int, T: int, HV: int, V: int, dtype: torch.dtype, dev: torch.device):
        self.lay, self.B, self.T, self.HV, self.V = lay, B, T, HV, V
        if lay.regular:
            self.out = torch.empty(B, T, HV, V, dtype=dtype, device=dev)
            self.out_chunks = self.out.view(B, T // lay.C, lay.C, HV, V)
        else:
            self.out_rows = torch.empty(B * T * HV + 1, V, dtype=dtype, device=dev)

    def write(self, ob: torch.Tensor, c0: int, c1: int, j0: int, j1: int) -> None:
        """Store the output ``[n, HV, C, V]`` of chunks ``[c0, c1)`` (= steps ``[j0, j1)``) in token order."""
        C = self.lay.C
        if self.lay.regular:
            steps = j1 - j0
            self.out_chunks[:, j0:j1].copy_(ob.view(steps, self.B, self.HV, C, self.V).permute(1, 0, 3, 2, 4))
        else:
            rows = self.lay.out_rows(c0, c1, self.HV)
            self.out_rows.index_copy_(0, rows, ob.view((c1 - c0) * self.HV * C, self.V).to(self.out_rows.dtype))

    def result(self) -> torch.Tensor:
        """``o [B, T, HV, V]``."""
        return self.out if self.lay.regular else self.out_rows[:-1].view(self.B, self.T, self.HV, self.V)


def _state_pass(S, hb, blk: _BlockOperands, vn, ob, steps, c0):
    """Walk one block's chunk steps in place on the carry ``S`` (sorted sequences; the ones active at a step
    are a prefix): ``v' = U - W S``, the output's inter-chunk part ``q exp(G) S`` into ``ob``, then
    ``S <- alpha S + kd^T v'``. ``hb``: where each step's start state is kept (``want_states``), or None.

    The state never leaves ``S``, so it stays in cache from one step to the next; fla's ``chunk_kda_fwd``
    instead writes every chunk's start state in its walk (``chunk_gated_delta_rule_fwd_h``) and computes
    the outputs afterwards in a kernel parallel over chunks (``chunk_gla_fwd_o_gk``), the order a GPU wants.
    """
    m = len(steps)
    counts = [count for _, count in steps]
    # every per-step tensor below must be a VIEW of its block buffer (writes through vns and obs land
    # there); contiguous row slices guarantee that
    if counts.count(counts[0]) == m:
        # every sequence runs through the whole block: per-step views in one unbind per buffer
        # [n, HV, ...] -> m x [count * HV, ...]
        per_step = lambda t: t.reshape(m, -1, *t.shape[2:]).unbind(0)  # noqa: E731
    else:
        per_step = lambda t: [t[s - c0 : s - c0 + c].flatten(0, 1) for s, c in steps]  # noqa: E731
    Us, Ws, vns, als, qgs, obs = (per_step(t) for t in (blk.U, blk.W, vn, blk.alpha, blk.qg, ob))
    hs = per_step(hb) if hb is not None else None
    kds = [t.transpose(-1, -2) for t in per_step(blk.kd)]
    for i in range(m):
        h = S[: counts[i]].flatten(0, 1)  # [count * HV, K, V]: the sequences still running
        if hs is not None:
            hs[i].copy_(h)
        torch.baddbmm(Us[i], Ws[i], h, alpha=-1, out=vns[i])
        torch.matmul(qgs[i], h, out=obs[i])
        h.mul_(als[i]).baddbmm_(kds[i], vns[i])


def hard_channels(hard: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """The channel ids of the ``hard`` ones ``[n, HV, K]`` (no shift factorises them) of every (chunk, head),
    as ``[n*HV, h]``, ``h`` the largest count of any pair; a pair with fewer fills its row with its
    steepest other channels (``hi - lo``), which :func:`_add_hard_channels` then computes exactly as well."""
    h = int(hard.sum(-1).max())
    key = (hi - lo).masked_fill(hard, float("inf")).flatten(0, 1)  # [n*HV, K]: the hard channels first
    return key.topk(h, dim=-1).indices  # [n*HV, h]


def _add_hard_channels(ws: _Workspace, n: int, sh, q_src, k_src, bcb, hard: torch.Tensor) -> None:
    """The ``hard`` channels (:func:`hard_channels`), left out of the factorised matmul and of the shifted
    products, computed exactly over those channels alone: their scores added to ``A_qk`` / ``A_kk``
    (:func:`~kda_ref.ops.decay_scores.wide_decay_scores`: fp64 factors, or the anchored recursion; a score
    is a sum over channels, so the two parts add up to the whole), and their ``q exp(G)``, ``beta k exp(G)``
    and ``k exp(G_C - G)`` written over what the shifted products left there."""
    G = ws.G[:n]
    _, HV, C, K = G.shape
    h = hard.shape[1]
    idx = hard.view(n, HV, 1, h).expand(-1, -1, C, -1).contiguous()  # [n, HV, C, h]
    # q and k straight from their sources (strided views of the caller's tensors, or gathered rows)
    qh, kh = (src.gather(-1, sh(idx)).view(n, HV, C, h) for src in (q_src, k_src))
    Gh = G.gather(-1, idx)
    flat = lambda t: t.flatten(0, 1)  # noqa: E731  [n, HV, C, h] -> [n*HV, C, h]
    scores = wide_decay_scores(torch.stack([flat(qh), flat(kh)]), flat(kh), flat(Gh))  # [2, n*HV, C, C]
    ws.A_qk[:n].flatten(0, 1).add_(scores[0])
    ws.A_kk[:n].flatten(0, 1).addcmul_(scores[1], bcb.flatten(0, 1))
    eG = decay_exp(Gh)
    ws.qg[:n].scatter_(-1, idx, qh * eG)
    ws.kg[:n].scatter_(-1, idx, kh * eG * bcb)
    ws.kd[:n].scatter_(-1, idx, kh * decay_exp(Gh[:, :, -1:, :] - Gh))
