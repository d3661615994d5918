"""A module's old name, kept for one release after a rename: importing it warns and hands over the new module.

The old file's whole body is one call, ``forward_to(__name__, "kda_ref.<new name>")``: the old name then
*is* the new module in ``sys.modules`` (one object, every name in it, not a copy), so old imports of any
name keep working and a patch through either name reaches the same module."""

from __future__ import annotations

import importlib
import sys
import warnings


def forward_to(old: str, new: str) -> None:
    """Warn that module ``old`` is now ``new`` (a DeprecationWarning), then make ``old`` the module ``new``."""
    warnings.warn(f"{old} is now {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
