"""The workload data model: :class:`WorkloadRequest`, :class:`Workload`, validation, statistics and
the JSONL file format.

File format: ``schema = "kda_ref.workloads"``, ``version = 2``; a header line (``params`` must hold ``vocab_size``;
``num_requests`` request lines follow), then one request per line; ``.gz`` paths are gzip-compressed. Any reading
problem is a :class:`WorkloadError` naming the file or the line. Limits, checked before the work they would cost:
regular files only (:func:`kda_ref.utils.files.open_regular`, :func:`kda_ref.utils.files.replaced_whole`),
:data:`MAX_LINE_BYTES` per line after decompression, ``arrival_s`` in ``[0, MAX_ARRIVAL_S]``.
Design notes: ``docs/workloads.md#export-and-import-jsonl``
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, TextIO

from ..utils.files import open_regular, replaced_whole

SCHEMA = "kda_ref.workloads"
VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1 has no num_requests
_REQUEST_KEYS = ("req_id", "arrival_s", "session", "parent", "prompt", "output")


MAX_ARRIVAL_S = 10 ** 12  # seconds (~31,700 years): any real arrival time, and exact as a float
# bytes of one line, its newline included: a 1M-token prompt of 6-digit ids is ~7 MB of JSON
MAX_LINE_BYTES = 32 << 20


class WorkloadError(ValueError):
    """A workload that is invalid: a bad parameter value, an unknown family, or a malformed file
    (the message names the argument, or the line and field)."""


class WorkloadTypeError(WorkloadError, TypeError):
    """A parameter of the wrong type, or an unknown parameter name. It is both a
    :class:`WorkloadError` and a :class:`TypeError`, so either ``except`` catches it."""


@dataclass(frozen=True)
class WorkloadRequest:
    """One request of a workload.

    ``output`` is the reference continuation; its length is the request's ``max_tokens``, and a
    cache simulator treats it as what the model generated (so a child request's prompt can extend
    ``prompt + output`` of its ``parent``). Lists given for ``prompt``/``output`` become tuples.
    """

    req_id: int  # 0..n-1, in arrival order
    arrival_s: float  # seconds from the start, non-decreasing with req_id
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    session: str  # conversation / search tree / document / task id
    parent: int | None = None  # req_id whose prompt+output this prompt extends, else None

    def __post_init__(self):
        if type(self.prompt) is not tuple:
            object.__setattr__(self, "prompt", tuple(self.prompt))
        if type(self.output) is not tuple:
            object.__setattr__(self, "output", tuple(self.output))

    @property
    def max_tokens(self) -> int:
        return len(self.output)

    def to_json(self) -> dict:
        return {
            "req_id": self.req_id,
            "arrival_s": self.arrival_s,
            "session": self.session,
            "parent": self.parent,
            "prompt": list(self.prompt),
            "output": list(self.output),
        }


@dataclass
class Workload:
    """A generated (or loaded) workload: ``requests`` in arrival order, plus the ``family``,
    ``seed`` and resolved ``params`` that produced it. ``make(w.family, w.seed, **w.params)``
    regenerates a generated workload exactly."""

    family: str
    seed: int
    params: dict
    requests: list[WorkloadRequest] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self):
        return iter(self.requests)

    # ------------------------------------------------------------------ statistics
    def stats(self) -> dict:
        """Summary numbers. ``shared_prefix_tokens`` is the ideal reuse with an infinite,
        token-granular cache: for each request, the length of the longest prefix of its prompt
        that is also a prefix of some *earlier* request's ``prompt + output``, summed."""
        reqs = self.requests
        n = len(reqs)
        plens = [len(r.prompt) for r in reqs]
        olens = [len(r.output) for r in reqs]
        prompt_tokens = sum(plens)
        shared = shared_prefix_tokens(reqs)
        return {
            "num_requests": n,
            "prompt_tokens": prompt_tokens,
            "output_tokens": sum(olens),
            "mean_prompt_len": prompt_tokens / n if n else 0.0,
            "max_prompt_len": max(plens, default=0),
            "mean_output_len": sum(olens) / n if n else 0.0,
            "sessions": len({r.session for r in reqs}),
            "dependent_requests": sum(r.parent is not None for r in reqs),
            "duration_s": reqs[-1].arrival_s if n else 0.0,
            "shared_prefix_tokens": shared,
            "shared_prefix_fraction": shared / prompt_tokens if prompt_tokens else 0.0,
        }

    # ------------------------------------------------------------------ validation
    def validate(self) -> "Workload":
        """Check the same invariants :func:`load` checks (raises :class:`WorkloadError` naming the
        request and field); returns ``self``."""
        vocab = _header_vocab(self.params, "params")
        checker = _Checker(vocab)
        for i, r in enumerate(self.requests):
            if not isinstance(r, WorkloadRequest):
                raise WorkloadError(f"requests[{i}]: expected WorkloadRequest, got {type(r).__name__}")
            checker.check(_as_dict(r), f"request {i}")
        return self

    # ------------------------------------------------------------------ JSONL
    def to_jsonl(self, path) -> None:
        """Write the header line and one line per request (``.gz`` paths are gzip-compressed). A ``path``
        that exists and is not a regular file (a FIFO, a device) is a :class:`WorkloadError` naming
        ``path``, before it is opened for writing."""
        header = {"schema": SCHEMA, "version": VERSION, "family": self.family, "seed": self.seed,
                  "params": self.params, "num_requests": len(self.requests)}
        with _writer(path) as f:
            f.write(json.dumps(header, separators=(",", ":")) + "\n")
            dumps = json.JSONEncoder(separators=(",", ":")).encode
            for r in self.requests:
                f.write(dumps({"req_id": r.req_id, "arrival_s": r.arrival_s, "session": r.session,
                               "parent": r.parent, "prompt": r.prompt, "output": r.output}))
                f.write("\n")

    @classmethod
    def from_jsonl(cls, path) -> "Workload":
        """Read and validate a file written by :meth:`to_jsonl`. Raises :class:`WorkloadError`
        naming the line and field on any problem (bad schema/version, malformed JSON, missing or
        unknown fields, wrong types, ``req_id`` out of sequence, arrivals going backwards, a parent
        that is not earlier or whose ``prompt + output`` the prompt does not extend, token ids
        outside ``[0, params["vocab_size"])``, fewer or more requests than the header announces), or
        naming the file when it cannot be read as (gzip-compressed) UTF-8 text."""
        try:
            return cls._read(path)
        except FileNotFoundError:
            raise WorkloadError(f"path: {os.fspath(path)} does not exist") from None
        except (UnicodeDecodeError, EOFError, OSError, zlib.error) as e:  # not UTF-8, a cut or fake .gz file
            raise WorkloadError(f"path: {os.fspath(path)} cannot be read as a workload "
                                f"({type(e).__name__}: {str(e)[:120]})") from None

    @classmethod
    def _read(cls, path) -> "Workload":
        with contextlib.closing(_lines(path)) as lines:  # the file closes on an error too
            _, first = next(lines, (1, ""))
            if not first.strip():
                raise WorkloadError("line 1: empty file, expected the workload header")
            family, seed, params, count = _check_header(_parse_line(first, 1))
            checker = _Checker(_header_vocab(params, "line 1: field 'params'"))
            requests = []
            lineno = 1
            for lineno, line in lines:
                if not line.strip():
                    raise WorkloadError(f"line {lineno}: empty line")
                if count is not None and len(requests) == count:  # refused here, not after reading the rest
                    raise WorkloadError(f"line {lineno}: the header announces {count} requests (field "
                                        f"'num_requests') but the file has more; concatenated?")
                obj = _parse_line(line, lineno)
                prompt, output = checker.check(obj, f"line {lineno}")
                requests.append(WorkloadRequest(obj["req_id"], float(obj["arrival_s"]), prompt,
                                                output, obj["session"], obj["parent"]))
        if count is not None and count != len(requests):
            raise WorkloadError(f"line {lineno}: the header announces {count} requests (field 'num_requests') "
                                f"but the file has {len(requests)}; truncated or concatenated?")
        return cls(family, seed, params, requests)


