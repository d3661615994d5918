"""``Recipe``: everything that decides a training run (saved as ``recipe.json`` next to the weights)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..model import ModelConfig
from ..model.config import k3_switches
from ..utils.files import read_regular

# bytes of a recipe file: a recipe is ~1 KB; a release's recipe.json, which also holds the run's history
# and metrics, ~7 KB for 1,600 steps
MAX_RECIPE_BYTES = 16 << 20


class RecipeFileError(ValueError):
    """A recipe file that cannot be read as one (the message starts with ``path:``)."""


def shipped_model_config() -> dict:
    """The shipped model's architecture: 3 KDA : 1 MLA, MoE, byte vocabulary, ~1.3 M parameters
    (5 MB fp32). Smaller than ``ModelConfig.tiny()`` (13 MB) so it trains on two CPU cores."""
    return dict(
        vocab_size=259, hidden_size=128, num_hidden_layers=4, kda_layers=[1, 2, 3], full_attn_layers=[4],
        linear_num_heads=2, linear_head_dim=64, short_conv_kernel_size=4,
        num_attention_heads=2, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
        intermediate_size=384, moe_intermediate_size=128, num_experts=4, num_experts_per_token=2,
        num_shared_experts=1, first_k_dense_replace=1,
        bos_token_id=256, eos_token_id=257, pad_token_id=258,
    )


def shipped_k3_config() -> dict:
    """The trained K3 demo's architecture: :func:`shipped_model_config`'s widths in Kimi K3's layout --
    every K3 change on (bounded forget gate, full-rank KDA output gate, q-LoRA and the output gate in
    MLA, SiTU, a latent MoE with MXFP4 routed experts and K3's two shared experts, attention residuals
    over blocks of 2 layers, one MTP layer), the release's layout (``model_type: kimi_k3``)."""
    return dict(shipped_model_config(), **k3_switches(), q_lora_rank=32, routed_expert_hidden_size=64,
                attn_res_block_size=2)


@dataclass
class Recipe:
    seed: int = 0
    model: dict = field(default_factory=shipped_model_config)  # ModelConfig fields
    steps: int = 1600
    tokens_per_step: int = 1024
    recall_fraction: float = 0.5  # share of each step's tokens that are MQAR sequences (rest: text)
    recall_loss_weight: float = 1.0  # loss = mean text CE + weight * mean answer CE
    min_pairs: int = 2
    max_pairs: int = 12
    text_len: int = 256  # bytes per text window (with <bos>)
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 100
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    dropout: float = 0.15  # training-only dropout on the embedding and every attention / FFN output
    eval_every: int = 200
    eval_recall_count: int = 256
    checkpoint_every: int = 50
    init_seed: int | None = None  # weight init seed (default: seed)
    mtp_loss_weight: float = 0.0  # with MTP layers: loss += weight * the MTP layers' mean CE (DeepSeek-V3: 0.3)

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        if not 0.0 <= self.recall_fraction <= 1.0:
            raise ValueError(f"recall_fraction: must lie in [0, 1], got {self.recall_fraction}")
        if not 1 <= self.min_pairs <= self.max_pairs <= 26:
            raise ValueError(f"min_pairs/max_pairs: need 1 <= min <= max <= 26, got {self.min_pairs}, {self.max_pairs}")
        if self.steps < 1 or self.tokens_per_step < self.text_len:
            raise ValueError("steps must be >= 1 and tokens_per_step >= text_len")
        if not 0.0 <= self.mtp_loss_weight <= 10.0:
            raise ValueError(f"mtp_loss_weight: must lie in [0, 10], got {self.mtp_loss_weight}")
        cfg = self.model_config()  # validates
        if self.mtp_loss_weight and not cfg.num_nextn_predict_layers:
            raise ValueError("mtp_loss_weight: the model has no MTP layers (num_nextn_predict_layers is 0)")

    @classmethod
    def k3(cls) -> "Recipe":
        """The trained K3 demo's recipe: the shipped recipe on :func:`shipped_k3_config`, its MTP layer
        trained to predict the token after next with weight 0.3 (DeepSeek-V3's first phase)."""
        return cls(model=shipped_k3_config(), mtp_loss_weight=0.3)

    def model_config(self) -> ModelConfig:
        return ModelConfig(**self.model)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Recipe":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"recipe: unknown fields {unknown}")
        return cls(**d)

    @classmethod
    def from_json(cls, path: str | Path) -> "Recipe":
        """A recipe file (or a release's ``recipe.json``, which nests it under ``"recipe"``). Every problem
        reading it is a :class:`RecipeFileError` (a ``ValueError``) naming ``path``: only a regular file
        of at most :data:`MAX_RECIPE_BYTES` is read (a FIFO would block, ``/dev/zero`` never ends); a bad
        field is the ``ValueError`` of :meth:`from_dict`."""
        d = _read_json(path)
        if not isinstance(d, dict):
            raise RecipeFileError(f"path: {path} holds a JSON {type(d).__name__}; a recipe is a JSON object")
        return cls.from_dict(d["recipe"] if "recipe" in d else d)

    def replace(self, **kw) -> "Recipe":
        return Recipe.from_dict({**self.to_dict(), **kw})


def _read_json(path: str | Path):
    """The JSON value in the recipe file ``path`` (:meth:`Recipe.from_json`): a regular file of at most
    :data:`MAX_RECIPE_BYTES` bytes of UTF-8 JSON, else a :class:`RecipeFileError` naming ``path``."""
    try:
        raw = read_regular(path, MAX_RECIPE_BYTES, RecipeFileError, "a recipe file")
    except OSError as e:  # missing, no permission
        raise RecipeFileError(f"path: cannot read {path} ({e.strerror or type(e).__name__})") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # not UTF-8, bad JSON, nested too deeply
        raise RecipeFileError(f"path: {path} is not a JSON recipe ({type(e).__name__}: {str(e)[:200]})") from None
