"""The scenario of the "Context parallelism" page (``docs/article.md#s0``, the summary table's
context-parallel row; concept ``cp.prefix_scan``).

The trained tiny model prefills a prompt split over ``R`` ranks (threads); one KDA layer's slice maps
``(A, B)`` are scanned into each rank's incoming state and checked against the recurrence, and the two
wrong ways run inside the real forward as its ``scan=`` argument. The bytes view is
:func:`kda_ref.context_parallel.volume.cp_bytes_per_rank` for the tiny model and 48B.

Design notes: ``docs/visualizer.md#context-parallelism``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kda_ref.model import ForwardBatch, ModelConfig, RequestCache
from kda_ref.ops import recurrent_kda
from kda_ref.context_parallel import CPLayout, CPResult, context_parallel_prefill, exclusive_scan, segment_map
from kda_ref.context_parallel.volume import cp_bytes_per_rank
from ..scenarios import common as cs

RANKS = (2, 3, 4)
DEFAULT_RANKS = 3
METHODS = ("scan", "zero", "add")  # the prefix scan; every rank from zero; states from zero added
HEAD = 0
PROMPT_CHARS = 360
SAME_TOL = 1e-4
VOLUME_LENGTHS = (8192, 32768, 131072, 524288, 1048576)


def page_model():
    return cs.trained_model()


def prompt_ids(model) -> list[int]:
    return cs.docs_prompt(model, PROMPT_CHARS)


@dataclass
class CPView:
    ranks: int
    tokens: int
    layer: int  # the KDA layer the maps and states are shown for
    bounds: list[tuple[int, int]]  # each rank's slice [lo, hi)
    A: list[torch.Tensor]  # per rank: [K, K] of HEAD (float64)
    B: list[torch.Tensor]  # per rank: [K, V]
    incoming: dict[str, list[torch.Tensor]]  # method -> per rank the incoming state [K, V] of HEAD
    state_error: dict[str, list[float]]  # method -> per rank: ||S - S_true|| / ||S_true|| (0 for rank 0)
    final_error: dict[str, float]  # method -> the same for the state after the whole prompt (what decode reads)
    logits_diff: dict[str, float]  # method -> max |logit - single process| of the whole model's CP forward
    sent_bytes: int  # per rank, measured


def check_ranks(R: int) -> int:
    if R not in RANKS:
        raise ValueError(f"ranks: must be one of {RANKS}, got {R!r}")
    return R


def _wrong_scan(method: str):
    """A stand-in for :func:`kda_ref.context_parallel.maps.exclusive_scan` that makes the tempting mistake."""
    def scan(maps, initial=None):
        B0 = maps[0][1]
        S0 = torch.zeros_like(B0) if initial is None else initial.to(B0.dtype)
        if method == "zero":  # every rank starts from zero (rank 0 from the initial state)
            incoming = [S0] + [torch.zeros_like(B0)] * (len(maps) - 1)
            final = maps[-1][1] if len(maps) > 1 else exclusive_scan(maps, initial)[1]
        else:  # "add": each rank adds the earlier ranks' states computed from zero
            incoming, acc = [], S0
            for _, B in maps:
                incoming.append(acc)
                acc = acc + B
            final = acc
        return incoming, final
    return scan


def prefill(model, ids: list[int], R: int, method: str = "scan") -> CPResult:
    """The real context-parallel forward (threads) of one prompt with ``method``'s scan, handed to
    :func:`~kda_ref.context_parallel.context_parallel_prefill` as ``scan=``: a wrong scan lives only in this
    call, and every other prefill of the process keeps :func:`~kda_ref.context_parallel.maps.exclusive_scan`."""
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    scan = exclusive_scan if method == "scan" else _wrong_scan(method)
    return context_parallel_prefill(model, [ids], world_size=R, backend="threads", scan=scan)


def run(R: int = DEFAULT_RANKS) -> CPView:
    check_ranks(R)
    model = page_model()
    cfg: ModelConfig = model.config
    ids = prompt_ids(model)
    T, layer = len(ids), cfg.kda_layer_ids[0]
    # the single process: logits, and the layer's per-token gates, keys and values (the probe)
    cache = RequestCache(cfg, 1, max_tokens=T, page_size=16)
    with torch.no_grad():
        single = model(torch.tensor(ids), cache.batch([T]), cache.tensors, logits="last")
        batch = ForwardBatch(cu_seqlens=torch.tensor([0, T]), context_lens=torch.tensor([0]), probe=True)
        probe = model.forward_output(torch.tensor(ids), batch, logits="none").probes[layer]
    k, v, g, beta = (x[:, HEAD:HEAD + 1].double() for x in (probe.k, probe.v, probe.g, probe.beta))  # one head
    lay = CPLayout([T], R)
    bounds = [lay.bounds(0, r) for r in range(R)]
    maps = [segment_map(k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], chunk_size=cs.CHUNK) for lo, hi in bounds]
    truth = []
    for lo in [b[0] for b in bounds] + [T]:  # the state after each prefix (and the whole prompt), by the recurrence
        S0 = torch.zeros(1, 1, k.shape[-1], v.shape[-1], dtype=torch.float64)
        if lo == 0:
            truth.append(S0[0, 0])
            continue
        _, fin = recurrent_kda(torch.zeros_like(k[:lo])[None], k[:lo][None], v[:lo][None], g[:lo][None],
                               beta[:lo][None], initial_state=S0, output_final_state=True)
        truth.append(fin[0, 0])
    rel = lambda s, t: float((s - t).norm() / t.norm()) if t.norm() > 0 else 0.0  # noqa: E731
    incoming, error, final_error = {}, {}, {}
    for m in METHODS:
        ins, fin = exclusive_scan(maps) if m == "scan" else _wrong_scan(m)(maps)
        incoming[m] = [x[0] for x in ins]  # [1, K, V] -> [K, V]
        error[m] = [rel(x, t) for x, t in zip(incoming[m], truth)]
        final_error[m] = rel(fin[0], truth[-1])
    cs.require(max(error["scan"]) < 1e-10 and final_error["scan"] < 1e-10,
               "the scan's states are not the recurrence's")
    logits_diff, sent = {}, 0
    for m in METHODS:
        res = prefill(model, ids, R, m)
        sent = res.sent_bytes[0] if m == "scan" else sent
        logits_diff[m] = float((res.logits - single).abs().max())
    cs.require(logits_diff["scan"] <= SAME_TOL, f"the prefix scan moved the logits by {logits_diff['scan']:.1e}")
    cs.require(logits_diff["zero"] > 1e-2, "starting every rank from zero left the logits alone")
    cs.require(final_error["add"] > 1e-2, "adding the states gave the true final state")
    return CPView(ranks=R, tokens=T, layer=layer, bounds=bounds, A=[m[0][0] for m in maps], B=[m[1][0] for m in maps],
                  incoming=incoming, state_error=error, final_error=final_error, logits_diff=logits_diff,
                  sent_bytes=sent)


def volume(R: int = 4) -> dict[str, list[dict]]:
    """Bytes per rank by prompt length, for the tiny model and Kimi-Linear-48B (bf16 activations)."""
    return {name: [{"tokens": T, **cp_bytes_per_rank(cfg, T, R)} for T in VOLUME_LENGTHS]
            for name, cfg in (("tiny", ModelConfig.tiny()), ("48b", ModelConfig.kimi_linear_48b()))}
