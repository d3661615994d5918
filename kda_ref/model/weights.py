"""Load and save Hugging Face Kimi-Linear checkpoints (``config.json`` + ``*.safetensors``).

Parameter names are the checkpoint's own (the names vLLM's ``kimi_linear.py`` ``load_weights``
and transformers' Kimi-Linear conversion mapping read), e.g.
``model.layers.0.self_attn.q_conv1d.weight [D, 1, W]``, ``...self_attn.A_log [1, 1, H, 1]``,
``...self_attn.dt_bias [H*D]``, ``...block_sparse_moe.experts.3.w1.weight``,
``...block_sparse_moe.gate.e_score_correction_bias``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .config import ConfigError, ModelConfig
from .model import HybridModel


class CheckpointError(ValueError):
    """A checkpoint whose tensors do not fit the config (names the offending key)."""


def load_hf_state_dict(model: HybridModel, state: dict[str, torch.Tensor]) -> None:
    """Copy a Kimi-Linear state dict into ``model``; any missing, unexpected or mis-shaped key is an error."""
    own = model.state_dict()
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if model.config.tie_word_embeddings and "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing:
        raise CheckpointError(f"state_dict: missing {len(missing)} tensors, e.g. {missing[:3]}")
    if unexpected:
        raise CheckpointError(f"state_dict: unexpected {len(unexpected)} tensors, e.g. {unexpected[:3]}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise CheckpointError(f"{k}: shape {tuple(v.shape)} does not match the config's {tuple(own[k].shape)}")
    with torch.no_grad():
        for k, v in state.items():
            own[k].copy_(v.to(own[k].dtype))


def save_pretrained(model: HybridModel, path: str | Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (checkpoint names) into the folder ``path``."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    model.config.save(p / "config.json")
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(tensors, str(p / "model.safetensors"), metadata={"format": "pt"})
    return p


def load_pretrained(path: str | Path, backend: str = "torch", chunk_size: int = 64) -> HybridModel:
    """Build a :class:`HybridModel` from a folder with ``config.json`` and ``*.safetensors`` files."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"path: {p} is not a folder")
    config = ModelConfig.from_json(p / "config.json")
    files = sorted(p.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"path: no *.safetensors files in {p}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    model = HybridModel(config, seed=None, backend=backend, chunk_size=chunk_size)
    load_hf_state_dict(model, state)
    return model
