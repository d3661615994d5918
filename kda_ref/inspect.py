"""Record what the KDA layers do token by token: states, gates and write strengths.

Article concepts ``kda.state_evolution`` and ``kda.delta_rule`` (sections 1.3 and 2): the state of
a KDA head after every token, the per-channel decay ``alpha_t = exp(g_t)`` that forgets, and
``beta_t``, how strongly the token erases the old value for its key and writes the new one.

It runs the model once in *verify* mode (the phase speculative decoding uses), which makes the
recurrent kernel return the state after every token without touching any cache.
"""

from __future__ import annotations

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
    )
