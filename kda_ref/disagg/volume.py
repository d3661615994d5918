"""Bytes of one prefill -> decode handoff, for any config and prompt length (the arithmetic beside
what :class:`~kda_ref.disagg.DisaggregatedLLM` measures): MLA KV grows with the prompt, each KDA
layer's recurrent state and conv window are fixed. Defaults as served: fp32 states, bf16 conv and KV.
"""

from __future__ import annotations

from ..model import ModelConfig


def handoff_bytes(config: ModelConfig, T: int, state_bytes: int = 4, conv_bytes: int = 2, kv_bytes: int = 2) -> dict:
    """``{"kv", "state", "conv", "total"}`` bytes for a ``T``-token prompt."""
    s = config.state_bytes(recurrent_bytes=state_bytes, conv_bytes=conv_bytes, kv_bytes=kv_bytes)
    n_kda = len(config.kda_layer_ids)
    out = {"kv": T * s["mla_kv_per_token"], "state": n_kda * s["kda_recurrent_per_layer"],
           "conv": n_kda * s["kda_conv_per_layer"]}
    out["total"] = sum(out.values())
    return out
