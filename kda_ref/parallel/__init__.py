"""Deprecated: the old name of :mod:`kda_ref.context_parallel` (renamed in 2026-12: ``parallel/`` read as
every kind of parallelism, and it holds context parallelism only). Importing it, or any of its modules,
warns; it goes in the next release.

A package keeps its own folder here (each old module a file of its own, handing over the new one): were
the old package name the new package itself, ``import kda_ref.parallel.launch`` would load
``context_parallel/launch.py`` a second time under the old name, with classes of its own."""

import importlib
import warnings

warnings.warn("kda_ref.parallel is now kda_ref.context_parallel; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    """``kda_ref.parallel.X`` is ``kda_ref.context_parallel.X``."""
    return getattr(importlib.import_module("kda_ref.context_parallel"), name)
