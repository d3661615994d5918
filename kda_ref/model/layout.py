"""How a checkpoint names the model's tensors: Kimi-Linear's layout and Kimi K3's release layout.

Kimi-Linear's is nearly the identity (the dense MLP read as ``mlp.*`` or ``block_sparse_moe.*``). K3's
release (vLLM ``vllm/models/kimi_k3/nvidia/model.py::KimiK3ForConditionalGeneration.load_weights``, SGLang
``models/kimi_k3.py``, llama.cpp ``conversion/kimi_k3.py``) adds the ``language_model.`` wrapper (vision
tensors skipped by name), MTP layers past the last, MXFP4 routed experts and a ``[K]`` ``A_log``.
:func:`plan_sources` turns a checkpoint's header into one :class:`Source` per model tensor, checking
names, shapes and dtypes before anything is read; :func:`release_tensors` does the reverse for
:func:`~kda_ref.model.weights.save_pretrained`. Design notes: ``docs/model.md#checkpoint-layout``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops.mxfp4 import MXFP4Error, check_mxfp4_shapes, check_release_scale, dequantize_mxfp4, quantize_mxfp4
from .config import ModelConfig

TEXT_PREFIX = "language_model."
VISION_PREFIXES = ("vision_tower.", "mm_projector.")  # K3's vision part: skipped by name
PACKED, SCALE = ".weight_packed", ".weight_scale"
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}


class LayoutError(ValueError):
    """A checkpoint tensor that does not fit the model (names it); ``weights`` re-raises it as a
    :class:`~kda_ref.model.weights.CheckpointError`."""


@dataclass
class Source:
    """Where one model tensor comes from: one float tensor (``names = (name,)``), or an MXFP4 pair
    (``names = (packed, scale)``, ``mxfp4 = True``)."""

    names: tuple[str, ...]
    mxfp4: bool = False

    def build(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """The model tensor (float32) from the checkpoint tensors ``tensors`` (name -> tensor)."""
        if self.mxfp4:
            scale = tensors[self.names[1]]
            why = check_release_scale(scale) if scale.dtype == torch.uint8 else None
            if why:
                raise MXFP4Error(why)
            return dequantize_mxfp4(tensors[self.names[0]], scale)
        return tensors[self.names[0]].to(torch.float32)


def text_name(config: ModelConfig, name: str) -> str | None:
    """The text model's name of checkpoint tensor ``name``; None for a K3 release's vision tensors.
    Raises :class:`LayoutError` for a K3 release tensor outside both parts."""
    if not config.is_k3:
        return name
    if name.startswith(VISION_PREFIXES):
        return None
    if not name.startswith(TEXT_PREFIX):
        raise LayoutError(f"{name}: a kimi_k3 release names the text model's tensors {TEXT_PREFIX}* (and the "
                          f"vision part's {' / '.join(p + '*' for p in VISION_PREFIXES)}); this one is neither")
    return name[len(TEXT_PREFIX):]


def model_name(config: ModelConfig, name: str) -> str:
    """The model's parameter name for a text checkpoint name: transformers' dense-MLP layout mapped to
    ``mlp.*``, an MTP layer's ``model.layers.{L + i}.*`` to ``mtp.{i}.*``."""
    parts = name.split(".")
    if len(parts) > 3 and parts[:2] == ["model", "layers"] and parts[2].isdigit():
        i = int(parts[2])
        if i >= config.num_hidden_layers:
            return ".".join(["mtp", str(i - config.num_hidden_layers), *parts[3:]])
        if (len(parts) == 6 and parts[3] == "block_sparse_moe" and parts[4] in ("gate_proj", "up_proj", "down_proj")
                and not config.is_moe_layer(i)):
            return ".".join([*parts[:3], "mlp", *parts[4:]])
    return name


def checkpoint_name(config: ModelConfig, name: str) -> str:
    """The inverse of :func:`model_name` for the release layout of ``config`` (``language_model.`` on K3)."""
    parts = name.split(".")
    if parts[0] == "mtp":
        name = ".".join(["model", "layers", str(config.num_hidden_layers + int(parts[1])), *parts[2:]])
    return TEXT_PREFIX + name if config.is_k3 else name


def _is_expert(name: str) -> bool:
    return ".experts." in name


