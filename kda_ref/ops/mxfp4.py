"""MXFP4 (OCP Microscaling FP4, compressed-tensors' ``mxfp4-pack-quantized``): how Kimi K3's release
stores its routed experts.

A weight ``W [N, Kin]`` is ``weight_packed [N, Kin / 2]`` (two E2M1 codes a byte, low nibble first) and
``weight_scale [N, Kin / 32]`` (one E8M0 scale per 32 input columns): ``W[n, k] = E2M1(code[n, k]) *
2 ** (scale[n, k // 32] - 127)``. Checked against compressed-tensors'
``compressors/quantized_compressors/fp4_quantized.py`` and vLLM's
``vllm/models/kimi_k3/nvidia/model.py::KimiK3MegaMoEExperts``. :func:`quantize_mxfp4` is the inverse.

Design notes: ``docs/kda.md#mxfp4-experts``.
"""

from __future__ import annotations

import torch

BLOCK = 32
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E8M0_NAN = 255
# The largest scale byte a release may hold: a block at 2 ** (140 - 127) reaches 6 * 2 ** 13 = 49,152,
# inside fp16's 65,504; the next byte's blocks reach 98,304. A trained network's weights are far smaller
# (K3's experts are ~1e-2, bytes near 120), and a quantiser writes a byte past 140 only for a weight past
# 2 ** 15 -- which no release of a trained model holds and which overflows the half-precision matmuls the
# experts run in. This bound is this project's choice: vLLM's and SGLang's loaders read any byte but 255.
E8M0_MAX_RELEASE = 140


class MXFP4Error(ValueError):
    """Packed bytes or scales that are not an MXFP4 tensor of the expected shape."""


def _table(device) -> torch.Tensor:
    """The 16 codes' values: ``[+0 .. +6, -0 .. -6]``."""
    mag = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    return torch.cat([mag, -mag])


def check_mxfp4_shapes(packed_shape, scale_shape, out_features: int, in_features: int) -> str | None:
    """Why ``(packed, scale)`` shapes cannot hold a ``[out_features, in_features]`` weight, or None."""
    want_p, want_s = (out_features, in_features // 2), (out_features, in_features // BLOCK)
    if in_features % BLOCK:
        return f"in_features {in_features} is not a multiple of {BLOCK}"
    if tuple(packed_shape) != want_p:
        return f"weight_packed has shape {tuple(packed_shape)}, expected {want_p}"
    if tuple(scale_shape) != want_s:
        return f"weight_scale has shape {tuple(scale_shape)}, expected {want_s}"
    return None


def check_release_scale(scale: torch.Tensor) -> str | None:
    """Why ``scale`` (uint8 E8M0) cannot come from a quantised release (:data:`E8M0_MAX_RELEASE`), or None."""
    top = int(scale.max()) if scale.numel() else 0
    if top == E8M0_NAN or top <= E8M0_MAX_RELEASE:
        return None  # 255 is dequantize_mxfp4's own refusal (NaN)
    return (f"holds the scale byte {top} (weights up to {6 * 2.0 ** (top - 127):.3g}); a release quantised from a "
            f"trained model's weights stays at or below {E8M0_MAX_RELEASE} (|w| <= 49,152, fp16's range)")


def dequantize_mxfp4(packed: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """``packed [N, K/2]`` uint8 and ``scale [N, K/32]`` uint8 -> ``W [N, K]`` in ``dtype``."""
    if packed.dtype != torch.uint8 or scale.dtype != torch.uint8:
        raise MXFP4Error(f"weight_packed / weight_scale: must be uint8, got {packed.dtype} / {scale.dtype}")
    N, half = packed.shape
    why = check_mxfp4_shapes(packed.shape, scale.shape, N, 2 * half)
    if why:
        raise MXFP4Error(why)
    if bool((scale == E8M0_NAN).any()):
        raise MXFP4Error(f"weight_scale: holds {E8M0_NAN} (E8M0's NaN)")
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(N, 2 * half)  # low nibble first
    values = _table(packed.device)[codes.long()]  # [N, K]
    exp = torch.exp2(scale.float() - 127.0)  # [N, K/32]
    return (values.view(N, -1, BLOCK) * exp[..., None]).reshape(N, 2 * half).to(dtype)


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``W [N, K]`` (K a multiple of 32) -> ``(packed [N, K/2], scale [N, K/32])`` uint8 (module docstring)."""
    N, K = w.shape
    if K % BLOCK:
        raise MXFP4Error(f"w: in_features {K} is not a multiple of {BLOCK}")
    if not bool(torch.isfinite(w).all()):
        raise MXFP4Error("w: holds a non-finite value")
    blocks = w.float().reshape(N, K // BLOCK, BLOCK)
    amax = blocks.abs().amax(-1)  # [N, K/32]
    # shared exponent floor(log2(amax)) - 2: amax / 2**e lands in [4, 8); an all-zero block takes the smallest
    e = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp_min(2.0 ** -126))) - 2, torch.full_like(amax, -127))
    e = e.clamp(-127, 127)
    scaled = blocks / torch.exp2(e)[..., None]  # [N, K/32, 32]
    mag = torch.tensor(E2M1_VALUES, device=w.device)
    dist = (scaled.abs()[..., None] - mag).abs()  # [N, K/32, 32, 8]
    # nearest magnitude; argmin takes the first of a tie, the smaller magnitude
    idx = torch.argmin(dist, dim=-1)
    codes = (idx | ((scaled < 0) & (idx > 0)).to(idx.dtype) << 3).reshape(N, K).to(torch.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.contiguous(), (e + 127).to(torch.uint8).contiguous()


def round_to_mxfp4(w: torch.Tensor) -> torch.Tensor:
    """``w`` rounded onto the MXFP4 grid (quantised, then dequantised), in ``w``'s dtype."""
    return dequantize_mxfp4(*quantize_mxfp4(w), dtype=w.dtype)