def save(workload: Workload, path) -> None:
    """Write ``workload`` to ``path`` as JSONL (see :meth:`Workload.to_jsonl`)."""
    if not isinstance(workload, Workload):
        raise WorkloadTypeError(f"workload: expected Workload, got {type(workload).__name__}")
    workload.to_jsonl(path)


def load(path) -> Workload:
    """Read and validate a JSONL workload (see :meth:`Workload.from_jsonl`)."""
    return Workload.from_jsonl(path)


# ---------------------------------------------------------------------------- shared prefixes
def shared_prefix_tokens(requests: Iterable[WorkloadRequest]) -> int:
    """Sum over requests of the longest prefix of ``prompt`` shared with an earlier request's
    ``prompt + output``.

    Online radix tree (compressed trie) whose edges are token tuples: each request is matched and
    then inserted as ``prompt + output``. Edge comparisons are tuple-slice equality (C speed), the
    mismatch inside an edge is found by galloping + binary search, and ``prompt + output`` is never
    materialised — only the new suffix that becomes a leaf edge is copied. Linear in the total
    token count (about half a second for 10,000 requests of 2,000 tokens on a slow core).
    """
    root: dict = {}  # first token -> [edge tuple, children dict]
    total = 0
    for r in requests:
        p = r.prompt
        matched = _insert(root, p, r.output)
        total += matched if matched < len(p) else len(p)
    return total


