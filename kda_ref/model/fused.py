"""Fused weights for the inference fast path, built from the checkpoint-named parameters.

Serving engines load Kimi-Linear's separate projections into merged layers so that one matmul
replaces several small ones:

* SGLang ``KimiDeltaAttention`` (``python/sglang/srt/models/kimi_linear.py``):
  ``fused_qkvbfg_a_proj`` (q | k | v | b | f_a | g_a, a ``MergedColumnParallelRepeatedLinear``),
  ``fused_fg_b_proj`` (f_b and g_b as one batched matmul, ``ColumnParallelBatchedLinear``) and
  ``qkv_conv1d`` (the three short-conv kernels merged, ``MergedColumnParallelLinear``);
* vLLM ``MergedColumnParallelLinear`` for ``gate_up_proj`` of the MLPs and the fused-MoE expert
  stacks ``w13_weight`` / ``w2_weight`` (``FusedMoE``), each filled shard by shard by a
  ``weight_loader``.

Here the parameters keep their Hugging Face names (``state_dict``, ``load_state_dict`` and
``save_pretrained`` are unchanged) and every fused tensor is a derived value cached next to them:
built on first use and rebuilt when a source parameter was written in place (``copy_`` in
``load_state_dict``, an optimizer step: the tensor's version counter moves).
:class:`~kda_ref.model.HybridModel` also drops every cache when its parameters are replaced
(``load_state_dict(assign=True)``) or moved (``.to()``, ``.float()``); code that swaps a
parameter's ``.data`` by hand should call :meth:`HybridModel.clear_fused_weights`.

Weights are cached pre-transposed (``[in, out]``, contiguous) where they feed ``x @ W``: for the
few-row inputs of a decode step MKL's non-transposed GEMM was ~1.5x faster here than ``F.linear``'s
``x @ W^T`` on the same weight.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch


class FusedWeightCache:
    """``key -> tensor`` derived from some parameters; see the module docstring."""

    def __init__(self) -> None:
        # key -> (sources, their versions when built, value)
        self._entries: dict[str, tuple[Sequence[torch.Tensor], list[int], torch.Tensor]] = {}

    def get(self, key: str, sources: Callable[[], Sequence[torch.Tensor]],
            build: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        """``build(sources())``, cached under ``key`` until one of those sources is written in place."""
        hit = self._entries.get(key)
        if hit is not None and torch.compiler.is_compiling():
            return hit[2]  # traced code reads the value cached before tracing (version counters are host state)
        if hit is not None and [t._version for t in hit[0]] == hit[1]:
            return hit[2]
        srcs = tuple(sources())
        with torch.no_grad():
            value = build(srcs).detach()
        self._entries[key] = (srcs, [t._version for t in srcs], value)
        return value

    def clear(self) -> None:
        self._entries.clear()


def transposed(w: torch.Tensor) -> torch.Tensor:
    """``[out, in]`` -> contiguous ``[in, out]``, the operand of ``x @ W^T`` as a plain ``mm``."""
    return w.t().contiguous()
