"""Names loaded on first use, so that a light module can be imported without the heavy ones beside it.

* :func:`lazy_exports` -- a package's ``__getattr__`` / ``__dir__`` (PEP 562): a name's module is imported when asked;
* :class:`LazyRegistry` -- named implementations (drafters, rollback strategies, checkpoint codecs) that may be
  ``"module:attribute"`` strings until looked up, so a configuration field's choices cost nothing. As vLLM's
  ``vllm/model_executor/models/registry.py``: ``_ModelRegistry.register_model`` / ``_LazyRegisteredModel``
  (at bf8e7624 and in 0.32.0).
Both let ``kda_ref.engine.config`` (and ``kda-ref serve``'s flags) import without torch.
Design notes: ``docs/architecture.md#packages-and-their-dependencies``
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping


def lazy_exports(package: str, exports: dict[str, list[str]]):
    """``(__getattr__, __dir__, __all__)`` for ``package`` (its ``__name__``): ``exports`` maps a submodule
    (relative, ``".radix"``) to the names it provides; each is imported on first access and then kept in the
    package. ``__all__`` is every exported name, sorted."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*where, *vars(sys.modules[package])})

    return __getattr__, __dir__, sorted(where)


class LazyRegistry(MutableMapping):
    """``name -> implementation``, where an implementation given as ``"module:attribute"`` is imported the
    first time it is looked up (and kept). Iterating, ``len`` and ``in`` read the names only; ``values()``,
    ``items()`` and ``[name]`` import what they return. Registering (``registry[name] = obj``) takes the
    object itself or such a string."""

    def __init__(self, entries: dict[str, object]):
        self._entries = dict(entries)

    def __getitem__(self, name: str):
        value = self._entries[name]
        if isinstance(value, str):
            module, _, attr = value.partition(":")
            value = self._entries[name] = getattr(importlib.import_module(module), attr)
        return value

    def __setitem__(self, name: str, value) -> None:
        self._entries[name] = value

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __contains__(self, name) -> bool:  # the names only (Mapping's would look the entry up)
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"LazyRegistry({list(self._entries)})"
