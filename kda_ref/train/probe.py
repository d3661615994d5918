"""A probe of what a KDA state stores: is a key-value pair written into the state, and is it still
there when the query for that key arrives?

For one KDA layer and head: ``S_t`` from :func:`kda_ref.state_trace.trace_kda_states`, and the layer's own q, k, v
recomputed exactly as :meth:`kda_ref.model.kda_layer.KDAAttention.forward` does. The **write probe** compares
``cos(S^T k_w, v_w)`` before and after the pair; the **retrieval probe** reads with the later query's ``q`` and
compares alignments ``|cos|`` (:meth:`PairProbe.alignment`).
Design notes: ``docs/training.md#what-the-state-probe-shows``
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..state_trace import trace_kda_states
from ..model import ForwardBatch, HybridModel
from ..model.model import ExtendMode
from ..model.decoder import residual_stream
from ..ops.norms import rms_norm
from .data import RecallSample


@torch.no_grad()
def layer_qkv(model: HybridModel, ids: torch.Tensor, layer: int):
    """The KDA layer ``layer``'s per-token ``q, k`` (l2-normalised) and ``v``, each ``[T, H, D]``."""
    ids = torch.as_tensor(ids, dtype=torch.long).flatten()
    batch = ForwardBatch.prefill([ids.numel()])
    stream = residual_stream(model.config, model.model.embed_tokens(ids))
    for j in range(layer):
        model.model.layers[j](stream, ExtendMode(batch, None, model.dispatcher))
    dec = model.model.layers[layer]
    if dec.kind != "kda":
        raise ValueError(f"layer: {layer} is an MLA layer, not KDA")
    attn = dec.self_attn
    h = rms_norm(stream.attn_input(dec), dec.input_layernorm.weight, dec.eps)
    q, k, v, _ = attn.conv_heads(attn.project(h), attn.conv_weight(), batch.cu_seqlens)  # the layer's own pieces
    return q[0], k[0], v[0]


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


@dataclass
class PairProbe:
    """Cosines ``[n_pairs, H]`` for one sample and one layer (every head at once)."""
    layer: int
    write_before: torch.Tensor  # cos(S_{key-1}^T k_w, v_w)
    write_after: torch.Tensor  # cos(S_w^T k_w, v_w)
    read_before: torch.Tensor  # cos(S_{key-1}^T q_query, v_w)
    read_after: torch.Tensor  # cos(S_w^T q_query, v_w)
    read_at_query: torch.Tensor  # cos(S_{query-1}^T q_query, v_w)
    beta: torch.Tensor  # β at the write token [n_pairs, H]

    def alignment(self, name: str) -> torch.Tensor:
        """``|cos|`` of one of the readouts (``"read_before"``, ``"read_after"``, ``"read_at_query"``)."""
        return getattr(self, name).abs()


@torch.no_grad()
def probe_pairs(model: HybridModel, sample: RecallSample, layer: int, trace=None, write_offset: int = 0) -> PairProbe:
    """Run the write and retrieval probes for every pair of ``sample`` that is queried."""
    trace = trace or trace_kda_states(model, sample.ids)
    S = trace.states[layer]  # [T, H, K, V]
    q, k, v = layer_qkv(model, torch.tensor(sample.ids), layer)
    H, K, V = S.shape[1:]
    zero = torch.zeros(H, K, V)
    rows = {n: [] for n in ("wb", "wa", "rb", "ra", "rq", "beta")}
    for qi, p in enumerate(sample.query_pair):
        kp, w, qp = sample.key_pos[p], sample.value_pos[p] + write_offset, sample.query_pos[qi]
        before = S[kp - 1] if kp > 0 else zero
        after, at_q = S[w], S[qp - 1]
        kw, vw, qq = k[w], v[w], q[qp]  # [H, D]
        read = lambda St, x: torch.einsum("hkv,hk->hv", St, x)  # noqa: E731  S^T x per head
        rows["wb"].append(_cos(read(before, kw), vw))
        rows["wa"].append(_cos(read(after, kw), vw))
        rows["rb"].append(_cos(read(before, qq), vw))
        rows["ra"].append(_cos(read(after, qq), vw))
        rows["rq"].append(_cos(read(at_q, qq), vw))
        rows["beta"].append(trace.beta[layer][w])
    st = {n: torch.stack(r) for n, r in rows.items()}
    return PairProbe(layer, st["wb"], st["wa"], st["rb"], st["ra"], st["rq"], st["beta"])


@torch.no_grad()
def probe_summary(model: HybridModel, samples: list[RecallSample], write_offset: int = 0) -> dict:
    """Mean cosines per KDA layer and head over ``samples``: ``{layer: {name: [H] tensor}}``."""
    out = {}
    for layer in model.config.kda_layer_ids:
        acc = None
        for s in samples:
            pp = probe_pairs(model, s, layer, write_offset=write_offset)
            cur = {n: getattr(pp, n) for n in ("write_before", "write_after", "read_before", "read_after",
                                               "read_at_query", "beta")}
            cur.update({f"{n}_abs": pp.alignment(n) for n in ("read_before", "read_after", "read_at_query")})
            acc = cur if acc is None else {n: torch.cat([acc[n], cur[n]]) for n in cur}
        out[layer] = {n: t.mean(0) for n, t in acc.items()}
    return out


def best_memory_head(summary: dict) -> tuple[int, int]:
    """The (layer, head) whose retrieval alignment ``|cos|`` rises most from before the pair to the query."""
    best, arg = -9.0, (None, None)
    for layer, d in summary.items():
        gain = d["read_at_query_abs"] - d["read_before_abs"]
        h = int(gain.argmax())
        if float(gain[h]) > best:
            best, arg = float(gain[h]), (layer, h)
    return arg


@torch.no_grad()
def retrieval_curve(model: HybridModel, sample: RecallSample, layer: int, head: int, query: int = 0,
                    trace=None) -> dict:
    """For the visualizer: ``|cos(S_t^T q, v_w)|`` for every token t, where ``q`` is the query vector
    of the ``query``-th query and ``v_w`` the value vector its pair wrote. Flat near zero until the
    pair, a jump at its write token, then a slow sag as later pairs write on top of it.

    Returns ``{"alignment": [T] tensor, "write_pos": w, "key_pos": ..., "query_pos": ...}``."""
    trace = trace or trace_kda_states(model, sample.ids)
    q, _, v = layer_qkv(model, torch.tensor(sample.ids), layer)
    p = sample.query_pair[query]
    w, qp = sample.value_pos[p], sample.query_pos[query]
    S = trace.states[layer][:, head]  # [T, K, V]
    read = torch.einsum("tkv,k->tv", S, q[qp, head])
    return {"alignment": _cos(read, v[w, head][None]).abs(), "write_pos": w, "key_pos": sample.key_pos[p],
            "query_pos": qp}
