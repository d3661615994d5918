"""Record what the KDA layers do token by token: states, gates and write strengths; and try to
run the recurrence backwards.

Article concepts ``kda.state_evolution`` and ``kda.delta_rule`` (``docs/article.md#s1-3``, ``#s2-2``).
:func:`trace_kda_states` runs the model once in *verify* mode, whose recurrent kernel returns the
state after every token without touching any cache. Concept ``state.not_an_archive``
(``docs/article.md#s2-2``): :func:`recover_backwards` inverts the recurrence step by step, with
every token's inputs, to show how fast even that fails.

Design notes: ``docs/trace.md#the-kda-state-inspector``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .model import HybridModel, RequestCache


@dataclass
class KDAStateTrace:
    tokens: list[int]
    layers: list[int]  # model layer indices of the KDA layers
    states: dict[int, torch.Tensor]  # layer -> [T, H, K, V] state after each token
    gates: dict[int, torch.Tensor]  # layer -> [T, H, K] log decay g_t
    beta: dict[int, torch.Tensor]  # layer -> [T, H]
    logits: torch.Tensor  # [T, vocab]
    keys: dict[int, torch.Tensor]  # layer -> [T, H, K] l2-normalised key each token wrote
    values: dict[int, torch.Tensor]  # layer -> [T, H, V] value each token wrote

    def state_norms(self, layer: int) -> torch.Tensor:
        """Frobenius norm of every head's state over time, ``[T, H]``."""
        return self.states[layer].flatten(-2).norm(dim=-1)


@torch.no_grad()
def trace_kda_states(model: HybridModel, token_ids: list[int] | torch.Tensor) -> KDAStateTrace:
    """Run ``token_ids`` from an empty state and record every KDA layer's per-token states and gates."""
    ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
    if ids.numel() == 0:
        raise ValueError("token_ids: empty prompt")
    cache = RequestCache(model.config, 1, max_tokens=ids.numel())
    batch = cache.batch([ids.numel()], verify=True, probe=True)
    out = model.forward_output(ids, batch, cache.tensors)
    layers = model.config.kda_layer_ids
    return KDAStateTrace(
        tokens=ids.tolist(),
        layers=layers,
        states={layer: out.step_states[layer].recurrent for layer in layers},
        gates={layer: out.probes[layer].g for layer in layers},
        beta={layer: out.probes[layer].beta for layer in layers},
        logits=out.logits,
        keys={layer: out.probes[layer].k for layer in layers},
        values={layer: out.probes[layer].v for layer in layers},
    )


def invert_step(state: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                beta: torch.Tensor) -> torch.Tensor:
    """The state before one token, from the state after it and that token's inputs.

    The forward step is ``S_t = (I - b k k^T) Diag(a) S_{t-1} + b k v^T`` (``a = exp(g)``), so
    ``S_{t-1} = Diag(1/a) (I - b k k^T)^{-1} (S_t - b k v^T)`` with, by Sherman-Morrison,
    ``(I - b k k^T)^{-1} = I + b / (1 - b |k|^2) k k^T``. Exact algebra, badly conditioned: the
    ``1/a`` of a channel that decayed hard multiplies whatever error the state carries.

    Shapes: ``state [H, K, V]``, ``k [H, K]``, ``v [H, V]``, ``g [H, K]``, ``beta [H]``; computed
    in ``state.dtype``.
    """
    dt = state.dtype
    k, v, g, b = k.to(dt), v.to(dt), g.to(dt), beta.to(dt)[:, None, None]  # b: [H, 1, 1]
    r = state - b * k[:, :, None] * v[:, None, :]  # S_t - b k v^T: [H, K, V]
    kk = (k * k).sum(-1)[:, None, None]  # |k|^2: [H, 1, 1]
    kr = torch.einsum("hk,hkv->hv", k, r)[:, None, :]  # k^T r: [H, 1, V]
    before_decay = r + b / (1 - b * kk) * k[:, :, None] * kr  # Diag(a) S_{t-1}
    return before_decay * torch.exp(-g)[:, :, None]


