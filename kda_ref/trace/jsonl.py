"""Traces as JSON Lines: a versioned header, then one event per line (``TraceEvent.to_dict()``).

:func:`read_jsonl` is strict, because the visualizer also reads files users upload: a foreign header
or schema version, a malformed line or field, or a file with fewer or more events than its header
announces raises :class:`TraceFormatError`, whose message starts with ``line N:``. A path must be a
regular file of at most :data:`MAX_TRACE_BYTES` bytes; :func:`write_jsonl` refuses a target that exists
and is not a regular file (:class:`~kda_ref.utils.outputs.OutputError`). Bump :data:`SCHEMA_VERSION`
whenever an event type or field changes meaning, is added or removed; the reader reads its own version and
the older ones (a field added since has a default that says what an older trace means), and refuses a newer
one by name.

Design notes: ``docs/trace.md#the-jsonl-format``.
"""

import errno
import io
import json
import math
import os

from ..utils.files import read_regular, replaced_whole
from ..utils.outputs import OutputError
from .events import EVENT_TYPES, EventFieldError, TraceEvent

__all__ = ["MAX_TRACE_BYTES", "SCHEMA_NAME", "SCHEMA_VERSION", "TraceFormatError", "write_jsonl", "read_jsonl",
           "read_jsonl_string", "dumps_event", "loads_event"]

SCHEMA_NAME = "kda-viz-trace"
SCHEMA_VERSION = 2  # 2: BatchComposition.own_forwards (a draft tree's segment holds its nodes)
# bytes of a trace read from a path: 8x the app's upload bound (MAX_UPLOAD_BYTES, 8 MiB); at ~200 bytes an
# event, ~300,000 events, a few hundred MB once parsed
MAX_TRACE_BYTES = 64 << 20
_RESERVED = ("schema", "version", "num_events")


class TraceFormatError(ValueError):
    """A malformed trace file. ``line`` is the 1-based line number (``None`` for the whole file)."""

    def __init__(self, message: str, line: int | None = None):
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


def _short(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err)[:120]}"


def dumps_event(event: TraceEvent) -> str:
    """One event as one JSON line (no trailing newline)."""
    return json.dumps(event.to_dict(), ensure_ascii=False, separators=(", ", ": "), allow_nan=False)


def _no_repeated_keys(pairs: list) -> dict:
    """A JSON object's pairs as a dict, refusing a key given twice (``json.loads`` keeps the last silently:
    ``{"step": "oops", "step": 4}`` read as step 4)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def _no_constants(name: str):
    """``json.loads``' hook for ``NaN`` / ``Infinity`` / ``-Infinity``: Python accepts them, plain JSON does not."""
    raise ValueError(f"{name} is not plain JSON")


def _finite_float(text: str) -> float:
    """``json.loads``' hook for a JSON number with a fraction or exponent: one past a float's range (``1e400``)
    would read as infinity, which the trace's floats never are."""
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text} is out of a float's range")
    return v


def _loads(text: str):
    """``json.loads`` refusing a repeated key, ``NaN`` / ``Infinity`` and a number that reads as infinity."""
    return json.loads(text, object_pairs_hook=_no_repeated_keys, parse_constant=_no_constants,
                      parse_float=_finite_float)


def loads_event(text: str, line: int | None = None) -> TraceEvent:
    """Parse and validate one event line; errors are :class:`TraceFormatError` naming ``line``."""
    try:
        obj = _loads(text)
    except json.JSONDecodeError as e:
        raise TraceFormatError(f"bad JSON: {e.msg} (column {e.colno})", line) from None
    except (ValueError, RecursionError) as e:  # a 5,000-digit integer; nesting deeper than Python recurses
        raise TraceFormatError(f"bad JSON: {_short(e)}", line) from None
    if not isinstance(obj, dict):
        raise TraceFormatError(f"expected a JSON object (an event), got {type(obj).__name__}", line)
    if "kind" not in obj:
        if "schema" in obj:
            raise TraceFormatError("a second header; an event needs a 'kind'", line)
        raise TraceFormatError("missing field 'kind'", line)
    kind = obj["kind"]
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise TraceFormatError(f"unknown event kind {kind!r} (field 'kind'); known kinds: {sorted(EVENT_TYPES)}", line)
    try:
        return cls.from_dict(obj)
    except EventFieldError as e:
        raise TraceFormatError(f"{kind}: {e}", line) from None
    except RecursionError:
        raise TraceFormatError(f"{kind}: a field is nested too deeply", line) from None


