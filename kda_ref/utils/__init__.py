"""Small helpers shared across the package: integer arithmetic here, process-level tuning in
:mod:`.malloc`."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints (pages for ``a`` tokens at ``b`` tokens a page)."""
    return -(-a // b)


__all__ = ["cdiv"]