def _insert(root: dict, a: tuple, b: tuple) -> int:
    """Insert the sequence ``a + b`` into the radix tree ``root``; return how many of its leading
    tokens were already there."""
    na = len(a)
    n = na + len(b)

    def sl(i: int, j: int) -> tuple:  # (a + b)[i:j] without building a + b
        if j <= na:
            return a[i:j]
        if i >= na:
            return b[i - na:j - na]
        return a[i:] + b[:j - na]

    children = root
    pos = 0
    while pos < n:
        tok = a[pos] if pos < na else b[pos - na]
        node = children.get(tok)
        if node is None:
            children[tok] = [sl(pos, n), {}]
            return pos
        edge = node[0]
        m = len(edge)
        if n - pos < m:
            m = n - pos
            full = edge[:m] == sl(pos, pos + m)
        else:
            full = edge == sl(pos, pos + m)
        if full and m == len(edge):
            pos += m
            children = node[1]
            continue
        if not full:  # find the first mismatch in edge[:m]: gallop, then bisect
            m = _first_mismatch(edge, m, sl, pos)
        if pos + m == n:  # the sequence ends inside this edge: nothing new to insert
            return n
        # split the edge at m (m >= 1: its first token matched)
        node[0] = edge[m:]
        children[tok] = [edge[:m], {edge[m]: node, (a[pos + m] if pos + m < na else b[pos + m - na]):
                                    [sl(pos + m, n), {}]}]
        return pos + m
    return n


def _first_mismatch(edge: tuple, m: int, sl, pos: int) -> int:
    """Index of the first token where ``edge[:m]`` and ``sl(pos, pos + m)`` (known to differ) differ."""
    lo, step = 0, 16
    while True:
        hi = lo + step
        if hi >= m:
            hi = m
            break
        if edge[lo:hi] != sl(pos + lo, pos + hi):
            break
        lo, step = hi, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if edge[lo:mid] == sl(pos + lo, pos + mid):
            lo = mid
        else:
            hi = mid
    return lo


# ---------------------------------------------------------------------------- validation helpers
def _as_dict(r: WorkloadRequest) -> dict:
    return {"req_id": r.req_id, "arrival_s": r.arrival_s, "session": r.session, "parent": r.parent,
            "prompt": r.prompt, "output": r.output}


