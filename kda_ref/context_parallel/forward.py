"""One rank's share of a context-parallel prefill through the whole hybrid model.

Every sequence is split contiguously over the ``R`` ranks (:class:`CPLayout`; SGLang's
``build_cp_shard_layout``: ``lo = L * r // R``); a rank holding no tokens of a sequence is a normal
case, and the sequence's logits come from the rank of :meth:`CPLayout.last_rank`. KDA layers
all-gather conv halos (SGLang ``exchange_kda_conv_halo``, fla ``CausalConv1dFunctionCP``) and maps,
folded by the ``scan`` argument (article concept ``cp.prefix_scan``); MLA layers all-gather latent
rows; the rest is per token. The math is the model's, through the layers' own pieces.
Design notes: ``docs/context_parallel.md#one-ranks-forward``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..model import HybridModel
from ..model.layer_state import BoundaryState
from ..model.kda_layer import conv_windows
from ..model.model import LayerMode
from ..ops import chunk_kda
from .maps import exclusive_scan, identity_map, pack, segment_map, unpack


@dataclass
class CPLayout:
    """``seq_lens[n]`` new tokens of sequence n split over ``world_size`` ranks, contiguously; with
    ``align = C`` every cut falls on a multiple of ``C`` (so the chunk starts of each slice are the
    chunk starts of the whole run: the prefix cache's checkpoint boundaries)."""

    seq_lens: list[int]
    world_size: int
    align: int = 1

    def _cut(self, n: int, r: int) -> int:
        L, R = self.seq_lens[n], self.world_size
        return L if r >= R else min(L, (L * r // R + self.align // 2) // self.align * self.align)  # nearest multiple

    def bounds(self, n: int, r: int) -> tuple[int, int]:
        return self._cut(n, r), self._cut(n, r + 1)

    def shard_lens(self, r: int) -> list[int]:
        return [hi - lo for lo, hi in (self.bounds(n, r) for n in range(len(self.seq_lens)))]

    def last_rank(self, n: int) -> int:
        """The rank holding sequence n's last token: where its next-token logits are computed. With
        ``align = 1`` it is always rank ``R - 1``; with chunk-aligned cuts the later ranks may hold
        nothing of a short sequence (64 tokens, ``C = 64``, 2 ranks: rank 0 holds them all)."""
        if self.seq_lens[n] < 1:
            raise ValueError(f"seq_lens: sequence {n} is empty; it has no last token")
        return max(r for r in range(self.world_size) if self._cut(n, r) < self._cut(n, r + 1))


PrefixState = BoundaryState  # what a prefix-cache hit hands a sequence: the state and rows after the cached tokens


@dataclass
class RankOutput:
    """One rank's results. Every rank computes the same final states (each folds all ranks' maps);
    the logits of a sequence come from the one rank that holds its last token."""

    logits: dict[int, torch.Tensor] = field(default_factory=dict)  # sequence n -> [vocab] of its last token,
    # for the sequences whose last token this rank holds (CPLayout.last_rank)
    chunk_states: dict[int, tuple] = field(default_factory=dict)  # KDA layer -> (positions, recurrent, conv) per
    # sequence: the states at this rank's chunk starts (asked for with ``chunk_states=True``)
    recurrent: dict[int, torch.Tensor] = field(default_factory=dict)  # KDA layer -> [N, HV, K, V] final
    conv: dict[int, torch.Tensor] = field(default_factory=dict)  # KDA layer -> [N, 3D, W-1] final window
    kv: dict[int, list[torch.Tensor]] = field(default_factory=dict)  # MLA layer -> N x [L_n, Dc + Dp] new rows
    sent_bytes: int = 0


QUERY_BLOCK = 1024  # MLA queries attended at a time: a long slice's scores would not fit in memory whole


def _local_cu(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens, dtype=torch.long).cumsum(0).tolist()], dtype=torch.long)


@dataclass
class ShardMode(LayerMode):
    """How a decoder layer runs on one rank's shard (:class:`~kda_ref.model.model.LayerMode`): KDA by the
    prefix scan over the ranks' maps, MLA over the all-gathered latent rows; the norms and the MLP / MoE
    per token, as the reference path runs them. The layer skeleton itself is the model's."""

    lens: list[int]  # this rank's tokens of every sequence
    layout: CPLayout
    rank: int
    group: object  # a DistGroup or a ThreadGroup rank
    prefix: list[PrefixState | None]
    out: RankOutput
    chunk_states: bool
    chunk_size: int
    scan: Callable = exclusive_scan  # the fold over the ranks' maps (rank_forward's ``scan``)

    def kda(self, attn, h):
        return _kda(attn, h, self.lens, self.layout, self.rank, self.group, self.prefix, self.out,
                    self.chunk_states, self.chunk_size, self.scan), None

    def mla(self, attn, h):
        return _mla(attn, h, self.lens, self.layout, self.rank, self.group, self.prefix, self.out)


@torch.no_grad()
def rank_forward(model: HybridModel, token_ids: list[list[int]], rank: int, group,
                 prefix: list[PrefixState | None] | None = None, chunk_states: bool = False,
                 scan: Callable = exclusive_scan) -> RankOutput:
    """Rank ``rank``'s part of prefilling ``token_ids`` (N sequences) over ``group`` (a
    :class:`~kda_ref.context_parallel.comm.DistGroup` or a :class:`~kda_ref.context_parallel.comm.ThreadGroup` rank).
    ``chunk_states``: cut the slices at multiples of the model's chunk size and return every KDA
    layer's state and conv window at each chunk start of this rank's slices (what the single-process
    chunk kernel hands the prefix cache). ``scan``: the fold of every KDA layer's all-gathered maps
    into the incoming and final states, ``(maps, initial) -> (S_in list, final)`` like
    :func:`~kda_ref.context_parallel.maps.exclusive_scan` (the default, fla's merge of the predecessors'
    maps); it exists so that the visualizer can show what a wrong scan does without replacing a
    module global that every other prefill of the process reads."""
    R = group.world_size
    layout = CPLayout([len(t) for t in token_ids], R, align=model.dispatcher.chunk_size if chunk_states else 1)
    N = len(token_ids)
    prefix = prefix or [None] * N
    lens = layout.shard_lens(rank)
    dev = model.lm_head.weight.device  # gloo: CPU; nccl: the rank's GPU
    ids = torch.tensor([x for n in range(N) for x in token_ids[n][slice(*layout.bounds(n, rank))]], dtype=torch.long,
                       device=dev)
    out = RankOutput()
    mode = ShardMode(lens, layout, rank, group, prefix, out, chunk_states, model.dispatcher.chunk_size, scan)
    mine = [n for n in range(N) if layout.last_rank(n) == rank]  # the sequences that end on this rank
    last = (_local_cu(lens)[1:] - 1)[mine].to(dev)  # their last tokens' rows in this rank's slice (maybe none)
    # the last layer past its attention on those rows alone (DecoderLayer.forward's out_rows)
    x = model.run_layers(model.model.embed_tokens(ids), mode, out_rows=last)  # [len(mine), hidden]
    if mine:
        out.logits = dict(zip(mine, model.head(x)))
    out.sent_bytes = group.sent_bytes
    return out


def _kda(attn, x, lens, layout, rank, group, prefix, out: RankOutput, chunk_states: bool, C: int,
         scan: Callable = exclusive_scan):
    li, N, R = attn.layer_idx, len(lens), layout.world_size
    qkv = attn.project(x)  # [T_r, 3D]
    g, beta = attn.gates(x)  # [T_r, H, K], [T_r, H]
    w = attn.conv_weight()  # [3D, W]
    Wm1, C3 = w.shape[1] - 1, qkv.shape[1]
    cu = _local_cu(lens)
    # -- conv halo: every rank's last W-1 inputs per sequence, right-aligned [N, W-1, 3D] and their count
    tails = qkv.new_zeros(N, Wm1, C3)
    counts = torch.zeros(N, dtype=torch.long, device=qkv.device)
    for n in range(N):
        m = min(Wm1, lens[n])
        if m:
            tails[n, Wm1 - m:] = qkv[cu[n + 1] - m:cu[n + 1]]
            counts[n] = m
    all_tails, all_counts = group.all_gather(tails), group.all_gather(counts)

    def window(n: int, upto: int) -> torch.Tensor:
        """The last W-1 conv inputs of sequence n before rank ``upto``'s slice: [3D, W-1]."""
        parts = [prefix[n].conv[li].t().to(qkv.dtype) if prefix[n] is not None else qkv.new_zeros(Wm1, C3)]
        parts += [all_tails[j][n, Wm1 - int(all_counts[j][n]):] for j in range(upto)]
        return torch.cat(parts)[-Wm1:].t()

    halo = torch.stack([window(n, rank) for n in range(N)])  # [N, 3D, W-1]
    out.conv[li] = torch.stack([window(n, R) for n in range(N)])
    keep = [n for n in range(N) if lens[n]]  # a slice may be empty (a sequence shorter than R)
    lcu = _local_cu([lens[n] for n in keep]).to(qkv.device)
    # [1, T_r, H, K] each, q and k l2-normalised
    q, k, v = attn.conv_heads(qkv, w, lcu, halo[keep])[:3] if keep else attn.split_heads(qkv)
    incoming = _incoming_states(k, v, g, beta, lens, cu, li, rank, R, group, prefix, out, scan)
    o = torch.zeros_like(v)
    if keep:
        o, _, h = chunk_kda(q, k, v, g[None], beta[None], initial_state=torch.stack([incoming[n] for n in keep]),
                            cu_seqlens=lcu, chunk_size=C, return_intermediate_states=True)
        if chunk_states:  # the state and conv window at every chunk start of every local slice
            at, per_seq = 0, {}
            for j, n in enumerate(keep):
                b = torch.arange(0, lens[n], C)
                per_seq[n] = (layout.bounds(n, rank)[0] + b, h[0, at:at + len(b)],
                              conv_windows(halo[n], qkv[cu[n]:cu[n + 1]], b))
                at += len(b)
            out.chunk_states[li] = per_seq
    return attn.output(o[0], x)


def _incoming_states(k, v, g, beta, lens, cu, li, rank, R, group, prefix, out: RankOutput, scan) -> list:
    """KCP: each local slice's map from a zero state, all-gathered and folded (``scan``) into the state every
    sequence enters this rank with (``out.recurrent[li]`` gets each sequence's final state)."""
    N, HV, K, V = len(lens), v.shape[2], k.shape[3], v.shape[3]
    maps = torch.stack([pack(identity_map(HV, K, V, device=v.device)) if not lens[n] else
                        pack(segment_map(k[0, cu[n]:cu[n + 1]].float(), v[0, cu[n]:cu[n + 1]].float(),
                                         g[cu[n]:cu[n + 1]].float(), beta[cu[n]:cu[n + 1]].float()))
                        for n in range(N)])  # [N, HV, K, V + K]
    all_maps = group.all_gather(maps)  # R x [N, HV, K, V + K]
    incoming, final = [], []
    for n in range(N):
        s0 = prefix[n].recurrent[li] if prefix[n] is not None else None
        ins, fin = scan([unpack(all_maps[j][n]) for j in range(R)], s0)
        incoming.append(ins[rank])
        final.append(fin)
    out.recurrent[li] = torch.stack(final)
    return incoming


def _mla(attn, x, lens, layout, rank, group, prefix, out: RankOutput):
    li, N, R = attn.layer_idx, len(lens), layout.world_size
    T = x.shape[0]
    q_nope, q_pe, rows = attn.project(x)  # [T_r, H, Dn], [T_r, H, Dp], [T_r, Dc + Dp]
    width = max(sum(layout.shard_lens(j)) for j in range(R))  # pad to the longest rank: one tensor shape
    padded = torch.cat([rows, rows.new_zeros(width - T, rows.shape[1])])
    gathered = group.all_gather(padded)  # R x [width, Dc + Dp]
    per_rank = []  # per rank: N row blocks
    for j in range(R):
        jl = layout.shard_lens(j)
        jc = _local_cu(jl)
        per_rank.append([gathered[j][jc[n]:jc[n + 1]] for n in range(N)])
    cu = _local_cu(lens)
    o = torch.empty(T, attn.num_heads, attn.v_dim, dtype=x.dtype, device=x.device)
    new_rows = []
    for n in range(N):
        cached = prefix[n].kv[li] if prefix[n] is not None else rows.new_zeros(0, rows.shape[1])
        new_rows.append(torch.cat([per_rank[j][n] for j in range(R)]))
        if lens[n]:
            keys = torch.cat([cached.to(rows.dtype), *[per_rank[j][n] for j in range(rank + 1)]])
            s, e = int(cu[n]), int(cu[n + 1])
            base = keys.shape[0] - (e - s)  # keys before the slice's first query
            for a in range(s, e, QUERY_BLOCK):  # query blocks bound the [H, block, keys] scores
                b = min(a + QUERY_BLOCK, e)
                o[a:b] = attn.attend(q_nope[a:b], q_pe[a:b], keys[:base + b - s], decode=False)
    out.kv[li] = new_rows
    return attn.output(o, x)