def _check_recovery(trace: KDAStateTrace, layer: int, t: int, steps: int) -> None:
    if layer not in trace.states:
        raise ValueError(f"layer: {layer} is not a KDA layer of the trace (KDA layers: {trace.layers})")
    T = len(trace.tokens)
    if not 0 <= t < T:
        raise ValueError(f"t: position {t} is outside the trace's 0..{T - 1}")
    if not 1 <= steps <= t:
        raise ValueError(f"steps: must be in 1..t={t} (the state before position 0 is the zero state), got {steps}")


def recover_backwards(trace: KDAStateTrace, layer: int, t: int, steps: int,
                      dtype: torch.dtype = torch.float32, start: torch.Tensor | None = None) -> torch.Tensor:
    """Run the recurrence backwards from the state after token ``t``: ``[steps, H, K, V]``, the
    recovered states after tokens ``t-1, t-2, ..., t-steps`` (in ``dtype``).

    Starts from ``start`` (``[H, K, V]``) or the trace's stored fp32 state, and uses the trace's
    own per-token keys, values, gates and betas, which a serving cache never keeps.
    """
    _check_recovery(trace, layer, t, steps)
    S = (trace.states[layer][t] if start is None else start).to(dtype)
    ks, vs, gs, bs = trace.keys[layer], trace.values[layer], trace.gates[layer], trace.beta[layer]
    out = []
    for i in range(t, t - steps, -1):  # undo token i: the state after i -> the state after i - 1
        S = invert_step(S, ks[i], vs[i], gs[i], bs[i])
        out.append(S)
    return torch.stack(out)


def forward_states(trace: KDAStateTrace, layer: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The layer's states after every token recomputed from the trace's inputs in ``dtype``
    (``[T, H, K, V]``), with the reference recurrence (:func:`kda_ref.ops.recurrent_kda`)."""
    from .ops import recurrent_kda

    k = trace.keys[layer][None].to(dtype)  # [1, T, H, K]
    v, g, beta = (x[None].to(dtype) for x in (trace.values[layer], trace.gates[layer], trace.beta[layer]))
    _, _, steps = recurrent_kda(k, k, v, g, beta, return_step_states=True)
    return steps[0]


@dataclass
class RecoveryCurve:
    """How well the state after token ``t - j`` is recovered from the one after ``t``, ``j = 1..steps``."""

    layer: int
    t: int
    steps: list[int]  # j = 1..steps
    rel_error: dict[str, list[float]]  # dtype name -> ||recovered - true|| / ||true|| per j
    # per j: log10 of the cumulative decay prod(alpha) of the j tokens undone, over heads x channels
    log10_decay_min: list[float]  # the channel that forgot most
    log10_decay_median: list[float]  # a typical channel


def recovery_curve(trace: KDAStateTrace, layer: int, t: int, steps: int) -> RecoveryCurve:
    """Recover backwards in fp32 (from the stored fp32 state, as a cache would hold it) and in fp64
    (from states recomputed in fp64) and measure each against its own forward states."""
    _check_recovery(trace, layer, t, steps)
    errors = {}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        truth = trace.states[layer].to(dtype) if dtype == torch.float32 else forward_states(trace, layer, dtype)
        rec = recover_backwards(trace, layer, t, steps, dtype, start=truth[t])
        target = truth[t - steps:t].flip(0)  # the states after t-1, ..., t-steps
        err = (rec - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1).clamp_min(1e-30)
        errors[name] = [float(e) for e in err.nan_to_num(nan=float("inf"))]
    # cumulative decay of the tokens undone: sum of g over t, t-1, ..., t-j+1 (per head and channel)
    cum = trace.gates[layer][t - steps + 1:t + 1].double().flip(0).cumsum(0)  # [steps, H, K]
    log10 = cum.flatten(1) / math.log(10.0)  # [steps, H*K]
    return RecoveryCurve(layer=layer, t=t, steps=list(range(1, steps + 1)), rel_error=errors,
                         log10_decay_min=log10.min(dim=1).values.tolist(),
                         log10_decay_median=log10.median(dim=1).values.tolist())
