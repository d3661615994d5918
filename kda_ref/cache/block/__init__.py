"""vLLM-style prefix cache: the hash table of KV units and state blocks (:mod:`.table`) and its
request side (:mod:`.cache`: hybrid hits, all / align modes, retention, partial hits, eviction)."""

from .cache import MAMBA_CACHE_MODES, BlockPrefixCache
from .table import EVICTION_POLICIES, ROOT_HASH, BlockHashTable, BlockHit, UnitNode, chain_hashes, retention_mask

__all__ = ["BlockHashTable", "BlockHit", "BlockPrefixCache", "EVICTION_POLICIES", "MAMBA_CACHE_MODES", "ROOT_HASH",
           "UnitNode", "chain_hashes", "retention_mask"]
