"""What a configuration costs before anything is built: parameter and tensor counts, float32 bytes,
and the smallest cache pool that can hold one request -- all from the config's numbers, in O(1).

A ``config.json`` is user input: ``num_experts: 1000000`` would otherwise build three million modules
(minutes, gigabytes) before any check could fail, and ``hidden_size: 200000`` would allocate gigabytes
of weights and die in the allocator. :func:`check_fits` refuses such a config first, with a
:class:`ModelSizeError` naming the field that drives the size and the bytes:

* the weights (every parameter and buffer as float32, the dtype :class:`~kda_ref.model.HybridModel`
  builds) plus the pool's smallest useful size (one KDA state slot and one KV page) must fit in the
  memory limit: ``KDA_REF_MEMORY_LIMIT_BYTES`` when set, else the memory the OS reports available;
* the model must have at most :data:`MAX_TENSORS` weight tensors: each is a Python module built one by
  one, so their number costs time and memory of its own (Kimi-Linear-48B has ~21k).

The field named is the one whose reset to its default (:class:`~kda_ref.model.ModelConfig`'s) would
shrink the total the most. ``tests/test_input_guards.py`` checks the counts against built models and
``tests/test_promises.py`` the smallest pool against the pool's own unit sizes.
"""

from __future__ import annotations

import os
from dataclasses import fields

from ..utils import machine_memory_bytes
from .config import ConfigError, ModelConfig

MAX_TENSORS = 200_000
LIMIT_ENV = "KDA_REF_MEMORY_LIMIT_BYTES"
# the fields a size can blow up through (the others are flags, ids and layer lists)
SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "linear_num_heads", "linear_head_dim",
               "short_conv_kernel_size", "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim",
               "qk_rope_head_dim", "v_head_dim", "intermediate_size", "moe_intermediate_size", "num_experts",
               "num_shared_experts")
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig) if f.name in SIZE_FIELDS}


class ModelSizeError(ConfigError):
    """A configuration whose model cannot be built here: too many bytes or too many tensors (names the
    field that drives the size, and the numbers)."""


def _counts(d: dict) -> tuple[int, int]:
    """``(elements, tensors)`` of every parameter and buffer of a model with the numbers ``d`` (the
    config's size fields plus the layer counts ``n_kda``, ``n_mla``, ``n_moe``) -- the shapes of
    :mod:`kda_ref.model`'s modules, written out."""
    H, V = d["hidden_size"], d["vocab_size"]
    D, hd, nh, W = d["linear_num_heads"] * d["linear_head_dim"], d["linear_head_dim"], d["linear_num_heads"], \
        d["short_conv_kernel_size"]
    # KDA: q/k/v, three depthwise convs, A_log, dt_bias, f_a/f_b, b, g_a/g_b, o_norm, o_proj
    kda = 3 * H * D + 3 * D * W + nh + D + 2 * (H * hd + hd * D) + H * nh + hd + D * H
    na, nope, pe, vd, lat = (d["num_attention_heads"], d["qk_nope_head_dim"], d["qk_rope_head_dim"],
                             d["v_head_dim"], d["kv_lora_rank"])
    # MLA: q, kv_a (latent + k_pe), kv_a_layernorm, kv_b, o
    mla = H * na * (nope + pe) + H * (lat + pe) + lat + lat * na * (nope + vd) + na * vd * H
    E, Im, S = d["num_experts"], d["moe_intermediate_size"], d["num_shared_experts"]
    moe = E * H + E + 3 * E * H * Im + (3 * H * Im * S if S else 0)  # router, its bias buffer, experts, shared
    n_kda, n_mla, n_moe = d["n_kda"], d["n_mla"], d["n_moe"]
    n_dense = n_kda + n_mla - n_moe
    elements = (2 * V * H + H + (n_kda + n_mla) * 2 * H + n_kda * kda + n_mla * mla + n_dense * 3 * H * d["intermediate_size"]
                + n_moe * moe)
    tensors = (3 + 2 * (n_kda + n_mla) + 15 * n_kda + 5 * n_mla + 3 * n_dense
               + n_moe * (2 + 3 * E + (3 if S else 0)))
    return elements, tensors


def _pool_min(d: dict, page_size: int, el: int = 4) -> int:
    """One KDA state slot (fp32 recurrent + conv window, all KDA layers) + one KV page (all MLA layers):
    :class:`~kda_ref.memory.PoolAccounting`'s smallest budget."""
    D, hd, W = d["linear_num_heads"] * d["linear_head_dim"], d["linear_head_dim"], d["short_conv_kernel_size"]
    state = d["n_kda"] * (d["linear_num_heads"] * hd * hd * 4 + 3 * D * (W - 1) * el)
    return state + d["n_mla"] * page_size * (d["kv_lora_rank"] + d["qk_rope_head_dim"]) * el