def write_jsonl(events, path_or_file, metadata: dict | None = None) -> int:
    """Write a header and then ``events`` to a path or a text file object; returns the event count.

    ``metadata`` (JSON-able, without the reserved keys) is merged into the header. A path that exists
    and is not a regular file (a FIFO would block the write) is an :class:`OutputError` naming ``path``.
    """
    events = list(events)
    for i, e in enumerate(events):
        if not isinstance(e, TraceEvent):
            raise TypeError(f"write_jsonl: item {i} is a {type(e).__name__}, not a TraceEvent")
    metadata = dict(metadata or {})
    clash = [k for k in _RESERVED if k in metadata]
    if clash:
        raise ValueError(f"write_jsonl: metadata may not set the reserved header key(s) {clash}")
    header = {"schema": SCHEMA_NAME, "version": SCHEMA_VERSION, "num_events": len(events), **metadata}
    try:
        head = json.dumps(header, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"write_jsonl: metadata is not JSON-serialisable: {e}") from None
    lines = [head] + [dumps_event(e) for e in events]
    text = "\n".join(lines) + "\n"
    if isinstance(path_or_file, (str, os.PathLike)):
        try:  # before the file is created: a text UTF-8 cannot hold (a lone surrogate) leaves no empty file
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"write_jsonl: an event or the metadata holds text UTF-8 cannot encode ({e.reason} "
                             f"at {e.start})") from None
        with replaced_whole(path_or_file, OutputError) as f:  # whole or not at all (a full disk, Ctrl-C)
            f.write(data)
    else:
        path_or_file.write(text)
    return len(events)


def _read_path(path) -> bytes:
    """The bytes of the trace file ``path``: a regular file of at most :data:`MAX_TRACE_BYTES` bytes,
    else a :class:`TraceFormatError` naming ``path`` (a FIFO would block the reader, ``/dev/zero`` never
    ends). A folder, a missing file or one without permission is ``path: cannot read ... (why)``, in
    the operating system's words."""
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        return read_regular(path, MAX_TRACE_BYTES, TraceFormatError, "a trace")
    except OSError as e:  # missing, a folder, no permission
        raise TraceFormatError(f"path: cannot read {os.fspath(path)} ({e.strerror or type(e).__name__})") from None


def _read_text(path_or_file) -> str:
    """The text of a trace given as a path (:func:`_read_path`) or as a file object."""
    if isinstance(path_or_file, (str, os.PathLike)):
        data = _read_path(path_or_file)
    else:
        data = path_or_file.read()
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceFormatError(f"not UTF-8 text (byte {e.start})") from None
    if not isinstance(data, str):
        raise TypeError(f"read_jsonl: expected a path or a file object, got {type(path_or_file).__name__}")
    return data


def read_jsonl(path_or_file) -> tuple[dict, list[TraceEvent]]:
    """Read and validate a trace: ``(header, events)``. See the module docstring for what is checked."""
    text = _read_text(path_or_file)
    if text.startswith("\ufeff"):
        text = text[1:]
    # split on "\n" only: JSON strings written with ensure_ascii=False may hold U+2028 etc.
    raw = [(i + 1, ln.rstrip("\r")) for i, ln in enumerate(text.split("\n"))]
    lines = [(n, ln) for n, ln in raw if ln.strip()]
    if not lines:
        raise TraceFormatError("missing header: the file is empty", 1)
    n0, first = lines[0]
    try:
        header = _loads(first)
    except json.JSONDecodeError as e:
        raise TraceFormatError(f"missing header: the first line is not JSON ({e.msg})", n0) from None
    except (ValueError, RecursionError) as e:
        raise TraceFormatError(f"missing header: the first line is not usable JSON ({_short(e)})", n0) from None
    if not isinstance(header, dict) or "schema" not in header:
        what = f"a {header['kind']!r} event" if isinstance(header, dict) and "kind" in header else "not a header"
        raise TraceFormatError(f"missing header: the first line is {what}; expected "
                               f'{{"schema": "{SCHEMA_NAME}", "version": {SCHEMA_VERSION}, ...}}', n0)
    if header["schema"] != SCHEMA_NAME:
        raise TraceFormatError(f"unknown schema {header['schema']!r} (field 'schema'); expected {SCHEMA_NAME!r}", n0)
    version = header.get("version")
    if type(version) is not int:
        raise TraceFormatError(f"field 'version' must be an int, got {version!r}", n0)
    if not 1 <= version <= SCHEMA_VERSION:
        raise TraceFormatError(f"schema version {version} is not supported (field 'version'); "
                               f"this reader reads versions 1 to {SCHEMA_VERSION}", n0)
    expected = header.get("num_events")
    if expected is not None and (type(expected) is not int or expected < 0):
        raise TraceFormatError(f"field 'num_events' must be an int >= 0, got {expected!r}", n0)
    events = [loads_event(ln, n) for n, ln in lines[1:]]
    if expected is not None and expected != len(events):
        last = lines[-1][0]
        raise TraceFormatError(f"the header announces {expected} events (field 'num_events') but the file "
                               f"has {len(events)}; truncated or concatenated?", last)
    return header, events


def read_jsonl_string(text: str) -> tuple[dict, list[TraceEvent]]:
    """:func:`read_jsonl` on a string (an uploaded file's contents)."""
    return read_jsonl(io.StringIO(text))
