"""Compressed checkpoint storage: bf16 or int8 KDA recurrent states, conv windows kept as they are.

Article concept ``sglang.compressed_checkpoint`` (``docs/article.md#s5-3``): cached states sit idle until a hit,
so they can be stored smaller than the active fp32 states the kernels update. SGLang's opt-in
checkpoint pool (``python/sglang/srt/mem_cache/mamba_checkpoint_pool.py::MambaCheckpointPool``, read at
sgl-project/sglang@b03febbe; the concept map has the pointer) keeps the
temporal state in int8 with one scale per (layer, slot, head, k-channel) —
``scale = amax_over_v(|S|) / 127``, ``q = round(S / scale)`` — and the conv windows native; a hit
dequantizes into a fresh active slot.

Lossy: restoring a compressed checkpoint changes later logits slightly (measured in
``docs/benchmarks.md``); exact fp32 checkpoints are the default.
"""

from __future__ import annotations

import torch

from ..model.config import ModelConfig

CODECS = ("bf16", "int8")


def checkpoint_bytes(config: ModelConfig, codec: str, conv_dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one compressed checkpoint (all KDA layers)."""
    c = config
    H, D = c.linear_num_heads, c.linear_head_dim
    n = len(c.kda_layer_ids)
    conv = 3 * c.kda_dim * (c.short_conv_kernel_size - 1) * torch.empty((), dtype=conv_dtype).element_size()
    if codec == "bf16":
        return n * (H * D * D * 2 + conv)
    if codec == "int8":
        return n * (H * D * D + H * D * 4 + conv)
    raise ValueError(f"checkpoint_dtype: must be 'fp32' or one of {CODECS}, got {codec!r}")


class CompressedCheckpoints:
    """``num_slots`` compressed checkpoints; slot ids are the pool's CHECKPOINT unit ids."""

    def __init__(self, config: ModelConfig, num_slots: int, codec: str, conv_dtype=torch.float32, device=None):
        checkpoint_bytes(config, codec)  # validates the codec
        c = config
        n, H, D = len(c.kda_layer_ids), c.linear_num_heads, c.linear_head_dim
        self.codec = codec
        qdtype = torch.bfloat16 if codec == "bf16" else torch.int8
        # reserved like the pool's tensors: committed when a slot is first written
        self.recurrent = torch.empty(n, num_slots, H, D, D, dtype=qdtype, device=device)
        self.scale = torch.empty(n, num_slots, H, D, 1, dtype=torch.float32, device=device) if codec == "int8" else None
        self.conv = torch.empty(n, num_slots, 3 * c.kda_dim, c.short_conv_kernel_size - 1, dtype=conv_dtype,
                                device=device)

    def store(self, slot: int, recurrent: torch.Tensor, conv: torch.Tensor) -> None:
        """``recurrent [L, H, K, V]`` fp32, ``conv [L, 3D, W-1]``."""
        if self.codec == "bf16":
            self.recurrent[:, slot] = recurrent.to(torch.bfloat16)
        else:
            scale = recurrent.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30) / 127.0  # per (layer, head, k)
            self.recurrent[:, slot] = torch.round(recurrent / scale).clamp(-127, 127).to(torch.int8)
            self.scale[:, slot] = scale
        self.conv[:, slot] = conv

    def load(self, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized ``(recurrent [L, H, K, V] fp32, conv [L, 3D, W-1])``."""
        rec = self.recurrent[:, slot].float()
        if self.scale is not None:
            rec = rec * self.scale[:, slot]
        return rec, self.conv[:, slot]
