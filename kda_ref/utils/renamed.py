"""A module's old name, kept for one release after a rename: importing it warns and hands over the new module.

The old file's whole body is one call, ``forward_to(__name__, "kda_ref.<new name>")``: the old name then
*is* the new module in ``sys.modules`` (one object, every name in it, not a copy), so old imports of any
name keep working and a patch through either name reaches the same module.

An old name that must not stay a file -- ``kda_ref/inspect.py`` shadowed the standard library's ``inspect``
for any script run from inside the package -- is answered by an import hook instead (:data:`NO_FILE`,
:class:`RenamedFinder`, installed by ``kda_ref/__init__.py``), with the same warning and the same module."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

NO_FILE = {"kda_ref.inspect": "kda_ref.state_trace"}  # old name -> new, for old names kept without a file


def forward_to(old: str, new: str) -> None:
    """Warn that module ``old`` is now ``new`` (a DeprecationWarning), then make ``old`` the module ``new``."""
    warnings.warn(f"{old} is now {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)


class RenamedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of :data:`NO_FILE`; loading one warns and hands over the new module (as
    :func:`forward_to` does for an old name that is still a file)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in NO_FILE:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        warnings.warn(f"{spec.name} is now {NO_FILE[spec.name]}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(NO_FILE[spec.name])

    def exec_module(self, module) -> None:
        """Nothing to run: the module handed over is the new one, already imported."""


def install_finder() -> None:
    """Put one :class:`RenamedFinder` on ``sys.meta_path`` (``kda_ref/__init__.py`` calls it on import)."""
    if not any(isinstance(f, RenamedFinder) for f in sys.meta_path):
        sys.meta_path.append(RenamedFinder())
