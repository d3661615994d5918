"""Field validation for trace events: each annotation compiled once into a checker.

:func:`compile_checker` turns a field's type annotation (``int``, ``str | None``, ``list[int]``,
``tuple[int, ...]``, ``dict[str, JSON]``, ``Literal[...]`` ...) into a function
``check(value, where) -> normalised value`` that raises :class:`EventFieldError` naming
``"<EventClass>.<field>[i]"`` when the value does not fit. ``int`` rejects ``bool``, floats and
tensors; a float, alone or inside a ``JSON`` value, must be finite (plain JSON has no NaN or infinity:
``json.dumps`` would write a non-standard token that a browser's ``JSON.parse`` refuses); ``str``
subclasses are stored as plain values; ``list`` fields store a fresh ``list``. This normalisation is
what makes a JSONL round trip give equal events.

Design notes: ``docs/trace.md#field-validation``.
"""

import math
import types
import typing
from typing import Any, Callable, Literal, Union

__all__ = ["JSON", "EventFieldError", "compile_checker", "describe"]


class JSON:
    """Annotation marker: any JSON value (``None``, ``bool``, ``int``, ``float``, ``str``, and lists /
    str-keyed dicts of those). Tuples inside are stored as lists."""


class EventFieldError(TypeError, ValueError):
    """A field of a trace event has the wrong type or an inconsistent value.

    ``where`` is ``"<EventClass>.<field>"`` (with ``[i]`` / ``[key]`` for an element).
    """

    def __init__(self, where: str, message: str):
        self.where = where
        super().__init__(f"{where}: {message}")


# ---------------------------------------------------------------------------------------------
# field checkers, compiled once per event class from its annotations
# ---------------------------------------------------------------------------------------------

_Checker = Callable[[Any, str], Any]  # (value, where) -> normalised value, or raise EventFieldError


def describe(v: Any) -> str:
    text = repr(v)
    if len(text) > 40:
        text = text[:37] + "..."
    hint = ""
    if hasattr(v, "tolist") or hasattr(v, "item"):
        hint = " (tensors never go in events: use int() / float() / .tolist(), or summarize_tensor())"
    return f"{type(v).__name__} {text}{hint}"


def _fail(where: str, expected: str, v: Any):
    raise EventFieldError(where, f"expected {expected}, got {describe(v)}")


def _map_seq(check: _Checker, v, where: str, make) -> Any:
    """``make(check(x) for x in v)``; the element path (``where[i]``) is only formatted on failure."""
    out = []
    for i, x in enumerate(v):
        try:
            out.append(check(x, where))
        except EventFieldError:
            check(x, f"{where}[{i}]")  # raises again, naming the element
            raise
    return out if make is list else make(out)


def _map_dict(check: _Checker, v: dict, where: str) -> dict:
    out = {}
    for k, x in v.items():
        if type(k) is not str:
            raise EventFieldError(where, f"dict keys must be str, got {describe(k)}")
        try:
            out[k] = check(x, where)
        except EventFieldError:
            check(x, f"{where}[{k!r}]")
            raise
    return out


def _check_int(v, where):
    if type(v) is int:
        return v
    if isinstance(v, int) and not isinstance(v, bool):  # IntEnum and friends
        return int(v)
    _fail(where, "int", v)


def _finite(v: float, where: str) -> float:
    if math.isfinite(v):
        return v
    raise EventFieldError(where, f"expected a finite float (plain JSON has no NaN or infinity), got {v!r}")


def _check_float(v, where):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _finite(float(v), where)
    _fail(where, "float", v)


def _check_str(v, where):
    if type(v) is str:
        return v
    if isinstance(v, str):  # a str Enum such as KDAPhase: store its plain value
        return str.__str__(v)
    _fail(where, "str", v)


def _check_bool(v, where):
    if type(v) is bool:
        return v
    _fail(where, "bool", v)


def _check_none(v, where):
    if v is None:
        return None
    _fail(where, "None", v)


def _check_json(v, where):
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        return _finite(v, where)
    if isinstance(v, (list, tuple)):
        return _map_seq(_check_json, v, where, list)
    if isinstance(v, dict):
        return _map_dict(_check_json, v, where)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v) if isinstance(v, int) else _finite(float(v), where)
    _fail(where, "a JSON value", v)