def cache_unit_bytes(config: ModelConfig, page_size: int, el: int = 4) -> tuple[int, int]:
    """``(state_bytes, kv_page_bytes)``: one KDA state (fp32 recurrent state + conv windows of ``el``-byte
    elements, all KDA layers) and one KV page of ``page_size`` tokens (MLA latent rows, all MLA layers).
    The memory pool (:func:`kda_ref.memory.pool.unit_sizes`) and a draft model's cache size use it."""
    c = config
    recurrent = c.linear_num_heads * c.linear_head_dim * c.linear_head_dim * 4  # always fp32
    conv = 3 * c.kda_dim * (c.short_conv_kernel_size - 1) * el
    return len(c.kda_layer_ids) * (recurrent + conv), len(c.mla_layer_ids) * page_size * c.mla_latent_dim * el


def _numbers(config: ModelConfig) -> dict:
    d = {f: getattr(config, f) for f in SIZE_FIELDS}
    L = config.num_hidden_layers
    moe = max(0, L - config.first_k_dense_replace) if config.num_experts > 0 else 0
    d.update(n_kda=len(config.kda_layers), n_mla=len(config.full_attn_layers), n_moe=moe)
    return d


def _with_default(d: dict, name: str) -> dict:
    """``d`` with field ``name`` at its default; the layer counts scale with ``num_hidden_layers``."""
    out = dict(d, **{name: _DEFAULTS[name]})
    if name == "num_hidden_layers" and d["num_hidden_layers"] > 0:
        scale = _DEFAULTS[name] / d["num_hidden_layers"]
        out.update({k: d[k] * scale for k in ("n_kda", "n_mla", "n_moe")})
    return out


def parameter_count(config: ModelConfig) -> tuple[int, int]:
    """``(elements, tensors)`` of the parameters and buffers :class:`~kda_ref.model.HybridModel` builds
    for ``config`` (``lm_head`` counted even when tied: the model builds it, then shares it)."""
    return _counts(_numbers(config))


def model_bytes(config: ModelConfig, page_size: int = 16) -> dict:
    """``{"weights": float32 bytes of every parameter and buffer, "pool_min": the smallest useful pool,
    "tensors": how many weight tensors}``."""
    d = _numbers(config)
    elements, tensors = _counts(d)
    return {"weights": 4 * elements, "pool_min": _pool_min(d, page_size), "tensors": tensors}


def memory_limit_bytes() -> tuple[int | None, str]:
    """``(bytes, where from)``: ``KDA_REF_MEMORY_LIMIT_BYTES`` when set, else the OS's ``MemAvailable``
    (Linux), else the machine's physical memory; ``None`` where nothing says."""
    env = os.environ.get(LIMIT_ENV)
    if env:
        try:
            value = int(env)
        except ValueError:
            raise ConfigError(f"{LIMIT_ENV}: must be an int number of bytes, got {env[:40]!r}") from None
        if value <= 0:
            raise ConfigError(f"{LIMIT_ENV}: must be positive, got {value}")
        return value, LIMIT_ENV
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available memory"
    except (OSError, ValueError, IndexError):
        pass
    return machine_memory_bytes(), "physical memory"


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**26 else f"{n / 2**20:,.2f} MiB"


def _driver(d: dict, cost) -> str:
    """The size field whose default would lower ``cost(d)`` the most."""
    return max(SIZE_FIELDS, key=lambda f: cost(d) - cost(_with_default(d, f)))


def check_fits(config: ModelConfig, *, page_size: int | None = 16, limit_bytes: int | None = None,
               count_bytes: bool = True) -> dict:
    """Refuse ``config`` (:class:`ModelSizeError`) when its model has more than :data:`MAX_TENSORS`
    weight tensors, or -- with ``count_bytes`` -- when its float32 weights plus the smallest pool for
    ``page_size`` (``None``: no pool) exceed ``limit_bytes`` (default :func:`memory_limit_bytes`).
    Returns :func:`model_bytes`. Pure arithmetic on the config: nothing is built or allocated.
    Called by :class:`~kda_ref.model.HybridModel` (weights only), :func:`~kda_ref.model.load_pretrained`
    (before it builds anything) and :class:`~kda_ref.LLM` (weights and pool)."""
    d = _numbers(config)
    elements, tensors = _counts(d)
    if tensors > MAX_TENSORS:
        f = _driver(d, lambda x: _counts(x)[1])
        raise ModelSizeError(f"{f}: {getattr(config, f)} makes a model of {tensors:,} weight tensors, more than "
                             f"{MAX_TENSORS:,} (each is a module built one by one; Kimi-Linear-48B has ~21k)")
    pool = _pool_min(d, page_size) if page_size else 0
    out = {"weights": 4 * elements, "pool_min": pool, "tensors": tensors}
    if not count_bytes:
        return out
    limit, source = (limit_bytes, "the limit given") if limit_bytes is not None else memory_limit_bytes()
    need = 4 * elements + pool
    if limit is not None and need > limit:
        f = _driver(d, lambda x: 4 * _counts(x)[0] + (_pool_min(x, page_size) if page_size else 0))
        raise ModelSizeError(f"{f}: {getattr(config, f)} makes the model need {_gib(need)} ({_gib(4 * elements)} of "
                             f"float32 weights + {_gib(pool)} for the smallest cache pool), more than the "
                             f"{_gib(limit)} of {source}")
    return out
