"""Per-cache option objects, their registry, and the one factory that builds a prefix cache from them.

``LLM`` and the cost-model simulator both build their cache here, so the defaults live in one place. A
prefix cache is one :class:`CacheOptionsBase` subclass registered with :func:`register_prefix_cache`:
the ``prefix_cache=`` names (:func:`prefix_cache_modes`), the flat keywords (turned into the matching
object by :func:`cache_options`), the factory and the Lab's settings form all read the registry.
Options are grouped per cache, as vLLM groups engine arguments into ``CacheConfig`` /
``SchedulerConfig`` objects.

Design notes: ``docs/architecture.md#where-a-new-feature-goes``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, ClassVar

from ..trace import NULL_TRACER
from ..utils.config_fields import check_fields
from ..utils.config_fields import documented as _f
from .block.table import EVICTION_POLICIES, MAMBA_CACHE_MODES, check_block_args, check_table_args
from .radix.policies import CHECKPOINT_POLICIES, CheckpointPolicy, check_radix_args, policy_class

if TYPE_CHECKING:  # the options import without torch (kda-ref serve's flags are made from their fields)
    from ..memory import PoolAccounting
    from ..trace import StepClock
    from .base import PrefixCache
    from .cost import CostModel

DEFAULT_PAGE_SIZE = 16  # the KV page size without a prefix cache
CACHE_OPTION_TYPES: dict[str, type] = {}  # kind -> its option class (register_prefix_cache)


def prefix_cache_modes() -> tuple[str, ...]:
    """The ``prefix_cache=`` names: ``"none"`` and every registered kind (read when asked, so a cache
    registered later is a choice too)."""
    return ("none", *CACHE_OPTION_TYPES)


class CacheOptionsBase(ABC):
    """What a prefix cache's options give the engine. A subclass is a frozen dataclass whose fields are
    documented (:func:`~kda_ref.utils.config_fields.documented`: ``LLM``'s flat keywords and the Lab's form
    come from them) with a ``kind`` (its ``prefix_cache=`` name)."""

    kind: ClassVar[str]

    @abstractmethod
    def page_size(self) -> int:
        """The KV page size the pool must use under this cache."""

    @abstractmethod
    def page_size_rule(self) -> str:
        """Why :meth:`page_size` is what it is (a conflicting ``page_size`` is refused with it)."""

    @abstractmethod
    def check(self, chunk_size: int) -> None:
        """Every option against the model's chunk size; ``LLM`` calls it before allocating the pool."""

    @abstractmethod
    def build(self, pool: PoolAccounting, *, chunk_size: int, tracer, clock: StepClock | None,
              cost: CostModel | None) -> PrefixCache:
        """The cache these options describe, over ``pool`` (:func:`make_prefix_cache` calls it)."""

    @property
    def scores_by_cost(self) -> bool:
        """Whether eviction weighs FLOPs saved per byte with an ``alpha`` (Marconi's)."""
        return False

    def with_alpha(self, alpha: float) -> "CacheOptionsBase":
        """These options with Marconi's ``alpha`` where eviction uses one (the simulator's tuning)."""
        return self


def register_prefix_cache(cls: type) -> type:
    """Register an options class under its ``kind`` (a class decorator): the one step that makes a new
    prefix cache a ``prefix_cache=`` choice (``docs/architecture.md``, "Where a new feature goes")."""
    if not (isinstance(cls, type) and issubclass(cls, CacheOptionsBase)) or not getattr(cls, "kind", ""):
        raise TypeError(f"register_prefix_cache: expected a CacheOptionsBase subclass with a kind, got {cls!r}")
    if cls.kind == "none":
        raise ValueError("register_prefix_cache: 'none' means no prefix cache")
    CACHE_OPTION_TYPES[cls.kind] = cls
    return cls


def option_names(kind: str) -> tuple[str, ...]:
    """The option fields (flat keywords) of the registered cache ``kind``."""
    return tuple(f.name for f in fields(CACHE_OPTION_TYPES[kind]))