_SCALARS: dict[Any, _Checker] = {int: _check_int, float: _check_float, str: _check_str, bool: _check_bool,
                                 type(None): _check_none, JSON: _check_json, Any: _check_json}
_SCALAR_TYPES = {_check_int: int, _check_str: str, _check_bool: bool}


def _type_name(tp) -> str:
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__name__
    return repr(tp).replace("typing.", "").replace("kda_ref.trace.fields.", "")


def compile_checker(tp) -> _Checker:
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    name = _type_name(tp)
    if origin is Literal:
        return _literal_checker(args)
    if origin in (Union, types.UnionType):
        return _union_checker(args, name)
    if origin is list or origin is tuple:
        variadic = origin is list or (len(args) == 2 and args[1] is Ellipsis)
        if variadic:
            return _sequence_checker(origin, args[0], name)
        return _fixed_tuple_checker(args, name)
    if origin is dict:
        if args[0] is not str:
            raise TypeError(f"trace events: dict keys must be str (JSON), got {name}")
        return _dict_checker(args[1], name)
    raise TypeError(f"trace events: unsupported field annotation {name}")


def _literal_checker(allowed: tuple) -> _Checker:
    """The checker of ``Literal[*allowed]`` (its ``allowed_str``: the allowed strings)."""

    def check_literal(v, where):
        if isinstance(v, str):
            v = str.__str__(v)
        if v in allowed and type(v) in (str, int, bool):
            return v
        raise EventFieldError(where, f"expected one of {list(allowed)}, got {describe(v)}")
    check_literal.allowed_str = frozenset(a for a in allowed if type(a) is str)
    return check_literal


def _union_checker(args: tuple, name: str) -> _Checker:
    """The checker of the union of ``args`` (its ``exact``: the types stored as they come)."""
    none_ok = type(None) in args
    subs = [compile_checker(a) for a in args if a is not type(None)]
    exact = frozenset(_SCALAR_TYPES[s] for s in subs if s in _SCALAR_TYPES)  # stored as they come

    def check_union(v, where):
        if type(v) in exact:  # fast path: no alternative tried and failed (a failure formats its message)
            return v
        if v is None:
            if none_ok:
                return None
            _fail(where, name, v)
        for sub in subs:
            try:
                return sub(v, where)
            except EventFieldError:
                continue
        _fail(where, name, v)
    check_union.exact = exact
    return check_union


def _sequence_checker(origin, item_tp, name: str) -> _Checker:
    """The checker of ``list[item_tp]`` or ``tuple[item_tp, ...]`` (``origin``: ``list`` or ``tuple``)."""
    item = compile_checker(item_tp)
    exact = _SCALAR_TYPES.get(item)
    allowed_str = getattr(item, "allowed_str", None)  # a Literal of strings
    make = list if origin is list else tuple

    def check_seq(v, where):
        if not isinstance(v, (list, tuple)):
            _fail(where, name, v)
        if exact is not None:  # fast paths: every element already of the exact type
            if all(type(x) is exact for x in v):
                return make(v)
        elif allowed_str is not None and all(type(x) is str and x in allowed_str for x in v):
            return make(v)
        return _map_seq(item, v, where, make)
    return check_seq


def _fixed_tuple_checker(args: tuple, name: str) -> _Checker:
    """The checker of ``tuple[*args]``, one type per element."""
    items = [compile_checker(a) for a in args]
    # per element, the types stored as they come (an empty set: always checked)
    exacts = [frozenset([_SCALAR_TYPES[c]]) if c in _SCALAR_TYPES else getattr(c, "exact", frozenset())
              for c in items]
    pair = len(items) == 2

    def check_fixed(v, where):
        if type(v) is tuple and pair and len(v) == 2 and type(v[0]) in exacts[0] and type(v[1]) in exacts[1]:
            return v  # fast path: a pair of plain values (a pool snapshot's (unit, owner))
        if not isinstance(v, (list, tuple)) or len(v) != len(items):
            _fail(where, name, v)
        return tuple(c(x, f"{where}[{i}]") for i, (c, x) in enumerate(zip(items, v)))
    return check_fixed


def _dict_checker(value_tp, name: str) -> _Checker:
    """The checker of ``dict[str, value_tp]``."""
    value = compile_checker(value_tp)

    def check_dict(v, where):
        if not isinstance(v, dict):
            _fail(where, name, v)
        return _map_dict(value, v, where)
    return check_dict
