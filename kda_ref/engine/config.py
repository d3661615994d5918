"""``EngineConfig``: every setting of an engine in one validated object (vLLM's ``EngineArgs -> VllmConfig``).

Its parts, grouped as vLLM groups ``VllmConfig``: :class:`SchedulerConfig`, :class:`CacheConfig`,
:class:`~kda_ref.speculative.SpecConfig`, :class:`StaticDecodeConfig`, :class:`ParallelConfig`. Each part checks
its fields when it is built (a bad value is a ``ValueError`` naming the field), :meth:`EngineConfig.check_model`
the few that depend on the model; :meth:`EngineConfig.from_kwargs` turns ``LLM``'s flat keywords into the
object. Every field documents itself and its range in its metadata (:func:`field_specs`).
Design notes: ``docs/architecture.md#the-engines-configuration``.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, fields

from ..cache import CacheOptions, cache_options, pool_page_size
from ..cache.options import CACHE_OPTION_TYPES, CacheOptionsBase, option_names
from ..model.config import MIXED_BATCH_POLICIES
from ..speculative import SpecConfig, spec_config
from ..speculative.config import SPEC_KEYWORDS
from ..memory.codecs import CHECKPOINT_CODECS, CHECKPOINT_DTYPES
from ..ops.backend import BACKENDS, kernel_backend
from ..context_parallel.backends import CP_BACKENDS, backend_problem
from ..utils import machine_memory_bytes
from ..utils.limits import MAX_BATCHED_TOKENS, MAX_CP_TIMEOUT_S, MAX_NUM_SEQS, MAX_WORLD_SIZE, SEED_RANGE
from ..utils.config_fields import check_fields as _check_fields
from ..utils.config_fields import documented as _f
from ..utils.config_fields import field_specs

MAX_PAGE_SIZE = 1024  # KV tokens per page (vLLM's default block is 16; hybrid models grow it to the state page's size)
MAX_CHUNK_SIZE = 1024  # the KDA chunk: fla's kernels use 64; the chunk kernel holds [C, C] blocks per chunk


@dataclass(frozen=True)
class SchedulerConfig:
    """How one step is filled (:mod:`kda_ref.engine.scheduler`)."""

    max_num_seqs: int = _f(16, "most requests running at once", min=1, max=MAX_NUM_SEQS)
    max_num_batched_tokens: int = _f(512, "token budget of one step (prefills are chunked to it)", min=1,
                                     max=MAX_BATCHED_TOKENS)
    max_model_len: int | None = _f(None, "longest prompt + output, at most the model's max_position_embeddings "
                                   "(None: that)", min=2, optional=True)  # one prompt token and one output token
    mixed_batch: str = _f("chunk", "how a step mixing decodes and prefill chunks runs the KDA layers",
                          choices=MIXED_BATCH_POLICIES, kind="str")

    def __post_init__(self) -> None:
        _check_fields(self)


@dataclass(frozen=True)
class CacheConfig:
    """The unified pool and the prefix cache (:mod:`kda_ref.memory`, :mod:`kda_ref.cache`).
    ``prefix_cache`` is ``None`` or a :class:`~kda_ref.cache.RadixCacheOptions` /
    :class:`~kda_ref.cache.BlockCacheOptions` (:meth:`EngineConfig.from_kwargs` builds it from
    ``"radix"`` / ``"block"`` and the flat option keywords)."""

    memory_budget_bytes: int = _f(64 << 20, "bytes shared by KV pages, KDA states and checkpoints", min=1)
    page_size: int | None = _f(None, "KV tokens per page (None: 16; the radix cache needs 1, the block cache "
                                     "its hash_unit)", min=1, max=MAX_PAGE_SIZE, optional=True)
    checkpoint_dtype: str = _f("fp32", "how checkpoints are stored (bf16 / int8: compressed)",
                               choices=CHECKPOINT_CODECS, kind="str")
    prefix_cache: CacheOptions | None = None

    def __post_init__(self) -> None:
        _check_fields(self)
        machine = machine_memory_bytes()
        if machine is not None and self.memory_budget_bytes > machine:
            raise ValueError(f"memory_budget_bytes: {self.memory_budget_bytes} B is more than this machine's memory "
                             f"({machine} B)")
        if self.prefix_cache is not None and not isinstance(self.prefix_cache, CacheOptionsBase):
            raise ValueError(f"prefix_cache: must be None or a cache option object, got {self.prefix_cache!r}")
        self.pool_page_size  # a page size the cache cannot use is refused here

    @property
    def pool_page_size(self) -> int:
        """The KV page size the pool uses: ``page_size``, or what the prefix cache needs (1 for the radix
        cache, ``hash_unit`` for the block cache), or 16."""
        return pool_page_size(self.prefix_cache, self.page_size)


@dataclass(frozen=True)
class StaticDecodeConfig:
    """Fixed-shape decode / verify buckets (:mod:`kda_ref.engine.static_decode`)."""

    enabled: bool = _f(False, "run all-decode and uniform verify steps over fixed per-bucket metadata", kind="bool",
                       flat="static_decode")
    torch_compile: bool = _f(False, "compile each bucket's step with torch.compile (needs a C++ compiler)",
                             kind="bool")
    compile_gemm: bool = _f(False, "compiled steps multiply through inductor's C++ GEMM template over frozen, "
                            "prepacked weights (CPU: faster steps, compiles take ~2x as long)", kind="bool")

    def __post_init__(self) -> None:
        _check_fields(self)
        if self.torch_compile and not self.enabled:
            raise ValueError("torch_compile: compiles the fixed-shape steps of static_decode=True; "
                             "pass static_decode=True with it")
        if self.compile_gemm and not self.torch_compile:
            raise ValueError("compile_gemm: chooses how torch_compile=True compiles the steps; pass torch_compile=True "
                             "with it")
        if self.torch_compile:
            from . import static_decode

            if static_decode.cpp_compiler() is None:
                raise ValueError("torch_compile: torch.compile (inductor) needs a C++ compiler on the CPU and the one "
                                 "it would call ($CXX, else g++) was not found; install one or leave torch_compile off")


@dataclass(frozen=True)
class ParallelConfig:
    """Context-parallel prefill of long prompts (:mod:`kda_ref.context_parallel`)."""

    context_parallel_size: int = _f(1, "ranks that prefill a long prompt together (1: off)", min=1,
                                    max=MAX_WORLD_SIZE)
    cp_min_tokens: int = _f(4096, "prompts at least this long are prefilled by the ranks", min=1)
    cp_backend: str = _f("gloo", "gloo / nccl processes, or threads of this process", choices=CP_BACKENDS, kind="str",
                         expect="'gloo', 'nccl' or 'threads'")
    cp_timeout: float = _f(120.0, "seconds before a silent rank is an error", kind="number", max=MAX_CP_TIMEOUT_S,
                           expect=f"a positive, finite number of seconds, at most {MAX_CP_TIMEOUT_S:g}")

    def __post_init__(self) -> None:
        _check_fields(self)


# LLM's flat keywords -> the part that holds them
_PARTS = {"scheduler": SchedulerConfig, "cache": CacheConfig, "static": StaticDecodeConfig,
          "parallel": ParallelConfig}
# flat keyword -> (part, field) where the names differ (the field's metadata "flat")
_RENAMED = {f.metadata["flat"]: (name, f.name) for name, part in _PARTS.items() for f in fields(part)
            if "flat" in f.metadata}
_SPEC_KEYS = tuple(SPEC_KEYWORDS)  # from SpecConfig's field metadata: "speculative", "spec_state", ...


@dataclass(frozen=True)
class EngineConfig:
    seed: int = _f(0, "weight-initialisation and sampling seed", min=SEED_RANGE[0], max=SEED_RANGE[1],
                   range_text="in the 64-bit range")
    backend: str | None = _f(None, "kernels: torch references or Triton (None: the given model's, torch for one "
                                   "built here)", choices=BACKENDS, kind="str", optional=True)
    chunk_size: int | None = _f(None, "the KDA chunk (a power of two; None: the model's, 64 for a new one)",
                                min=1, max=MAX_CHUNK_SIZE, optional=True)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    speculative: SpecConfig | None = None
    static: StaticDecodeConfig = field(default_factory=StaticDecodeConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)

    def __post_init__(self) -> None:
        _check_fields(self)
        if self.chunk_size is not None and self.chunk_size & (self.chunk_size - 1):
            raise ValueError(f"chunk_size: must be a positive power of two, got {self.chunk_size}")
        for name, cls in (*_PARTS.items(), ("speculative", SpecConfig)):
            part = getattr(self, name)
            if not isinstance(part, cls) and not (name == "speculative" and part is None):
                raise ValueError(f"{name}: expected a {cls.__name__}, got {type(part).__name__}")

    @classmethod
    def resolve(cls, config: "EngineConfig | None", settings: dict) -> "EngineConfig":
        """What ``LLM(config=..., **settings)`` (and the disaggregation) runs with: ``config``, or the flat
        keywords through :meth:`from_kwargs`; both at once, or a ``config`` of another type, a ``ValueError``."""
        if config is not None and settings:
            raise ValueError(f"config: given with the keywords {sorted(settings)}; set them on the EngineConfig")
        cfg = cls.from_kwargs(**settings) if config is None else config
        if not isinstance(cfg, cls):
            raise ValueError(f"config: expected an EngineConfig, got {type(cfg).__name__}")
        return cfg

    @classmethod
    def from_kwargs(cls, **kw) -> "EngineConfig":
        """The nested configuration from ``LLM``'s flat keywords (``max_num_seqs=...``,
        ``prefix_cache="radix", checkpoint_policy=...``, ``speculative="ngram", ...``); any keyword
        that is none of them is a ``ValueError`` naming it and the nearest real one."""
        _check_names(kw)
        parts: dict[str, dict] = {name: {} for name in _PARTS}
        top, cache_opts, spec = {}, {}, {}
        owner = {f.name: name for name, part in _PARTS.items() for f in fields(part)}
        for key, value in kw.items():
            if key in _RENAMED:
                part, name = _RENAMED[key]
                parts[part][name] = value
            elif key in _SPEC_KEYS:
                spec[key] = value
            elif key in {f.name for f in fields(cls)} - set(_PARTS) - {"speculative"}:
                top[key] = value
            elif key in owner and key != "prefix_cache":
                parts[owner[key]][key] = value
            else:  # prefix_cache and the caches' flat options
                cache_opts[key] = value
        parts["cache"]["prefix_cache"] = cache_options(cache_opts.pop("prefix_cache", "none"), **cache_opts)
        sp = spec_config(**spec)
        return cls(**top, speculative=sp, **{name: _PARTS[name](**v) for name, v in parts.items()})

    def check_model(self, chunk_size: int, backend: str, device: str = "cpu") -> None:
        """What depends on the model: a given model's chunk size and backend must agree with the
        configuration, the prefix cache's options must align to the chunk size, and nccl needs the model
        on a GPU. Called before any pool is allocated (``device``: the model's device type)."""
        if self.chunk_size is not None and self.chunk_size != chunk_size:
            raise ValueError(f"chunk_size: {self.chunk_size} contradicts the given model's chunk size {chunk_size}")
        if self.backend is not None and self.backend != backend:
            raise ValueError(f"backend: {self.backend!r} contradicts the given model's backend {backend!r} (a built "
                             f"model keeps its kernels; build it with backend={self.backend!r} or leave backend unset)")
        if kernel_backend(backend).triton and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("backend: 'triton' runs its kernels on a GPU, or on the CPU in Triton's interpreter "
                             "(TRITON_INTERPRET=1 set before the start); the model is on the CPU and it is not set")
        par = self.parallel
        why = backend_problem(par.cp_backend, device) if par.context_parallel_size > 1 else None
        if why:
            raise ValueError(f"cp_backend: {why}")
        if self.static.enabled and not kernel_backend(backend).takes_pad_rows:
            raise ValueError(f"static_decode: needs backend='torch' (the Triton kernels check their slots on the "
                             f"host, which a captured step cannot), got backend={backend!r}")
        if self.cache.prefix_cache is not None:
            self.cache.prefix_cache.check(chunk_size)

    def replace(self, **kw) -> "EngineConfig":
        """A copy with the flat keywords ``kw`` changed (a second configuration to compare with)."""
        return EngineConfig.from_kwargs(**{**self.to_kwargs(), **kw})

    def to_kwargs(self) -> dict:
        """The flat keywords :meth:`from_kwargs` reads back into an equal configuration (the prefix cache's
        and the speculative options flat too, so that :meth:`replace` can change any one of them)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata}
        for name, part in _PARTS.items():
            for f in fields(part):
                key = next((k for k, (p, n) in _RENAMED.items() if (p, n) == (name, f.name)), f.name)
                out[key] = getattr(getattr(self, name), f.name)
        opts = out.pop("prefix_cache")
        out["prefix_cache"] = "none" if opts is None else opts.kind
        if opts is not None:
            out.update({f.name: getattr(opts, f.name) for f in fields(opts)})
        out["speculative"] = None
        if self.speculative is not None:  # every speculative keyword, by the one mapping (SPEC_KEYWORDS)
            out.update({key: getattr(self.speculative, name) for key, name in SPEC_KEYWORDS.items()})
        return out


def config_parts() -> dict[str, type]:
    """The parts of :class:`EngineConfig` (``"scheduler"`` -> :class:`SchedulerConfig`, ...), whose fields
    are ``LLM``'s flat keywords: ``kda-ref serve`` makes a flag of each (``kda_ref.server.serve``)."""
    return dict(_PARTS)


def flat_keywords() -> list[str]:
    """Every keyword :meth:`EngineConfig.from_kwargs` (and so ``LLM``) accepts."""
    names = [f.name for f in fields(EngineConfig) if f.metadata]
    for name, part in _PARTS.items():
        names += [next((k for k, (p, n) in _RENAMED.items() if (p, n) == (name, f.name)), f.name)
                  for f in fields(part)]
    return names + list(_SPEC_KEYS) + sorted({n for kind in CACHE_OPTION_TYPES for n in option_names(kind)})


def _check_names(kw: dict) -> None:
    known = flat_keywords()
    for name in kw:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ValueError(f"{name}: not an argument of LLM (nor an option of a prefix cache){hint}")


__all__ = ["CHECKPOINT_DTYPES", "CacheConfig", "config_parts", "EngineConfig", "ParallelConfig",
           "SchedulerConfig", "StaticDecodeConfig", "field_specs", "flat_keywords"]
