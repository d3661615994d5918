"""Byte-budgeted memory for the hybrid model: MLA KV pages, KDA state slots, checkpoint slots."""

from .pool import PageKind, PoolAccounting, PoolExhausted, UnifiedMemoryPool, UnitSizes, VirtualPool, unit_sizes

__all__ = ["PageKind", "PoolAccounting", "PoolExhausted", "UnifiedMemoryPool", "UnitSizes", "VirtualPool", "unit_sizes"]