def plan_sources(config: ModelConfig, headers: dict[str, tuple[tuple[int, ...], str]],
                 want: dict[str, tuple[int, ...]]) -> dict[str, Source]:
    """Model name -> :class:`Source` for every tensor of ``want`` (the model's names and shapes), from a
    checkpoint's ``headers`` (name -> (shape, safetensors dtype)). Raises :class:`LayoutError` naming a
    tensor that is missing, unexpected, given twice, mis-shaped or of the wrong dtype."""
    plan: dict[str, Source] = {}
    packed: dict[str, dict[str, str]] = {}  # model name -> {"packed": ck, "scale": ck}
    for ck in headers:
        text = text_name(config, ck)
        if text is None or text.endswith("rotary_emb.inv_freq"):
            continue
        suffix = next((s for s in (PACKED, SCALE) if text.endswith(s)), None)
        mk = model_name(config, text[:-len(suffix)] + ".weight" if suffix else text)
        if suffix:
            parts = packed.setdefault(mk, {})
            if suffix in parts:  # as for floats below: one name must not silently win over the other
                raise LayoutError(f"{ck}: the same tensor as {parts[suffix]} (both given as MXFP4)")
            parts[suffix] = ck
            continue
        if mk in plan:
            raise LayoutError(f"{ck}: the same tensor as {plan[mk].names[0]} (both layouts of the dense MLP given)")
        plan[mk] = Source((ck,))
    for mk, parts in packed.items():
        if mk in plan:
            raise LayoutError(f"{parts.get(PACKED) or parts.get(SCALE)}: {mk} is given both as floats and as MXFP4")
        plan[mk] = _mxfp4_source(config, mk, parts, headers, want)
    _check_names(config, plan, want)
    for mk, src in plan.items():
        if config.experts_mxfp4 and _is_expert(mk) and not src.mxfp4:
            raise LayoutError(f"{src.names[0]}: the config's quantization_config declares the routed experts MXFP4 "
                              f"(weight_packed + weight_scale); this expert is stored as {headers[src.names[0]][1]}")
        if not src.mxfp4:
            shape, dtype = headers[src.names[0]]
            if shape != want[mk]:
                raise LayoutError(f"{src.names[0]}: shape {shape} does not match the config's {want[mk]}")
            if dtype not in _FLOAT_DTYPES:
                raise LayoutError(f"{src.names[0]}: dtype {dtype} is not a float type")
    return plan


def _mxfp4_source(config, mk: str, parts: dict[str, str], headers, want) -> Source:
    """The :class:`Source` of an MXFP4 pair (both halves present, uint8, shaped for ``want[mk]``)."""
    name = parts.get(PACKED) or parts.get(SCALE)
    if not _is_expert(mk):
        raise LayoutError(f"{name}: only the routed experts are MXFP4 in K3's release; this tensor is not one")
    if not config.experts_mxfp4:
        raise LayoutError(f"{name}: an MXFP4 tensor, but the config has no quantization_config saying so")
    for suffix in (PACKED, SCALE):
        if suffix not in parts:
            raise LayoutError(f"{name}: its pair {name.rsplit('.', 1)[0] + suffix} is missing")
    (p_shape, p_dtype), (s_shape, s_dtype) = headers[parts[PACKED]], headers[parts[SCALE]]
    if mk in want:
        for ck, dtype in ((parts[PACKED], p_dtype), (parts[SCALE], s_dtype)):
            if dtype != "U8":
                raise LayoutError(f"{ck}: dtype {dtype}; MXFP4 codes and E8M0 scales are uint8")
        why = check_mxfp4_shapes(p_shape, s_shape, *want[mk])
        if why:
            raise LayoutError(f"{name}: {why} (the config's weight is {want[mk]})")
    return Source((parts[PACKED], parts[SCALE]), mxfp4=True)


def _check_names(config: ModelConfig, plan: dict[str, Source], want: dict) -> None:
    have = set(plan)
    if config.tie_word_embeddings and "lm_head.weight" not in have:
        have.add("lm_head.weight")
    missing, unexpected = sorted(set(want) - have), sorted(have - set(want))
    if missing:
        raise LayoutError(f"state_dict: missing {len(missing)} tensors, e.g. "
                          f"{[checkpoint_name(config, m) for m in missing[:3]]}")
    if unexpected:
        raise LayoutError(f"state_dict: unexpected {len(unexpected)} tensors, e.g. "
                          f"{[plan[u].names[0] for u in unexpected[:3]]}")


def release_tensors(config: ModelConfig, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint tensors of the model's ``state`` in ``config``'s layout: K3's ``language_model.``
    names, MTP layers past the last, routed experts as MXFP4 pairs (each must lie on the MXFP4 grid:
    else a :class:`LayoutError` naming it, as the save would change the model)."""
    out: dict[str, torch.Tensor] = {}
    for mk, t in state.items():
        ck = checkpoint_name(config, mk)
        if config.experts_mxfp4 and _is_expert(mk):
            packed, scale = quantize_mxfp4(t)
            if not torch.equal(dequantize_mxfp4(packed, scale), t.float()):
                raise LayoutError(f"{mk}: not on the MXFP4 grid, so an MXFP4 release would change it; round the "
                                  f"experts first (HybridModel.round_experts_to_mxfp4)")
            why = check_release_scale(scale)
            if why:
                raise LayoutError(f"{mk}: {why}")
            base = ck[:-len(".weight")]
            out[base + PACKED], out[base + SCALE] = packed, scale
        else:
            out[ck] = t
    return out
