"""Byte-budgeted memory for the hybrid model: MLA KV pages, KDA state slots, checkpoint slots."""

from .pool import PageKind, PoolExhausted, UnifiedMemoryPool, UnitSizes, unit_sizes

__all__ = ["PageKind", "PoolExhausted", "UnifiedMemoryPool", "UnitSizes", "unit_sizes"]
