"""The Live page's logic: attach to a running ``kda-ref serve``, read its live trace incrementally, keep a
window of steps, and turn it into what the Lab's views read (a header and trace events).

:class:`LiveWindow` asks ``GET /kda/trace?since=STEP`` for what it has not seen, keeps at most
``max_steps`` records, and counts the steps it missed; :meth:`LiveWindow.trace` gives ``(header, events)``.

Design notes: ``docs/visualizer.md#the-live-page``.
"""

from __future__ import annotations

import http.client
import io
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from kda_ref.cache.picture import BLOCK_STEPS, SNAPSHOT_FORMATS
from kda_ref.trace import PoolSnapshot, TraceEvent, write_jsonl
from kda_ref.trace.jsonl import TraceFormatError, loads_event
from ..i18n import LocalizedError

MAX_RESPONSE_BYTES = 32 << 20  # one poll's answer; a server's whole ring of 256 micro-model steps is ~2 MB
DEFAULT_URL = "http://127.0.0.1:8000"
MAX_WINDOW = 256  # steps the page keeps (the server's default ring)
MAX_BLOCK_STEPS = 64  # block tables kept for the page (the Lab's reader bound: model_viz.figures.lab)


class LiveError(LocalizedError):
    """A server the page cannot read (unreachable, refused, not a kda-ref server). Carries an i18n key."""


def _pool_base(raw) -> dict | None:
    """A server's ``pool_base`` ({kind: [[unit, owner], ...]}) as {kind: {unit: owner}}; None when absent or
    malformed (the window then draws the owners from the changes it has)."""
    if not isinstance(raw, dict):
        return None
    try:
        return {str(k): {int(u): o for u, o in pairs} for k, pairs in raw.items()}
    except (TypeError, ValueError):
        return None


def _made_whole(base: dict, event: dict) -> dict:
    """A pool-snapshot event dict with every allocated unit: ``base`` with the event's changes applied."""
    owners = {k: dict(v) for k, v in base.items()}
    if isinstance(event.get("owners"), dict):
        PoolSnapshot.fold(owners, event["owners"], event.get("full", True))
    return {**event, "full": True, "owners": {k: sorted(v.items()) for k, v in owners.items() if v}}