@register_prefix_cache
@dataclass(frozen=True)
class RadixCacheOptions(CacheOptionsBase):
    """``prefix_cache="radix"``: SGLang's KDA-aware radix tree (``docs/radix_cache.md``)."""

    kind: ClassVar[str] = "radix"
    checkpoint_policy: str | CheckpointPolicy = _f("chunk", "which boundaries become checkpoints (a registered name, or "
                                                        "a CheckpointPolicy object)", choices=CHECKPOINT_POLICIES,
                                kind="str")
    checkpoint_interval: int | None = _f(None, "tokens between checkpoints for 'every_n'", optional=True,
                                         min=1, range_text="that is a positive multiple of the chunk size")
    max_checkpoints_per_path: int | None = _f(None, "most checkpoints kept on one path (SGLang's "
                                                    "mamba_max_states_per_path; None: no limit)", optional=True, min=1)
    track_interval: int = _f(256, "'sglang': decode tokens between tracked states (SGLang's mamba_track_interval)",
                             min=1, range_text="that is a positive multiple of the chunk size")

    def __post_init__(self) -> None:
        policy_class(self.checkpoint_policy)  # a name (named in its error) or a policy object
        check_fields(self, skip=("checkpoint_policy",))  # every field now; what depends on the chunk size in check()

    def page_size(self) -> int:
        return 1  # one KV unit per token, as SGLang's MambaRadixCache v1

    def page_size_rule(self) -> str:
        """Why :meth:`page_size` is what it is (a conflicting ``page_size`` is refused with it)."""
        return "the radix prefix cache needs page_size=1 (one KV unit per token, as SGLang's MambaRadixCache v1)"

    def check(self, chunk_size: int) -> None:
        """Every option against the model's chunk size; ``LLM`` calls it before allocating the pool."""
        check_radix_args(chunk_size, self.checkpoint_policy, self.checkpoint_interval, self.max_checkpoints_per_path,
                         self.track_interval)

    def build(self, pool, *, chunk_size, tracer, clock, cost):
        from .radix.cache import RadixPrefixCache

        return RadixPrefixCache(pool, chunk_size, tracer, clock, policy=self.checkpoint_policy,
                                interval=self.checkpoint_interval, max_per_path=self.max_checkpoints_per_path,
                                track_interval=self.track_interval)


@register_prefix_cache
@dataclass(frozen=True)
class BlockCacheOptions(CacheOptionsBase):
    """``prefix_cache="block"``: vLLM's hashed state blocks (``docs/block_cache.md``)."""

    kind: ClassVar[str] = "block"
    block_size: int = _f(64, "tokens per state block", min=1, range_text="that is a multiple of hash_unit (and of the chunk "
                                                                  "size with mamba_cache_mode='all')")
    hash_unit: int = _f(16, "tokens per hash (= the KV page size)", min=1)
    mamba_cache_mode: str = _f("align", "'all': a state at every block boundary from the chunk kernel; 'align': "
                                        "the states the schedule reaches", choices=MAMBA_CACHE_MODES, kind="str")
    retention_interval: int | None = _f(None, "states kept: None every block, 0 reachable boundaries only, N one "
                                              "per N tokens", optional=True, min=0,
                                        range_text="that is 0 or a multiple of block_size")
    partial_hits: bool = _f(False, "states at hash-unit boundaries inside a block", kind="bool")
    eviction: str = _f("lru", "which state block goes first", choices=EVICTION_POLICIES, kind="str")
    marconi_alpha: float = _f(1.0, "Marconi's weight of FLOPs saved per byte against recency", kind="float", min=0)
    replay_granularity: str = _f("block", "where a hit's state replay starts ('unit' needs partial_hits)",
                                 choices=("block", "unit"), kind="str")

    def __post_init__(self) -> None:
        check_fields(self)  # every field's type and range, named as LLM's keyword (marconi_alpha)
        check_table_args(self.block_size, self.hash_unit, self.eviction, self.marconi_alpha)

    def page_size(self) -> int:
        return self.hash_unit  # one KV page per hash unit

    def page_size_rule(self) -> str:
        """Why :meth:`page_size` is what it is (a conflicting ``page_size`` is refused with it)."""
        return (f"the block cache uses one KV page per hash unit; leave page_size unset or equal to "
                f"hash_unit={self.hash_unit}")

    @property
    def scores_by_cost(self) -> bool:
        """Whether eviction weighs FLOPs saved per byte with ``marconi_alpha`` (Marconi's utility)."""
        return self.eviction == "marconi"

    def with_alpha(self, alpha: float) -> "BlockCacheOptions":
        """These options with ``marconi_alpha=alpha`` (the simulator tunes it on a bootstrap window)."""
        return replace(self, marconi_alpha=alpha)

    def check(self, chunk_size: int) -> None:
        """Every option against the model's chunk size; ``LLM`` calls it before allocating the pool."""
        check_block_args(chunk_size, self.block_size, self.hash_unit, self.mamba_cache_mode, self.retention_interval,
                         self.partial_hits, self.eviction, self.marconi_alpha, self.replay_granularity)

    def build(self, pool, *, chunk_size, tracer, clock, cost):
        from .block.cache import BlockPrefixCache

        return BlockPrefixCache(pool, block_size=self.block_size, hash_unit=self.hash_unit,
                                mode=self.mamba_cache_mode, retention_interval=self.retention_interval,
                                partial_hits=self.partial_hits, eviction=self.eviction, alpha=self.marconi_alpha,
                                chunk_size=chunk_size, cost=cost, tracer=tracer, clock=clock,
                                replay_granularity=self.replay_granularity)


