"""Byte-budgeted memory for the hybrid model: MLA KV pages, KDA state slots, checkpoint slots."""

from ..utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.codecs': ['CHECKPOINT_CODECS', 'CHECKPOINT_DTYPES', 'checkpoint_codec'],
    '.checkpoint_store': ['CheckpointCodec'],
    '.pool': ['PageKind', 'PoolAccounting', 'PoolExhausted', 'UnifiedMemoryPool', 'UnitSizes', 'VirtualPool',
              'unit_sizes'],
})
