"""``ModelConfig``: the hybrid KDA + MLA architecture, read from a Kimi-Linear or a Kimi K3 ``config.json``.

One dataclass for both models, each field under its checkpoint name: Kimi-Linear's flat ``config.json``
or K3's multimodal wrapper (``text_config`` read, ``vision_config`` skipped; lightseekorg/tokenspeed
``runtime/configs/kimi_k3_config.py::KimiK3Config``, vLLM
``vllm/models/kimi_k3/nvidia/model.py::KimiK3ForConditionalGeneration``). The checkpoint's
``kda_layers`` / ``full_attn_layers`` are 1-indexed (vLLM ``is_kda_layer``); :attr:`ModelConfig.layer_types`
is 0-indexed. Design notes: ``docs/model.md#the-configuration``.

Article concept ``state.bytes``: the byte arithmetic of the three kinds of state (``docs/article.md#s1-2``) is
here too, for the tiny and the 48B configs (:meth:`state_bytes`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..utils.files import create_regular, read_regular
from ..utils.limits import MAX_CONTEXT_TOKENS, path_problem

# checkpoint name <- accepted aliases (transformers' attribute_map and older spellings)
_ALIASES = {
    "num_experts": ("num_local_experts",),
    "num_experts_per_token": ("num_experts_per_tok",),
    "num_shared_experts": ("n_shared_experts",),
    "moe_renormalize": ("norm_topk_prob",),
    "num_expert_group": ("n_group",),
    "max_position_embeddings": ("model_max_length",),
}


# micro()'s widths (half of tiny()'s), shared by its K3 twin k3_micro()
_MICRO_WIDTHS = dict(hidden_size=128, linear_head_dim=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                     v_head_dim=16, intermediate_size=256, moe_intermediate_size=64)
# how a batch mixing decodes and prefill chunks runs the KDA layers (ForwardBatch.mixed_batch, the engine's
# SchedulerConfig.mixed_batch): one chunk-kernel call for all, or the decodes apart through the recurrent kernel
MIXED_BATCH_POLICIES = ("chunk", "split")
MAX_CONFIG_BYTES = 16 << 20  # Kimi-Linear's config.json is ~3 KB; a 200,000-layer list ~1.4 MB


class ConfigError(ValueError):
    """An invalid or unreadable model configuration (names the field)."""


def checkpoint_folder(path: str | Path, arg: str) -> Path:
    """``path`` as a checkpoint folder holding a ``config.json``, or a :class:`ConfigError` naming the
    argument that gave it (``model``, ``draft_model``): a path no file can have (a NUL byte, too long a
    name, which ``is_dir`` answers with an untyped ``OSError``), no folder there, or no config in it.
    Called by ``LLM`` and the drafter / disaggregation loaders before anything is read."""
    problem = path_problem(str(path))
    if problem:
        raise ConfigError(f"{arg}: {problem}")
    p = Path(path)
    try:
        is_dir, has_config = p.is_dir(), (p / "config.json").is_file()
    except OSError as e:  # ENAMETOOLONG (a name over 255 bytes), ELOOP, EACCES
        raise ConfigError(f"{arg}: {str(path)[:60]!r} cannot name a folder ({e.strerror or e})") from None
    if not is_dir:
        raise ConfigError(f"{arg}: {path} is not a folder (a checkpoint folder, made by save_pretrained)")
    if not has_config:
        raise ConfigError(f"{arg}: {path} holds no config.json, so it is not a checkpoint folder")
    return p


def _need(cond: bool, name: str, msg: str) -> None:
    """A :class:`ConfigError` ``"name: msg"`` unless ``cond``: every value check of :meth:`ModelConfig.validate`."""
    if not cond:
        raise ConfigError(f"{name}: {msg}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# a field type of _FIELD_TYPES -> (its test, how an error says it)
_TYPE_CHECKS = {
    "int": (_is_int, "an int"),
    "int?": (lambda v: v is None or _is_int(v), "an int or null"),
    "float": (_is_number, "a number"),
    "float?": (lambda v: v is None or _is_number(v), "a number or null"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "ints": (lambda v: isinstance(v, (list, tuple)) and all(_is_int(x) for x in v), "a list of ints"),
    "dict?": (lambda v: v is None or isinstance(v, dict), "a JSON object or null"),
    "ids?": (lambda v: v is None or _is_int(v) or (isinstance(v, (list, tuple)) and len(v) > 0
                                                   and all(_is_int(x) for x in v)),
             "an int, a non-empty list of ints, or null"),
}


def _check_type(name: str, value, kind: str) -> None:
    """A :class:`ConfigError` naming ``name`` unless ``value`` has the field type ``kind`` (:data:`_TYPE_CHECKS`)."""
    test, what = _TYPE_CHECKS[kind]
    if not test(value):
        raise ConfigError(f"{name}: must be {what}, got {type(value).__name__} {str(value)[:40]!r}")


def _read_config_text(p: Path) -> str:
    """The text of the ``config.json`` at ``p``: a regular file (checked before it is opened, and
    opened non-blocking) of at most :data:`MAX_CONFIG_BYTES` bytes of UTF-8, else a :class:`ConfigError`
    naming ``path``. ``st_size`` alone is no bound: it is 0 for a FIFO or ``/dev/urandom``."""
    try:
        return read_regular(p, MAX_CONFIG_BYTES, ConfigError, "a config.json").decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"path: no config.json at {p}") from None
    except OSError as e:  # no permission, a broken disk
        raise ConfigError(f"path: cannot read {p} ({e.strerror or e})") from None
    except UnicodeError as e:
        raise ConfigError(f"path: {p} is not a valid JSON config (not UTF-8: {e})") from None


# linear_attn_config key -> field, and back
_LINEAR_KEYS = {"kda_layers": "kda_layers", "full_attn_layers": "full_attn_layers", "num_heads": "linear_num_heads",
                "head_dim": "linear_head_dim", "short_conv_kernel_size": "short_conv_kernel_size",
                "use_full_rank_gate": "use_full_rank_gate", "gate_lower_bound": "gate_lower_bound"}
_LINEAR_NAMES = {field_name: key for key, field_name in _LINEAR_KEYS.items()}


def _resolve_aliases(d: dict) -> dict[str, str]:
    """Rename transformers' alias keys of ``d`` to the checkpoint names (in place, when the checkpoint
    name is not there too); returns field -> the key the file used, for error messages."""
    written = {}
    for key, aliases in _ALIASES.items():
        for a in aliases:
            if a in d and key not in d:
                d[key] = d.pop(a)
                written[key] = a
    return written


def _refuse_nulls(values: dict, key_of) -> None:
    """Raise a :class:`ConfigError` for the first ``None`` in ``values`` (field -> value) whose field's
    type does not allow None; the message names the key as the file wrote it (``key_of(field)``)."""
    for name, value in values.items():
        if value is None and not _FIELD_TYPES[name].endswith("?"):
            annotation = next(f.type for f in fields(ModelConfig) if f.name == name)
            raise ConfigError(f"{key_of(name)}: must not be null (its type is {annotation}); "
                              f"leave the key out for the default")


@dataclass
class ModelConfig:
    vocab_size: int = 512
    hidden_size: int = 256
    num_hidden_layers: int = 4
    rms_norm_eps: float = 1e-5
    hidden_act: str = "silu"
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 8192
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None  # Kimi configs list several stop ids: every one stops a request
    pad_token_id: int | None = None
    # KDA (linear_attn_config), 1-indexed layer lists as in the checkpoint
    kda_layers: list[int] = field(default_factory=lambda: [1, 2, 3])
    full_attn_layers: list[int] = field(default_factory=lambda: [4])
    linear_num_heads: int = 4
    linear_head_dim: int = 64
    short_conv_kernel_size: int = 4
    # MLA (NoPE; q_lora_rank must be None as in Kimi-Linear)
    num_attention_heads: int = 4
    q_lora_rank: int | None = None
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    # MLP / MoE
    intermediate_size: int = 512
    moe_intermediate_size: int = 128
    num_experts: int = 4
    num_experts_per_token: int = 2
    num_shared_experts: int = 1
    first_k_dense_replace: int = 1
    routed_scaling_factor: float = 2.446
    moe_renormalize: bool = True
    num_expert_group: int = 1
    topk_group: int = 1
    # ---- Kimi K3 (the defaults are Kimi-Linear's: every K3 change off) ----
    activation_situ_beta: float | None = None  # hidden_act "situ": beta * tanh(gate / beta) * sigmoid(gate)
    activation_situ_linear_beta: float | None = None  # and up soft-clipped to linear_beta * tanh(up / linear_beta)
    use_full_rank_gate: bool = False  # KDA's output gate one g_proj [H*K, hidden] instead of g_a / g_b
    gate_lower_bound: float | None = None  # KDA's forget gate lower_bound * sigmoid(...) in [lower_bound, 0)
    mla_use_output_gate: bool = False  # MLA's output times sigmoid(g_proj(x)) before o_proj
    routed_expert_hidden_size: int | None = None  # the latent MoE: routed experts run at this width
    latent_moe_use_norm: bool = False  # RMSNorm of the routed experts' combined latent output
    attn_res_block_size: int | None = None  # attention residuals over blocks of this many layers
    num_nextn_predict_layers: int = 0  # MTP layers (checkpoint layers num_hidden_layers, ...)
    quantization_config: dict | None = None  # {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}
    model_type: str = "kimi_linear"  # "kimi_k3": the release's multimodal wrapper (text_config, language_model.)

    def __post_init__(self) -> None:
        self.validate()
        self.kda_layers, self.full_attn_layers = list(self.kda_layers), list(self.full_attn_layers)

    # ---- presets -------------------------------------------------------------------------------
    @classmethod
    def tiny(cls) -> "ModelConfig":
        """The CPU default: ~3M parameters, 4 layers, 3 KDA : 1 MLA, small MoE, byte vocabulary."""
        return cls(bos_token_id=256, eos_token_id=257, pad_token_id=258)

    @classmethod
    def micro(cls) -> "ModelConfig":
        """:meth:`tiny`'s layout (4 layers, 3 KDA : 1 MLA, a dense first MLP then the MoE, the byte
        vocabulary) at half its widths: ~0.9M parameters. Every code path of the model and the engine
        runs, with a quarter of the weights to read per token: the tests that check how the engine
        schedules, caches and hands off (not what a size changes) run on it."""
        return cls(**_MICRO_WIDTHS, bos_token_id=256, eos_token_id=257, pad_token_id=258)

    @classmethod
    def kimi_linear_48b(cls) -> "ModelConfig":
        """Kimi-Linear-48B-A3B (for byte arithmetic; never instantiated in tests)."""
        return cls(
            vocab_size=163840,
            hidden_size=2304,
            num_hidden_layers=27,
            max_position_embeddings=1048576,
            bos_token_id=163584,
            eos_token_id=163586,
            pad_token_id=163839,
            kda_layers=[1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
            full_attn_layers=[4, 8, 12, 16, 20, 24, 27],
            linear_num_heads=32,
            linear_head_dim=128,
            num_attention_heads=32,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
            intermediate_size=9216,
            moe_intermediate_size=1024,
            num_experts=256,
            num_experts_per_token=8,
            num_shared_experts=1,
        )

    @classmethod
    def kimi_k3(cls) -> "ModelConfig":
        """Kimi K3's text model as released (``moonshotai/kimi-k3`` config.json as tokenspeed's
        ``kimi_k3_config.py`` transcribes it): 93 layers, 69 KDA and 24 MLA, 896 routed experts in
        MXFP4. For byte arithmetic; never built."""
        full = list(range(4, 93, 4)) + [93]
        return cls(
            vocab_size=163840, hidden_size=7168, num_hidden_layers=93, max_position_embeddings=1048576,
            bos_token_id=163584, eos_token_id=163586, pad_token_id=163839,
            kda_layers=[i for i in range(1, 94) if i not in full], full_attn_layers=full,
            linear_num_heads=96, linear_head_dim=128, use_full_rank_gate=True, gate_lower_bound=-5.0,
            num_attention_heads=96, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=128, mla_use_output_gate=True,
            hidden_act="situ", activation_situ_beta=4.0, activation_situ_linear_beta=25.0,
            intermediate_size=33792, moe_intermediate_size=3072, num_experts=896, num_experts_per_token=16,
            num_shared_experts=2, routed_scaling_factor=1.0, routed_expert_hidden_size=3584, latent_moe_use_norm=True,
            attn_res_block_size=12, quantization_config=dict(MXFP4_QUANTIZATION), model_type="kimi_k3")

    @classmethod
    def k3_tiny(cls) -> "ModelConfig":
        """Kimi K3's layout at :meth:`tiny`'s size: 4 layers (3 KDA : 1 MLA, the last layer MLA as in K3),
        every K3 change on (bounded gate, full-rank KDA gate, q-LoRA and gated MLA, SiTU, a latent MoE
        with MXFP4 experts, attention residuals over blocks of 2 layers, one MTP layer), byte vocabulary."""
        return cls(**k3_switches(), attn_res_block_size=2, num_experts=8, q_lora_rank=64, routed_expert_hidden_size=128,
                   bos_token_id=256, eos_token_id=257, pad_token_id=258)

    @classmethod
    def k3_micro(cls) -> "ModelConfig":
        """:meth:`k3_tiny` at :meth:`micro`'s widths (and 4 experts): every K3 code path, a fraction of the
        weights; the engine tests of K3 run on it."""
        return cls(**k3_switches(), **_MICRO_WIDTHS, attn_res_block_size=2, num_experts=4, q_lora_rank=32,
                   routed_expert_hidden_size=64, bos_token_id=256, eos_token_id=257, pad_token_id=258)

    # ---- derived -------------------------------------------------------------------------------
    @property
    def is_k3(self) -> bool:
        """Whether the release layout is K3's (a ``text_config`` wrapper, tensors under ``language_model.``)."""
        return self.model_type == "kimi_k3"

    @property
    def experts_mxfp4(self) -> bool:
        """Whether the routed experts are stored in MXFP4 (``quantization_config``'s format)."""
        return self.quantization_config is not None

    @property
    def expert_input_size(self) -> int:
        """The width a routed expert reads: the latent MoE's ``routed_expert_hidden_size``, else ``hidden_size``."""
        return self.routed_expert_hidden_size or self.hidden_size

    @property
    def layer_types(self) -> list[str]:
        """0-indexed ``"kda"`` / ``"mla"`` per layer."""
        kda = {i - 1 for i in self.kda_layers}
        return ["kda" if i in kda else "mla" for i in range(self.num_hidden_layers)]

    @property
    def kda_layer_ids(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "kda"]

    @property
    def mla_layer_ids(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "mla"]

    def is_moe_layer(self, layer_idx: int) -> bool:
        return self.num_experts > 0 and layer_idx >= self.first_k_dense_replace

    @property
    def kda_dim(self) -> int:
        return self.linear_num_heads * self.linear_head_dim

    @property
    def mla_latent_dim(self) -> int:
        """Width of one cached MLA row: ``c_kv`` plus the shared ``k_pe``."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def state_bytes(self, recurrent_bytes: int = 4, conv_bytes: int = 2, kv_bytes: int = 2) -> dict:
        """Per-sequence and per-token cache sizes (defaults: fp32 recurrent, bf16 conv and KV, as served)."""
        H, D, W = self.linear_num_heads, self.linear_head_dim, self.short_conv_kernel_size
        recurrent = H * D * D * recurrent_bytes
        conv = 3 * self.kda_dim * (W - 1) * conv_bytes
        n_kda, n_mla = len(self.kda_layer_ids), len(self.mla_layer_ids)
        mla_tok = self.mla_latent_dim * kv_bytes
        return {
            "kda_recurrent_per_layer": recurrent,
            "kda_conv_per_layer": conv,
            "kda_per_seq": n_kda * (recurrent + conv),
            "mla_kv_per_token_per_layer": mla_tok,
            "mla_kv_per_token": n_mla * mla_tok,
            "all_mla_kv_per_token": self.num_hidden_layers * mla_tok,
            # tokens at which one KDA layer's state costs as much as one MLA layer's KV
            "break_even_tokens": (recurrent + conv) / mla_tok,
        }

    # ---- validation & I/O ----------------------------------------------------------------------
    def validate(self) -> None:
        """Check every field's type (``int`` fields reject ``bool`` and floats), then the values; the
        first problem is a :class:`ConfigError` naming the field. Runs on construction."""
        for f in fields(self):
            _check_type(f.name, getattr(self, f.name), _FIELD_TYPES[f.name])
        for f in ("vocab_size", "hidden_size", "num_hidden_layers", "linear_num_heads", "linear_head_dim",
                  "num_attention_heads", "kv_lora_rank", "v_head_dim", "qk_nope_head_dim", "short_conv_kernel_size",
                  "intermediate_size", "max_position_embeddings", "num_expert_group", "topk_group"):
            _need(getattr(self, f) > 0, f, f"must be a positive int, got {getattr(self, f)!r}")
        _need(self.max_position_embeddings <= MAX_CONTEXT_TOKENS, "max_position_embeddings",
             f"must be at most {MAX_CONTEXT_TOKENS:,} tokens, got {self.max_position_embeddings!r}")
        for f in ("qk_rope_head_dim", "num_experts", "num_shared_experts"):
            _need(getattr(self, f) >= 0, f, f"must be an int >= 0, got {getattr(self, f)!r}")
        _need(math.isfinite(self.rms_norm_eps) and self.rms_norm_eps > 0, "rms_norm_eps",
             f"must be a finite number > 0, got {self.rms_norm_eps!r}")
        _need(math.isfinite(self.routed_scaling_factor) and self.routed_scaling_factor > 0, "routed_scaling_factor",
             f"must be a finite number > 0, got {self.routed_scaling_factor!r}")
        for f in ("bos_token_id", "eos_token_id", "pad_token_id"):
            v = getattr(self, f)
            ids = v if isinstance(v, (list, tuple)) else [] if v is None else [v]
            _need(all(0 <= x < self.vocab_size for x in ids), f,
                 f"must be None or lie in [0, vocab_size={self.vocab_size}), got {v!r}")
        L = self.num_hidden_layers
        both = list(self.kda_layers) + list(self.full_attn_layers)
        _need(len(both) == L, "full_attn_layers", f"kda_layers and full_attn_layers must partition 1..{L}; they "
             f"list {len(both)} layers between them")
        _need(all(1 <= i <= L for i in both), "kda_layers",
             f"layer numbers are 1-indexed and must lie in [1, {L}], got kda={self.kda_layers} full={self.full_attn_layers}")
        _need(sorted(both) == list(range(1, L + 1)), "full_attn_layers",
             f"kda_layers and full_attn_layers must partition 1..{L}, got kda={self.kda_layers} full={self.full_attn_layers}")
        _need(0 <= self.first_k_dense_replace <= L, "first_k_dense_replace", f"must lie in [0, {L}]")
        if self.num_experts > 0:
            _need(self.moe_intermediate_size > 0, "moe_intermediate_size", "must be a positive int with experts")
            _need(1 <= self.num_experts_per_token <= self.num_experts, "num_experts_per_token",
                 f"must lie in [1, num_experts={self.num_experts}]")
            _need(self.num_experts % self.num_expert_group == 0, "num_expert_group", "must divide num_experts")
            _need(1 <= self.topk_group <= self.num_expert_group, "topk_group", "must lie in [1, num_expert_group]")
        _need(self.hidden_act in ("silu", "situ"), "hidden_act", f"must be 'silu' or 'situ', got {self.hidden_act!r}")
        self._validate_k3()

    def _validate_k3(self) -> None:
        """The K3 fields' values (their types are checked with the rest)."""
        def positive(name: str) -> None:
            v = getattr(self, name)
            _need(v is None or v > 0, name, f"must be null or a positive number, got {v!r}")
            _need(v is None or math.isfinite(v), name, f"must be finite, got {v!r}")

        for f in ("q_lora_rank", "routed_expert_hidden_size", "attn_res_block_size",
                  "activation_situ_beta", "activation_situ_linear_beta"):
            positive(f)
        lb = self.gate_lower_bound
        _need(lb is None or (math.isfinite(lb) and lb < 0), "gate_lower_bound",
             f"must be null or a finite negative number (K3 ships -5.0), got {lb!r}")
        _need(self.num_nextn_predict_layers >= 0, "num_nextn_predict_layers", "must be an int >= 0")
        _need(not self.latent_moe_use_norm or self.routed_expert_hidden_size is not None, "latent_moe_use_norm",
             "needs routed_expert_hidden_size (the latent width the norm runs at)")
        _need(self.model_type in ("kimi_linear", "kimi_k3"), "model_type",
             f"must be 'kimi_linear' or 'kimi_k3', got {self.model_type!r}")
        q = self.quantization_config
        if q is not None:
            for key, want in MXFP4_QUANTIZATION.items():
                _need(q.get(key) == want, f"quantization_config.{key}",
                     f"only {want!r} is supported (MXFP4 routed experts), got {q.get(key)!r}")
            _need(self.num_experts > 0, "quantization_config", "MXFP4 quantises the routed experts; there are none")
            for name, width in (("routed_expert_hidden_size", self.expert_input_size),
                                ("moe_intermediate_size", self.moe_intermediate_size)):
                _need(width % MXFP4_BLOCK == 0, name, f"an MXFP4 expert's input width ({width}) must be a multiple of "
                     f"{MXFP4_BLOCK} (one shared scale per {MXFP4_BLOCK} values)")

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """Read a ``config.json`` dict: Kimi-Linear's flat one, or K3's release wrapper (``model_type:
        kimi_k3``; its ``text_config`` read, ``vision_config`` and the media fields skipped). Checkpoint
        keys, transformers aliases accepted. A ``null`` is refused for every field whose type does not
        allow None: it is a value the file gives, not "use the default", and taking the default would
        serve another model than the file's."""
        if not isinstance(d, dict):
            raise ConfigError(f"config: expected a JSON object, got {type(d).__name__}")
        if d.get("model_type") == "kimi_k3":
            return cls._from_k3_release(d)
        if d.get("model_type") not in (None, "kimi_linear"):
            raise ConfigError(f"model_type: expected 'kimi_linear' or 'kimi_k3', got {d.get('model_type')!r}")
        return cls._from_text_config(dict(d))

    @classmethod
    def _from_k3_release(cls, d: dict) -> "ModelConfig":
        """K3's multimodal wrapper: the text model's fields from ``text_config`` (the quantization config may
        sit at either level), the vision part skipped; the config remembers the layout (``model_type``)."""
        text = d.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError(f"text_config: a kimi_k3 config needs the text model's config as a JSON object, "
                              f"got {type(text).__name__}")
        text = dict(text)
        if text.get("model_type") not in (None, "kimi_linear"):
            raise ConfigError(f"text_config.model_type: expected 'kimi_linear', got {text.get('model_type')!r}")
        if "quantization_config" not in text and d.get("quantization_config") is not None:
            text["quantization_config"] = d["quantization_config"]
        text["model_type"] = "kimi_k3"
        try:
            return cls._from_text_config(text)
        except ConfigError as e:
            raise ConfigError(f"text_config.{e}") from None

    @classmethod
    def _from_text_config(cls, d: dict) -> "ModelConfig":
        """A flat text-model dict (Kimi-Linear's ``config.json``, or K3's ``text_config``)."""
        lin = d.pop("linear_attn_config", None) or {}
        if not isinstance(lin, dict):
            raise ConfigError(f"linear_attn_config: must be a JSON object, got {type(lin).__name__}")
        written = _resolve_aliases(d)
        _refuse_nulls({k: d[k] for k in d if k in _FIELD_TYPES}, lambda name: written.get(name, name))
        _refuse_nulls({_LINEAR_KEYS[k]: v for k, v in lin.items() if k in _LINEAR_KEYS},
                      lambda name: "linear_attn_config." + _LINEAR_NAMES[name])
        if lin:
            for key, name in _LINEAR_KEYS.items():
                if key in lin:
                    d.setdefault(name, lin[key])
        elif "kda_layers" not in d:
            raise ConfigError("linear_attn_config: missing (needs kda_layers and full_attn_layers, 1-indexed)")
        return cls(**{k: v for k, v in d.items() if k in _FIELD_TYPES})

    @classmethod
    def from_json(cls, path: str | Path) -> "ModelConfig":
        """Read a ``config.json`` (or a folder holding one); every problem is a :class:`ConfigError`
        naming ``path`` or the field. Only a regular file of at most :data:`MAX_CONFIG_BYTES` is read
        (a FIFO would block, ``/dev/urandom`` would read without end: :func:`_read_config_text`)."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        text = _read_config_text(p)
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:  # bad JSON, a 5,000-digit int, nesting too deep
            raise ConfigError(f"path: {p} is not a valid JSON config ({type(e).__name__}: {str(e)[:200]})") from None
        return cls.from_dict(d)

    def to_dict(self) -> dict:
        """The ``config.json`` dict (checkpoint key names): Kimi-Linear's flat one (loadable by
        transformers; K3's fields left out where they are off), or for ``model_type: kimi_k3`` the
        release's wrapper with the text model in ``text_config`` (no ``vision_config``: this engine
        serves the text model only)."""
        d = asdict(self)
        d.pop("model_type")
        if not self.is_k3:
            for name in K3_FIELDS:
                if d[name] == _DEFAULTS[name]:
                    del d[name]
        lin = {key: d.pop(name) for key, name in _LINEAR_KEYS.items() if name in d}
        d.update(model_type="kimi_linear", architectures=["KimiLinearForCausalLM"], linear_attn_config=lin,
                 mla_use_nope=True, num_key_value_heads=self.num_attention_heads, torch_dtype="float32")
        if not self.is_k3:
            return d
        return {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"], "text_config": d,
                "pad_token_id": self.pad_token_id}

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Every end-of-sequence id (``eos_token_id`` may list several, as Kimi's configs do); ``()``
        when the model has none. The scheduler stops a request at any of them."""
        v = self.eos_token_id
        return () if v is None else tuple(v) if isinstance(v, (list, tuple)) else (v,)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON to ``path``. A ``path`` that exists and is not a regular file (a
        FIFO would block the write, a device would take it) is a :class:`ConfigError` naming ``path``,
        before it is opened for writing (:func:`~kda_ref.utils.files.create_regular`)."""
        with create_regular(path, ConfigError) as f:
            f.write(json.dumps(self.to_dict(), indent=2).encode("utf-8"))


_KINDS = {"int": "int", "int | None": "int?", "float": "float", "float | None": "float?", "bool": "bool", "str": "str",
          "list[int]": "ints", "int | list[int] | None": "ids?", "dict | None": "dict?"}

# compressed-tensors' MXFP4 (OCP Microscaling FP4): what K3's release config says of its routed experts
# (llama.cpp ``conversion/kimi_k3.py`` reads these two keys); one E8M0 scale per MXFP4_BLOCK values
MXFP4_QUANTIZATION = {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}
MXFP4_BLOCK = 32

# the fields K3 adds; a Kimi-Linear config.json leaves out those at their (Kimi-Linear) defaults
K3_FIELDS = ("activation_situ_beta", "activation_situ_linear_beta", "use_full_rank_gate", "gate_lower_bound",
             "mla_use_output_gate", "routed_expert_hidden_size", "latent_moe_use_norm", "attn_res_block_size",
             "num_nextn_predict_layers", "quantization_config")


def k3_switches() -> dict:
    """Every K3 change on, at K3's values, the widths left to the caller: the presets
    :meth:`ModelConfig.k3_tiny` / ``k3_micro`` and the trained K3 demo's recipe
    (:func:`kda_ref.train.recipe.shipped_k3_config`) start from it."""
    return dict(use_full_rank_gate=True, gate_lower_bound=-5.0, mla_use_output_gate=True, hidden_act="situ",
                activation_situ_beta=4.0, activation_situ_linear_beta=25.0, num_shared_experts=2,
                routed_scaling_factor=1.0, latent_moe_use_norm=True, num_nextn_predict_layers=1,
                quantization_config=dict(MXFP4_QUANTIZATION), model_type="kimi_k3")
_FIELD_TYPES = {f.name: _KINDS[f.type] for f in fields(ModelConfig)}
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}