CacheOptions = CacheOptionsBase  # any registered cache's options (a name kept for annotations)


def cache_options(prefix_cache: str | CacheOptions = "none", **flat) -> CacheOptions | None:
    """The option object for ``prefix_cache`` (a mode name or an option object already) and the flat
    keyword options given with it; ``None`` for ``"none"``. Options of another cache, or options
    given twice, are a ``ValueError`` naming them."""
    if isinstance(prefix_cache, CacheOptionsBase):
        if flat:
            raise ValueError(f"options: {sorted(flat)} given beside a {type(prefix_cache).__name__}; "
                             f"set them on the object")
        return prefix_cache
    if prefix_cache not in prefix_cache_modes():
        raise ValueError(f"prefix_cache: must be one of {prefix_cache_modes()} or a cache option object, "
                         f"got {prefix_cache!r}")
    if prefix_cache == "none":
        if flat:
            raise ValueError(f"options: {sorted(flat)} given without a prefix cache (prefix_cache='none')")
        return None
    bad = set(flat) - set(option_names(prefix_cache))
    if bad:
        raise ValueError(f"options: {sorted(bad)} do not apply to the {prefix_cache} cache "
                         f"(its options: {', '.join(option_names(prefix_cache))})")
    return CACHE_OPTION_TYPES[prefix_cache](**flat)


def pool_page_size(options: CacheOptions | None, page_size: int | None = None) -> int:
    """The KV page size a pool must use under ``options`` (``page_size`` when the cache allows a
    choice); a conflicting explicit ``page_size`` is a ``ValueError``."""
    if options is None:
        return DEFAULT_PAGE_SIZE if page_size is None else page_size
    need = options.page_size()
    if page_size is not None and page_size != need:
        raise ValueError(f"page_size: {options.page_size_rule()}, got {page_size!r}")
    return need


def make_prefix_cache(options: CacheOptions | None, pool: PoolAccounting, *, chunk_size: int = 64,
                      tracer=NULL_TRACER, clock: StepClock | None = None,
                      cost: CostModel | None = None) -> PrefixCache:
    """Build the prefix cache ``options`` describe over ``pool`` (a :class:`NoPrefixCache` for
    ``None``). ``cost`` is the FLOP / byte model Marconi eviction scores with (built from the pool's
    config when missing)."""
    if options is None:
        from .base import NoPrefixCache

        return NoPrefixCache(pool, tracer, clock)
    return options.build(pool, chunk_size=chunk_size, tracer=tracer, clock=clock, cost=cost)
