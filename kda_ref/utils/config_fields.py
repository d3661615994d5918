"""Documented configuration fields: each field carries its documentation and its range.

A dataclass declares ``name: int = documented(16, "what it is", min=1)``; :func:`field_specs` lists the fields
for whoever renders or bounds an input (:mod:`model_viz.scenarios.lab`), :func:`check_fields` checks an object
(the :class:`~kda_ref.engine.config.EngineConfig` parts, in ``__post_init__``). The prefix caches' options and
:class:`~kda_ref.speculative.SpecConfig` keep their own checks (some bounds depend on the chunk size); a test checks
that the two agree. Rules: ``choices`` (a tuple, or a registry dict: its keys); ``min`` / ``max`` (ints; ``max`` also
for numbers); ``optional`` (``None`` allowed); ``kind`` ("int" | "bool" | "number": finite > 0 | "float": finite
>= ``min`` | "str" | "object"); ``flat`` (``LLM``'s keyword where the names differ); ``range_text`` (the range, in
words); ``expect`` (the whole "must be ..." phrase of the error).
"""

from __future__ import annotations

import math
from dataclasses import field, fields


def documented(default, doc: str, **rules):
    """A dataclass field with its documentation and its rules in ``metadata``."""
    return field(default=default, metadata={"doc": doc, **rules})


def check_field(name: str, value, rules: dict) -> None:
    """One value against its field's rules; a ``ValueError`` naming the field."""
    if value is None and rules.get("optional"):
        return
    kind = rules.get("kind", "int")
    if kind == "object":
        return
    if kind == "bool":
        ok, expect = isinstance(value, bool), "True or False"
    elif "choices" in rules:  # a tuple, or a registry (a dict read when checked: a new entry is a choice)
        ok, expect = _member(value, rules["choices"]), f"one of {tuple(rules['choices'])}"
    elif kind in ("number", "float"):
        hi = rules.get("max")
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and (
            value > 0 if kind == "number" else value >= rules.get("min", 0)) and (hi is None or value <= hi)
        expect = "a positive, finite number" if kind == "number" else f"a finite number >= {rules.get('min', 0)}"
        expect += f" <= {hi:g}" if hi is not None else ""
    else:  # an int in [min, max]
        lo, hi = rules.get("min", 1), rules.get("max")
        ok = not isinstance(value, bool) and isinstance(value, int) and value >= lo and (hi is None or value <= hi)
        expect = "an int " + (rules.get("range_text") or (f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"))
    if not ok:
        raise ValueError(f"{name}: must be {rules.get('expect', expect)}, got {value!r}")


def _member(value, choices) -> bool:
    try:
        return value in choices
    except TypeError:  # an unhashable value asked of a dict
        return False


def check_fields(obj, skip: tuple[str, ...] = ()) -> None:
    """Every documented field of ``obj`` (but those named in ``skip``: a field given as an object, such as
    a strategy, that its owner checks itself), named as ``LLM``'s keyword where that differs."""
    for f in fields(obj):
        if f.metadata and f.name not in skip:
            check_field(f.metadata.get("flat", f.name), getattr(obj, f.name), f.metadata)


def flat_names(cls) -> dict[str, str]:
    """``{LLM's keyword: field name}`` of every documented field of ``cls`` (``flat`` where the names
    differ): the one mapping between the flat keywords and a configuration part."""
    return {f.metadata.get("flat", f.name): f.name for f in fields(cls) if f.metadata}


def field_specs(cls) -> list[dict]:
    """``[{"name", "default", "doc", ...rules}]`` for every documented field of a config class: what a
    settings form needs to render and bound each input (``name`` is the field's; ``flat``, where given,
    is ``LLM``'s keyword for it)."""
    return [{"name": f.name, "default": f.default, **f.metadata} for f in fields(cls) if f.metadata]


__all__ = ["check_field", "check_fields", "documented", "field_specs", "flat_names"]
