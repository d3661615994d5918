"""Prefix caches for hybrid models, behind one interface (:class:`PrefixCache`).

* :mod:`.base` -- the interface, :class:`NoPrefixCache`, the chunk-state iterator both caches share;
* :mod:`.radix` -- SGLang-style: the KDA-aware radix tree and its request side (checkpoints);
* :mod:`.block` -- vLLM-style: hashed KV units and state blocks, retention, Marconi eviction;
* :mod:`.options` -- per-cache option objects and :func:`make_prefix_cache`, the one factory;
* :mod:`.cost` -- the FLOP / byte cost model (Marconi's utility, the simulator);
* :mod:`.sequence` -- :class:`Sequence`, what the caches see of a request.
"""

from ..utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.base': ['CACHE_OWNER', 'NoPrefixCache', 'PrefixCache', 'iter_boundary_states'],
    '.block': ['BlockHashTable', 'BlockPrefixCache'],
    '.options': ['BlockCacheOptions', 'CacheOptions', 'CacheOptionsBase', 'RadixCacheOptions', 'cache_options',
                 'make_prefix_cache', 'pool_page_size', 'prefix_cache_modes', 'register_prefix_cache'],
    '.radix': ['BoundaryMismatchError', 'MatchResult', 'RadixPrefixCache', 'RadixTree', 'TreeNode'],
    '.sequence': ['Sequence'],
})
