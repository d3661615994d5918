"""Compressed checkpoint storage: bf16 or int8 KDA recurrent states, conv windows kept as they are.

Article concept ``sglang.compressed_checkpoint`` (``docs/article.md#s5-3``). Counterpart:
``python/sglang/srt/mem_cache/mamba_checkpoint_pool.py::MambaCheckpointPool`` (sgl-project/sglang@b03febbe):
int8 with one scale per (layer, slot, head, k-channel), ``scale = amax_over_v(|S|) / 127``. Lossy (measured in
``docs/benchmarks.md``); exact fp32 checkpoints are the default. Each checkpoint dtype is a
:class:`CheckpointCodec` registered in :data:`kda_ref.memory.codecs.CHECKPOINT_CODECS`; the pool asks the object
(:func:`~kda_ref.memory.codecs.checkpoint_codec`), never a dtype name.
Design notes: ``docs/architecture.md#the-memory-pool``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.config import ModelConfig


@dataclass(frozen=True)
class CheckpointCodec:
    """How a checkpoint stores the KDA recurrent states ``[L, H, K, V]`` fp32 (conv windows are kept in
    the pool's dtype by every codec). The defaults are the exact codec's (:class:`Fp32Codec`): fp32, in
    the state slots, no scales."""

    name: str
    shares_state_slots: bool = True  # a checkpoint is an ordinary state slot (donation is a re-tag)
    recurrent_dtype: torch.dtype = torch.float32  # the stored recurrent state's dtype
    lossy: bool = False  # restoring changes the state (and so later logits)

    def scale_bytes(self, config: ModelConfig) -> int:
        """Bytes of the quantisation scales of one layer's recurrent state (none here)."""
        return 0

    def checkpoint_bytes(self, config: ModelConfig, conv_dtype: torch.dtype = torch.float32) -> int:
        """Bytes of one checkpoint, all KDA layers: the recurrent states as stored, their scales, the conv
        windows in ``conv_dtype``. For fp32 this is one state slot's bytes
        (:func:`~kda_ref.model.size.cache_unit_bytes`)."""
        c = config
        H, D = c.linear_num_heads, c.linear_head_dim
        recurrent = H * D * D * torch.empty((), dtype=self.recurrent_dtype).element_size()
        conv = 3 * c.kda_dim * (c.short_conv_kernel_size - 1) * torch.empty((), dtype=conv_dtype).element_size()
        return len(c.kda_layer_ids) * (recurrent + self.scale_bytes(config) + conv)

    def scale_shape(self, config: ModelConfig) -> tuple[int, ...] | None:
        """The scales of one layer's recurrent state, stored beside it (``None``: no scales)."""
        return None

    def quantise(self, recurrent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """fp32 ``recurrent [..., H, K, V]`` -> ``(stored, scale or None)``."""
        return recurrent, None

    def dequantise(self, stored: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        """:meth:`quantise`'s ``(stored, scale)`` -> fp32 ``[..., H, K, V]``."""
        return stored.float()


@dataclass(frozen=True)
class Fp32Codec(CheckpointCodec):
    """Exact checkpoints: the fp32 state itself, in a state slot of the pool (the default)."""


@dataclass(frozen=True)
class Bf16Codec(CheckpointCodec):
    """The recurrent state rounded to bf16 (half the bytes of fp32), no scales."""

    shares_state_slots: bool = False
    recurrent_dtype: torch.dtype = torch.bfloat16
    lossy: bool = True

    def quantise(self, recurrent: torch.Tensor) -> tuple[torch.Tensor, None]:
        return recurrent.to(torch.bfloat16), None


@dataclass(frozen=True)
class Int8Codec(CheckpointCodec):
    """int8 with one scale per (layer, head, key channel) -- SGLang's ``MambaCheckpointPool``:
    ``scale = amax_over_v(|S|) / 127``, ``q = round(S / scale)``; the scale is fp32 here, in the state's own
    dtype in SGLang."""

    shares_state_slots: bool = False
    recurrent_dtype: torch.dtype = torch.int8
    lossy: bool = True

    def scale_bytes(self, config: ModelConfig) -> int:
        return config.linear_num_heads * config.linear_head_dim * 4

    def scale_shape(self, config: ModelConfig) -> tuple[int, ...]:
        return (config.linear_num_heads, config.linear_head_dim, 1)

    def quantise(self, recurrent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The scale is taken over the finite values: one inf or NaN made it inf and every value of its row
        NaN. int8 holds no inf or NaN: an inf saturates at +-127 (the row's largest finite magnitude), a NaN
        becomes 0 -- what a lossy codec can keep of a diverged state, its neighbours intact."""
        finite = recurrent.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        scale = finite.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30) / 127.0  # per (layer, head, k)
        q = torch.round(recurrent.nan_to_num(nan=0.0) / scale).clamp(-127, 127)  # +-inf / scale -> +-127
        return q.to(torch.int8), scale

    def dequantise(self, stored: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        top = torch.finfo(torch.float32).max  # 127 x (max / 127) rounds past it: keep the fp32 maximum finite
        return (stored.float() * scale).clamp_(-top, top)


FP32, BF16, INT8 = Fp32Codec("fp32"), Bf16Codec("bf16"), Int8Codec("int8")  # kda_ref.memory.codecs names them


class CompressedCheckpoints:
    """``num_slots`` compressed checkpoints; slot ids are the pool's CHECKPOINT unit ids."""

    def __init__(self, config: ModelConfig, num_slots: int, codec: CheckpointCodec, conv_dtype=torch.float32,
                 device=None):
        if not isinstance(codec, CheckpointCodec):
            raise ValueError(f"codec: expected a CheckpointCodec (kda_ref.memory.codecs.checkpoint_codec), "
                             f"got {codec!r}")
        if codec.shares_state_slots:
            raise ValueError(f"codec: {codec.name} checkpoints are state slots, not compressed storage")
        c = config
        n, H, D = len(c.kda_layer_ids), c.linear_num_heads, c.linear_head_dim
        self.codec = codec
        # reserved like the pool's tensors: committed when a slot is first written
        self.recurrent = torch.empty(n, num_slots, H, D, D, dtype=codec.recurrent_dtype, device=device)
        scale = codec.scale_shape(config)
        self.scale = None if scale is None else torch.empty(n, num_slots, *scale, dtype=torch.float32, device=device)
        self.conv = torch.empty(n, num_slots, 3 * c.kda_dim, c.short_conv_kernel_size - 1, dtype=conv_dtype,
                                device=device)

    def store(self, slot: int, recurrent: torch.Tensor, conv: torch.Tensor) -> None:
        """``recurrent [L, H, K, V]`` fp32, ``conv [L, 3D, W-1]``."""
        stored, scale = self.codec.quantise(recurrent)
        self.recurrent[:, slot] = stored
        if scale is not None:
            self.scale[:, slot] = scale
        self.conv[:, slot] = conv

    def load(self, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized ``(recurrent [L, H, K, V] fp32, conv [L, 3D, W-1])``."""
        scale = None if self.scale is None else self.scale[:, slot]
        return self.codec.dequantise(self.recurrent[:, slot], scale), self.conv[:, slot]