def check_url(url: str) -> str:
    """An ``http(s)://host[:port]`` base URL without a trailing slash, or :class:`LiveError` (a port that
    is not a number, a broken IPv6 address and a missing host included)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError:
        ok = False
    if not ok:
        raise LiveError("live.err.url", url=url[:80])
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def fetch(url: str, since: int, api_key: str | None = None, timeout: float = 5.0) -> dict:
    """``GET {url}/kda/trace?since=...`` as a dict, or :class:`LiveError` saying why not."""
    req = urllib.request.Request(f"{check_url(url)}/kda/trace?since={int(since)}")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            data = r.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise LiveError("live.err.http", status=e.code, msg=_error_text(e)) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise LiveError("live.err.unreachable", url=url[:80], msg=str(getattr(e, "reason", e))[:120]) from None
    if len(data) > MAX_RESPONSE_BYTES:
        raise LiveError("live.err.too_large", max_bytes=MAX_RESPONSE_BYTES)
    try:
        doc = json.loads(data)
    except ValueError:
        raise LiveError("live.err.not_kda") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise LiveError("live.err.not_kda")
    return doc


def fetch_pages(url: str, since: int, api_key: str | None = None, max_pages: int = 8) -> dict:
    """:func:`fetch` until the answer reaches the server's newest step (it pages its ring) or ``max_pages``
    answers came: one document, the first page's ``pool_base`` with every page's records."""
    doc = fetch(url, since, api_key)
    for _ in range(max_pages - 1):
        recs = doc["records"]
        if not recs or not isinstance(doc.get("last_step"), int) or recs[-1].get("step") == doc["last_step"]:
            break
        more = fetch(url, recs[-1]["step"], api_key)
        doc = {**more, "records": recs + more["records"], **({"pool_base": doc["pool_base"]}
                                                            if "pool_base" in doc else {})}
    return doc


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        return json.loads(e.read(4096))["error"]["message"][:200]
    except Exception:  # noqa: BLE001 -- any body: the status says enough
        return e.reason or ""


@dataclass
class LiveWindow:
    """The steps the page has read (oldest first), at most ``max_steps``; ``missed``: steps the server
    dropped from its ring before the page read them; a server whose last step is behind the window's (it
    restarted) starts the window again (``restarts`` counts it)."""

    max_steps: int = MAX_WINDOW
    header: dict = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    missed: int = 0
    restarts: int = 0  # times the server's step count went back (a new server on the same address)
    # the pool's owners before records[0] ({kind: {unit: owner}}): the server's pool snapshots carry only
    # each step's changes, so the window keeps what the records it dropped (or never saw) had set
    pool_base: dict = field(default_factory=dict)

    @property
    def last_step(self) -> int:
        return self.records[-1]["step"] if self.records else -1

    def add(self, doc: dict) -> int:
        """Append a :func:`fetch` answer; returns how many new records it brought."""
        last = doc.get("last_step")
        if self.records and isinstance(last, int) and last < self.last_step:  # the server restarted: its
            self.records, self.missed, self.restarts = [], 0, self.restarts + 1  # steps count from 1 again
            self.pool_base = {}
        new = [r for r in doc["records"] if isinstance(r, dict) and isinstance(r.get("step"), int)
               and r["step"] > self.last_step]
        first = doc.get("first_step")
        base = _pool_base(doc.get("pool_base"))
        if self.records and new and isinstance(first, int) and first > self.last_step + 1:
            self.missed += first - self.last_step - 1
            if base is not None:  # the steps in between are gone: the owners restart from the server's base
                new[0] = {**new[0], "pool_base": base}
        elif not self.records and base is not None:
            self.pool_base = base
        if isinstance(doc.get("header"), dict) and doc["header"]:
            self.header = doc["header"]
        merged = self.records + new
        for gone in merged[:-self.max_steps]:  # records leaving the window: their owners into the base
            self._fold(self.pool_base, gone)
        self.records = merged[-self.max_steps:]
        return len(new)

    @staticmethod
    def _fold(owners: dict, record: dict) -> None:
        """Apply a record's pool snapshots to ``owners`` (a record after a gap starts from its own base)."""
        if "pool_base" in record:
            owners.clear()
            owners.update({k: dict(v) for k, v in record["pool_base"].items()})
        for e in record.get("events", []):
            if isinstance(e, dict) and e.get("kind") == "pool_snapshot" and isinstance(e.get("owners"), dict):
                try:
                    PoolSnapshot.fold(owners, e["owners"], e.get("full", True))
                except (TypeError, ValueError):  # malformed: events() names it when the page reads the window
                    pass

    def events(self) -> list[TraceEvent]:
        """Every record's events, parsed and checked (a malformed one is :class:`LiveError`); the first pool
        snapshot of the window, and the first after a gap, made whole (its base and its changes), so the
        views rebuild every step's owners from the window alone."""
        out, base = [], {k: dict(v) for k, v in self.pool_base.items()}
        for j, r in enumerate(self.records):
            whole = j == 0 or "pool_base" in r
            if "pool_base" in r:
                base = {k: dict(v) for k, v in r["pool_base"].items()}
            for e in r.get("events", []):
                try:
                    if whole and isinstance(e, dict) and e.get("kind") == "pool_snapshot":
                        e, whole = _made_whole(base, e), False
                    out.append(loads_event(json.dumps(e)))
                except (TraceFormatError, TypeError, ValueError) as err:
                    raise LiveError("live.err.bad_event", step=r["step"], msg=str(err)[:200]) from None
        return out

    def trace(self) -> tuple[dict, list[TraceEvent]]:
        """``(header, events)`` as the Lab's views read them: the cache snapshots in ``tree_steps`` or
        ``block_steps``."""
        head = {**self.header, "scenario": "live"}
        for r in self.records:  # a format the views draw (kda_ref.cache.picture.SNAPSHOT_FORMATS), whichever cache
            if isinstance(r.get("cache"), dict) and r["cache"].get("key") in SNAPSHOT_FORMATS:
                head.setdefault(r["cache"]["key"], []).append(r["cache"]["snapshot"])
        if BLOCK_STEPS in head:
            head[BLOCK_STEPS] = head[BLOCK_STEPS][-MAX_BLOCK_STEPS:]
        return head, self.events()

    def state_at(self, step: int) -> dict:
        """The engine's state after ``step`` (the last record at or before it)."""
        at = [r for r in self.records if r["step"] <= step]
        return (at[-1] if at else self.records[0])["state"] if self.records else {}

    def jsonl(self) -> str:
        """The window as a JSONL trace (the Lab's and every page's upload box read it)."""
        head, events = self.trace()
        buf = io.StringIO()
        write_jsonl(events, buf, metadata=head)
        return buf.getvalue()