@contextlib.contextmanager
def _writer(path) -> Iterator[TextIO]:
    """A UTF-8 text file writing ``path`` (gzip-compressed, level 1, for a ``.gz`` name): a regular file
    or a new one only (a :class:`WorkloadError` naming ``path`` otherwise), written whole or not at all
    (:func:`~kda_ref.utils.files.replaced_whole`: the previous file stays readable when writing fails).
    Reading goes through :func:`_lines`."""
    with replaced_whole(path, WorkloadError) as raw, contextlib.ExitStack() as stack:
        if os.fspath(path).endswith(".gz"):  # level 1: ~7x faster than the default 9, files ~15% larger
            # GzipFile leaves a file object it was given open; the stack closes it after the gzip trailer
            raw = stack.enter_context(gzip.GzipFile(os.fspath(path), "wb", compresslevel=1, fileobj=raw))
        yield stack.enter_context(io.TextIOWrapper(raw, encoding="utf-8", newline="\n"))


def _lines(path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line of the workload file ``path`` (gunzipped for a ``.gz``
    name). Opens only a regular file (:func:`~kda_ref.utils.files.open_regular`: a :class:`WorkloadError`
    naming ``path`` otherwise, never blocking), and reads each line in bounded pieces, refusing it past
    :data:`MAX_LINE_BYTES` before it is decoded or parsed. Text that is not UTF-8 raises
    :class:`UnicodeDecodeError` (:meth:`Workload.from_jsonl` names the file)."""
    with open_regular(path, WorkloadError) as raw:
        f = gzip.GzipFile(fileobj=raw, mode="rb") if os.fspath(path).endswith(".gz") else raw
        with f:
            lineno = 0
            while line := f.readline(MAX_LINE_BYTES + 1):
                lineno += 1
                if len(line) > MAX_LINE_BYTES:
                    raise WorkloadError(f"line {lineno}: longer than {MAX_LINE_BYTES:,} bytes, the most a workload "
                                        f"line may hold (file {os.fspath(path)})")
                yield lineno, line.decode("utf-8")


def _parse_line(line: str, lineno: int) -> Any:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise WorkloadError(f"line {lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
    except (ValueError, RecursionError) as e:  # a 5,000-digit integer; nesting deeper than Python recurses
        raise WorkloadError(f"line {lineno}: not usable JSON ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(obj, dict):
        raise WorkloadError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _is_int(x) -> bool:
    return type(x) is int


def _check_header(h: dict):
    where = "line 1 (header)"
    if h.get("schema") != SCHEMA:
        raise WorkloadError(f"{where}: field 'schema' is {h.get('schema')!r}, expected {SCHEMA!r}")
    if "version" not in h:
        raise WorkloadError(f"{where}: field 'version' is missing")
    if not _is_int(h["version"]) or h["version"] not in READABLE_VERSIONS:
        raise WorkloadError(f"{where}: field 'version' is {h['version']!r}; this reader supports "
                            f"versions {READABLE_VERSIONS}")
    for key in ("family", "seed", "params"):
        if key not in h:
            raise WorkloadError(f"{where}: field {key!r} is missing")
    known = {"schema", "version", "family", "seed", "params"} | ({"num_requests"} if h["version"] >= 2 else set())
    unknown = sorted(set(h) - known)
    if unknown:
        raise WorkloadError(f"{where}: unknown field(s) {unknown}")
    if not isinstance(h["family"], str) or not h["family"]:
        raise WorkloadError(f"{where}: field 'family' must be a non-empty string")
    if not _is_int(h["seed"]):
        raise WorkloadError(f"{where}: field 'seed' must be an integer, got {h['seed']!r}")
    if not isinstance(h["params"], dict):
        raise WorkloadError(f"{where}: field 'params' must be an object")
    count = None
    if h["version"] >= 2:
        count = h.get("num_requests")
        if not _is_int(count) or count < 0:
            raise WorkloadError(f"{where}: field 'num_requests' must be an integer >= 0, got {count!r}")
    return h["family"], h["seed"], h["params"], count


def _header_vocab(params, where: str) -> int:
    if not isinstance(params, dict):
        raise WorkloadError(f"{where}: expected a dict of parameters")
    v = params.get("vocab_size")
    if not _is_int(v) or v < 1:
        raise WorkloadError(f"{where}: 'vocab_size' must be a positive integer, got {v!r}")
    return v


class _Checker:
    """Checks requests one at a time, in order (needs the earlier ones for parent relations)."""

    def __init__(self, vocab: int):
        self.vocab = vocab
        self.prev_arrival = -math.inf
        self.seqs: list[tuple[tuple, tuple]] = []  # (prompt, output) by req_id

    def _tokens(self, obj: dict, key: str, where: str) -> None:
        toks = obj[key]
        if not isinstance(toks, (list, tuple)):
            raise WorkloadError(f"{where}: field {key!r} must be a list of token ids")
        if not toks:
            raise WorkloadError(f"{where}: field {key!r} is empty (need at least one token)")
        types = set(map(type, toks))
        if types != {int}:
            bad = next(t for t in toks if type(t) is not int)
            raise WorkloadError(f"{where}: field {key!r} holds a non-integer token {bad!r}")
        lo, hi = min(toks), max(toks)
        if lo < 0 or hi >= self.vocab:
            bad = lo if lo < 0 else hi
            raise WorkloadError(f"{where}: field {key!r} holds token id {bad}, outside "
                                f"[0, vocab_size={self.vocab})")

    def check(self, obj: dict, where: str) -> tuple[tuple, tuple]:
        """Check one request (a dict with the JSON fields); return its (prompt, output) tuples."""
        missing = [k for k in _REQUEST_KEYS if k not in obj]
        if missing:
            raise WorkloadError(f"{where}: missing field(s) {missing}")
        unknown = sorted(set(obj) - set(_REQUEST_KEYS))
        if unknown:
            raise WorkloadError(f"{where}: unknown field(s) {unknown}")
        idx = len(self.seqs)
        rid = obj["req_id"]
        if not _is_int(rid) or rid != idx:
            raise WorkloadError(f"{where}: field 'req_id' is {rid!r}, expected {idx} "
                                "(requests must be numbered 0..n-1 in order)")
        t = obj["arrival_s"]
        # compared as given: a 400-digit int is never turned into a float; nan compares False, so is refused
        if type(t) not in (int, float) or not 0 <= t <= MAX_ARRIVAL_S:
            raise WorkloadError(f"{where}: field 'arrival_s' must be a finite number in [0, {MAX_ARRIVAL_S:.0e}] "
                                f"seconds, got {str(t)[:40]!r}")
        if t < self.prev_arrival:
            raise WorkloadError(f"{where}: field 'arrival_s' = {t} is earlier than the previous "
                                f"request's {self.prev_arrival} (arrivals must be non-decreasing)")
        if not isinstance(obj["session"], str):
            raise WorkloadError(f"{where}: field 'session' must be a string")
        self._tokens(obj, "prompt", where)
        self._tokens(obj, "output", where)
        prompt = tuple(obj["prompt"])
        parent = obj["parent"]
        if parent is not None:
            if not _is_int(parent) or not 0 <= parent < idx:
                raise WorkloadError(f"{where}: field 'parent' is {parent!r}; it must be null or the "
                                    f"req_id of an earlier request (0..{idx - 1})")
            pp, po = self.seqs[parent]
            n = len(pp) + len(po)
            if len(prompt) < n or prompt[:len(pp)] != pp or prompt[len(pp):n] != po:
                raise WorkloadError(f"{where}: field 'prompt' does not start with parent "
                                    f"{parent}'s prompt + output")
        self.prev_arrival = t
        output = tuple(obj["output"])
        self.seqs.append((prompt, output))
        return prompt, output
