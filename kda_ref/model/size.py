"""What a configuration costs before anything is built: parameter and tensor counts, float32 bytes,
and the smallest cache pool that can hold one request -- all from the config's numbers, in O(1).

:func:`check_fits` refuses a ``config.json`` whose weights plus the smallest pool exceed the memory
limit (``KDA_REF_MEMORY_LIMIT_BYTES``, else the memory the OS reports available) or that has more than
:data:`MAX_TENSORS` weight tensors, with a :class:`ModelSizeError` naming the field that drives the size
and the bytes. Design notes: ``docs/model.md#shapes-and-size``.
"""

from __future__ import annotations

import os
from dataclasses import fields

from ..utils import machine_memory_bytes
from .config import ConfigError, ModelConfig
from .shapes import (SIZE_FIELDS, dense_shapes, elements, expert_shapes, kda_shapes, layer_shapes, mla_shapes,
                     moe_shapes, mtp_extra_shapes, numbers, top_shapes)

MAX_TENSORS = 200_000
LIMIT_ENV = "KDA_REF_MEMORY_LIMIT_BYTES"
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig) if f.name in SIZE_FIELDS}


class ModelSizeError(ConfigError):
    """A configuration whose model cannot be built here: too many bytes or too many tensors (names the
    field that drives the size, and the numbers)."""


def _block(shapes: dict) -> tuple[int, int]:
    """``(elements, tensors)`` of one block's shapes."""
    return elements(shapes), len(shapes)


def _counts(d: dict) -> tuple[int, int]:
    """``(elements, tensors)`` of every parameter and buffer of a model with the numbers ``d``
    (:func:`~kda_ref.model.shapes.numbers`, possibly with a field reset by :func:`_with_default`): each
    block's shapes (:mod:`kda_ref.model.shapes`) times how many the model has, the experts one shape
    times ``num_experts`` -- O(1) in layers and experts."""
    kda, mla, layer, top = (_block(f(d)) for f in (kda_shapes, mla_shapes, layer_shapes, top_shapes))
    expert = _block(expert_shapes(d))
    moe_rest = _block(moe_shapes(d))
    moe = (moe_rest[0] + d["num_experts"] * expert[0], moe_rest[1] + d["num_experts"] * expert[1])
    dense = _block(dense_shapes(d["hidden_size"], d["intermediate_size"]))
    extra = _block(mtp_extra_shapes(d))
    ffn_mtp = moe if d["num_experts"] > 0 else dense
    mtp = tuple(layer[i] + mla[i] + ffn_mtp[i] + extra[i] for i in range(2))  # an MLA decoder layer and its own
    n_kda, n_mla, n_moe, n_mtp = d["n_kda"], d["n_mla"], d["n_moe"], d["n_mtp"]
    parts = [(top, 1), (layer, n_kda + n_mla), (kda, n_kda), (mla, n_mla), (dense, n_kda + n_mla - n_moe),
             (moe, n_moe), (mtp, n_mtp)]
    return sum(p[0] * k for p, k in parts), sum(p[1] * k for p, k in parts)


def _unit_bytes(d: dict, page_size: int, el: int = 4) -> tuple[int, int]:
    """``(state_bytes, kv_page_bytes)`` from the numbers of :func:`~kda_ref.model.shapes.numbers`: one KDA
    state (fp32 recurrent state + conv windows of ``el``-byte elements, all KDA layers) and one KV page of
    ``page_size`` tokens (MLA latent rows, all MLA layers)."""
    H, K, W = d["linear_num_heads"], d["linear_head_dim"], d["short_conv_kernel_size"]
    recurrent, conv = H * K * K * 4, 3 * H * K * (W - 1) * el  # the recurrent state is always fp32
    return d["n_kda"] * (recurrent + conv), d["n_mla"] * page_size * (d["kv_lora_rank"] + d["qk_rope_head_dim"]) * el


def _pool_min(d: dict, page_size: int, el: int = 4) -> int:
    """One KDA state slot + one KV page: :class:`~kda_ref.memory.PoolAccounting`'s smallest budget."""
    return sum(_unit_bytes(d, page_size, el))


def cache_unit_bytes(config: ModelConfig, page_size: int, el: int = 4) -> tuple[int, int]:
    """:func:`_unit_bytes` of ``config``. The memory pool (:func:`kda_ref.memory.pool.unit_sizes`) and a draft
    model's cache size use it."""
    return _unit_bytes(numbers(config), page_size, el)


def _with_default(d: dict, name: str) -> dict:
    """``d`` with field ``name`` at its default; the layer counts scale with ``num_hidden_layers``."""
    out = dict(d, **{name: _DEFAULTS[name]})
    if name == "num_nextn_predict_layers":
        out["n_mtp"] = _DEFAULTS[name]
    if name == "num_hidden_layers" and d["num_hidden_layers"] > 0:
        scale = _DEFAULTS[name] / d["num_hidden_layers"]
        out.update({k: d[k] * scale for k in ("n_kda", "n_mla", "n_moe")})
    return out


def parameter_count(config: ModelConfig) -> tuple[int, int]:
    """``(elements, tensors)`` of the parameters and buffers :class:`~kda_ref.model.HybridModel` builds
    for ``config`` (``lm_head`` counted even when tied: the model builds it, then shares it)."""
    return _counts(numbers(config))


def model_bytes(config: ModelConfig, page_size: int = 16) -> dict:
    """``{"weights": float32 bytes of every parameter and buffer, "pool_min": the smallest useful pool,
    "tensors": how many weight tensors}``."""
    d = numbers(config)
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
    d = numbers(config)
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
