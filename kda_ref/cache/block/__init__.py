"""vLLM-style prefix cache: the hash table of KV units and state blocks (:mod:`.table`) and its
request side (:mod:`.cache`: hybrid hits, all / align modes, retention, partial hits, eviction)."""

from ...utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.cache': ['BlockPrefixCache'],
    '.table': ['EVICTION_POLICIES', 'MAMBA_CACHE_MODES', 'ROOT_HASH', 'BlockHashTable', 'BlockHit', 'UnitNode',
               'chain_hashes', 'retention_mask'],
})
