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
               "num_shared_experts", "q_lora_rank", "routed_expert_hidden_size", "num_nextn_predict_layers")
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig) if f.name in SIZE_FIELDS}


class ModelSizeError(ConfigError):
    """A configuration whose model cannot be built here: too many bytes or too many tensors (names the
    field that drives the size, and the numbers)."""


def _kda_layer(d: dict) -> tuple[int, int]:
    """One KDA layer: q/k/v, three depthwise convs, A_log, dt_bias, f_a/f_b, b, the output gate (K3's
    full-rank g_proj, or g_a/g_b), o_norm, o_proj."""
    H, hd, nh, W = d["hidden_size"], d["linear_head_dim"], d["linear_num_heads"], d["short_conv_kernel_size"]
    D = nh * hd
    gate = (H * D, 1) if d["full_rank_gate"] else (H * hd + hd * D, 2)
    a_log = max(nh, hd) if d["k3_layout"] else nh
    return 3 * H * D + 3 * D * W + a_log + D + H * hd + hd * D + H * nh + gate[0] + hd + D * H, 13 + gate[1]


def _mla_layer(d: dict) -> tuple[int, int]:
    """One MLA layer: the query (q_proj, or K3's q_a / q_a_layernorm / q_b), kv_a (latent + k_pe),
    kv_a_layernorm, kv_b, K3's output gate, o_proj."""
    H, na, nope, pe, vd, lat = (d["hidden_size"], d["num_attention_heads"], d["qk_nope_head_dim"],
                                d["qk_rope_head_dim"], d["v_head_dim"], d["kv_lora_rank"])
    r = d["q_lora_rank"] or 0
    q = (H * r + r + r * na * (nope + pe), 3) if r else (H * na * (nope + pe), 1)
    gate = (na * vd * H, 1) if d["mla_gate"] else (0, 0)
    return q[0] + H * (lat + pe) + lat + lat * na * (nope + vd) + na * vd * H + gate[0], q[1] + 4 + gate[1]


def _moe(d: dict) -> tuple[int, int]:
    """One MoE block: router and its bias buffer, the experts (at the latent width in K3), the shared
    expert, K3's latent down / up projections and norm."""
    H, E, Im, S = d["hidden_size"], d["num_experts"], d["moe_intermediate_size"], d["num_shared_experts"]
    R = d["routed_expert_hidden_size"] or 0
    latent = (2 * H * R + (R if d["latent_norm"] else 0), 2 + int(d["latent_norm"])) if R else (0, 0)
    return (E * H + E + 3 * E * (R or H) * Im + (3 * H * Im * S if S else 0) + latent[0],
            2 + 3 * E + (3 if S else 0) + latent[1])


def _counts(d: dict) -> tuple[int, int]:
    """``(elements, tensors)`` of every parameter and buffer of a model with the numbers ``d`` (the
    config's size fields, its K3 switches and the layer counts ``n_kda``, ``n_mla``, ``n_moe``,
    ``n_mtp``) -- the shapes of :mod:`kda_ref.model`'s modules, written out."""
    H, V = d["hidden_size"], d["vocab_size"]
    kda, mla, moe = _kda_layer(d), _mla_layer(d), _moe(d)
    dense = (3 * H * d["intermediate_size"], 3)
    res = (4 * H, 4) if d["attn_res"] else (0, 0)  # a layer's two depth mixes: norm and proj each
    n_kda, n_mla, n_moe, n_mtp = d["n_kda"], d["n_mla"], d["n_moe"], d["n_mtp"]
    n_dense = n_kda + n_mla - n_moe
    layer = (2 * H + res[0], 2 + res[1])  # the two layer norms and the residual mixes' weights
    # an MTP layer: an MLA decoder layer with its MoE (or dense MLP) plus embed, enorm, hnorm, eh_proj, head norm, head
    ffn_mtp = moe if d["num_experts"] > 0 else dense
    mtp = (layer[0] + mla[0] + ffn_mtp[0] + 2 * V * H + 3 * H + 2 * H * H, layer[1] + mla[1] + ffn_mtp[1] + 6)
    top = (2 * V * H + H + (2 * H if d["attn_res"] else 0), 3 + (2 if d["attn_res"] else 0))  # embed, head, norm, final mix
    parts = [(top, 1), (layer, n_kda + n_mla), (kda, n_kda), (mla, n_mla), (dense, n_dense), (moe, n_moe), (mtp, n_mtp)]
    return sum(p[0] * n for p, n in parts), sum(p[1] * n for p, n in parts)


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
    d.update(n_kda=len(config.kda_layers), n_mla=len(config.full_attn_layers), n_moe=moe,
             n_mtp=config.num_nextn_predict_layers, full_rank_gate=config.use_full_rank_gate,
             k3_layout=config.is_k3, mla_gate=config.mla_use_output_gate, latent_norm=config.latent_moe_use_norm,
             attn_res=bool(config.attn_res_block_size))
    return d


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
