"""Small helpers shared across the package: integer arithmetic here, process-level tuning in
:mod:`.malloc`, worker processes (a free port, stopping a process for sure) in :mod:`.procs`, files
that users name (regular files only, reads bounded) in :mod:`.files`."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints (pages for ``a`` tokens at ``b`` tokens a page)."""
    return -(-a // b)



def machine_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (``None`` where the platform does not say)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


__all__ = ["cdiv", "machine_memory_bytes"]
