"""Byte-budgeted memory for the hybrid model: MLA KV pages, KDA state slots, checkpoint slots."""

from .checkpoint_store import CHECKPOINT_CODECS, CHECKPOINT_DTYPES, CheckpointCodec, checkpoint_codec
from .pool import PageKind, PoolAccounting, PoolExhausted, UnifiedMemoryPool, UnitSizes, VirtualPool, unit_sizes

__all__ = ["CHECKPOINT_CODECS", "CHECKPOINT_DTYPES", "CheckpointCodec", "PageKind", "PoolAccounting", "PoolExhausted",
           "UnifiedMemoryPool", "UnitSizes", "VirtualPool", "checkpoint_codec", "unit_sizes"]
