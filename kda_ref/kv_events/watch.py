"""``kda-ref watch URL | CAPTURE``: one watcher for kda-ref, vLLM and SGLang servers.

It finds what the server publishes (``GET /kv_event_sources``, SGLang's ``GET /server_info``, or
``--kv-events ENDPOINT``), subscribes to every rank and replays what it missed (:mod:`.subscriber`),
rebuilds each rank's prefix forest per group (:mod:`.forest`) and reads ``/metrics`` once a period
(:mod:`.metrics`). Output: a table redrawn in place, the same table as plain text, or ``--json`` (one
object a line). A server that cannot be reached, publishes nothing or sends what cannot be decoded is one
line on stderr naming what and where; the watch goes on with what it has.

Design notes (discovery, the ``--json`` fields, captures):
``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from .forest import Forest
from .metrics import snapshot
from .subscriber import Capture, Source, Subscriber, read_capture

WILDCARDS = ("*", "0.0.0.0", "::", "[::]")
HTTP_TIMEOUT_S = 5.0


class WatchError(RuntimeError):
    """What the watcher cannot do at all (one line, exit 2): no URL answers, a capture that is not one."""


def _get_json(url: str, key: str | None):
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r:
        return json.loads(r.read(4 << 20))


def _get_text(url: str, key: str | None) -> str:
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r:
        return r.read(16 << 20).decode("utf-8", "replace")


def reachable(endpoint: str | None, host: str) -> str | None:
    """``endpoint`` with a wildcard host replaced by ``host`` (a bound address is not a connectable one)."""
    if not endpoint or not endpoint.startswith("tcp://"):
        return endpoint
    addr, _, port = endpoint[len("tcp://"):].rpartition(":")
    return f"tcp://{host}:{port}" if addr in WILDCARDS else endpoint


def sources_of(url: str, key: str | None = None, report=print) -> list[Source]:
    """The publishers a server at ``url`` announces (module docstring); [] with one line when none."""
    host = urllib.parse.urlsplit(url).hostname or "127.0.0.1"
    try:
        doc = _get_json(url + "/kv_event_sources", key)
        return [Source(int(rank), reachable(c["endpoint"], host), reachable(c.get("replay_endpoint"), host),
                       c.get("topic") or "") for rank, c in sorted(doc.items(), key=lambda kv: int(kv[0]))
                if c.get("publisher", "zmq") == "zmq"]
    except urllib.error.HTTPError as e:
        if e.code != 404:
            report(f"kda-ref watch: {url}/kv_event_sources answered {e.code}")
            return []
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        report(f"kda-ref watch: {url}/kv_event_sources: {str(getattr(e, 'reason', e))[:120]}")
        return []
    return _sglang_sources(url, host, key, report)


def _sglang_sources(url: str, host: str, key: str | None, report) -> list[Source]:
    try:
        kv = _get_json(url + "/server_info", key).get("kv_events")
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as e:
        report(f"kda-ref watch: {url} has neither /kv_event_sources nor /server_info "
               f"({str(getattr(e, 'reason', e))[:80]}): it publishes no KV events we can find; pass --kv-events")
        return []
    if not isinstance(kv, dict) or "endpoint_port_base" not in kv:
        report(f"kda-ref watch: {url}/server_info describes no KV-event publisher (start SGLang with "
               f"--kv-events-config '{{\"publisher\": \"zmq\"}}')")
        return []
    h = host if kv.get("endpoint_host") in WILDCARDS or not kv.get("endpoint_host") else kv["endpoint_host"]
    replay = kv.get("replay_endpoint_port_base")
    return [Source(r, f"tcp://{h}:{kv['endpoint_port_base'] + r}",
                   f"tcp://{h}:{replay + r}" if replay is not None else None, kv.get("topic") or "")
            for r in range(int(kv.get("dp_size", 1)))]


def model_of(url: str, key: str | None) -> str | None:
    try:
        data = _get_json(url + "/v1/models", key).get("data") or []
        return data[0].get("id") if data else None
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None


@dataclass
class WatchState:
    """What the watcher knows now: the forest and its counters, the last metrics snapshot, which server."""

    forest: Forest = field(default_factory=Forest)
    metrics: dict = field(default_factory=dict)
    engine: str | None = None
    model: str | None = None
    url: str | None = None

    def line(self) -> dict:
        """The ``--json`` object (module docstring)."""
        m, c = self.metrics, self.forest.counts
        return {"t": round(time.time(), 3), "engine": self.engine or m.get("engine"), "model": self.model,
                "running": m.get("running"), "waiting": m.get("waiting"), "kv_usage": m.get("kv_usage"),
                "prefix_cache": m.get("prefix_cache", {"queries": None, "hits": None}),
                "accepted_per_pos": m.get("accepted_per_pos", []),
                "groups": self.forest.summary(),
                "events": {"batches": c.batches, "stored": c.stored, "removed": c.removed, "cleared": c.cleared,
                           "replayed": c.replayed, "lost": c.lost}}


def _report(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def watch_server(a: argparse.Namespace, emit, report=_report) -> WatchState:
    """Follow a live server for ``a.seconds`` (None: until interrupted); ``emit(state)`` each period,
    ``report(line)`` for what went wrong (stderr; the table's last lines in a terminal)."""
    url = a.target.rstrip("/")
    state = WatchState(url=url)
    sources = [Source(0, a.kv_events, a.replay, a.topic)] if a.kv_events else sources_of(url, a.api_key, report)
    state.model = model_of(url, a.api_key)
    capture = Capture(a.record, {"url": url, "model": state.model,
                                 "sources": [s.__dict__ for s in sources]}) if a.record else None
    sub = Subscriber(sources, state.forest, capture, report).connect()
    deadline = None if a.seconds is None else time.monotonic() + a.seconds
    try:
        while deadline is None or time.monotonic() < deadline:
            left = a.interval if deadline is None else max(0.0, min(a.interval, deadline - time.monotonic()))
            sub.pump(left)
            _scrape(url, a.api_key, state, capture, report)
            emit(state)
    finally:
        sub.close()
    return state


def _scrape(url: str, key: str | None, state: WatchState, capture: Capture | None, report=_report) -> None:
    try:
        state.metrics = snapshot(_get_text(url + "/metrics", key))
    except (urllib.error.URLError, OSError, ValueError) as e:
        report(f"kda-ref watch: {url}/metrics: {str(getattr(e, 'reason', e))[:120]}")
        return
    state.engine = state.metrics.get("engine") or state.engine
    if capture is not None:
        capture.write({"t": time.time(), "metrics": state.metrics})


def watch_capture(a: argparse.Namespace, emit) -> WatchState:
    """Replay a ``--record`` file through the same subscriber logic; ``emit`` after each metrics snapshot
    it holds (and once at the end)."""
    try:
        header, entries = read_capture(a.target)
    except (OSError, ValueError) as e:
        raise WatchError(str(e)) from None
    state = WatchState(url=header.get("url"), model=header.get("model"))
    sources = {s["rank"]: Source(s["rank"], s["endpoint"], None, s.get("topic", ""))
               for s in header.get("sources", [])}
    sub = Subscriber(list(sources.values()), state.forest, None, _report)
    for e in entries:
        if "metrics" in e:
            state.metrics, state.engine = e["metrics"], e["metrics"].get("engine") or state.engine
            emit(state)
            continue
        src = sources.setdefault(e["rank"], Source(e["rank"], "", None))
        sub.expected.setdefault(src.rank, None)
        sub.handle(src, e["frames"], e.get("replayed", False))
    emit(state)
    return state


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kda-ref watch", description="Follow a kda-ref, vLLM or SGLang server's "
                                "prefix cache (its KV events) and metrics, or replay a capture.")
    p.add_argument("target", help="the server's URL (http://HOST:PORT) or a capture made with --record")
    p.add_argument("--kv-events", default=None, metavar="ENDPOINT", help="subscribe here instead of asking the "
                   "server (tcp://HOST:PORT or ipc://PATH)")
    p.add_argument("--replay", default=None, metavar="ENDPOINT", help="with --kv-events: its replay endpoint")
    p.add_argument("--topic", default="", help="with --kv-events: the topic to subscribe to (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object a line instead of the table")
    p.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two snapshots (default 1)")
    p.add_argument("--record", default=None, metavar="FILE", help="save every frame as it arrives (and the "
                   "metrics), for `kda-ref watch FILE`")
    p.add_argument("--api-key", default=None, help="the server's API key, for its guarded paths")
    return p


def main(argv: list[str] | None = None) -> int:
    """``kda-ref watch``: exit 0 at the end (``--seconds``, Ctrl-C, a capture's end), 2 for a usage error."""
    from .view import open_view, table_lines

    p = build_parser()
    a = p.parse_args(argv)
    if a.interval <= 0 or (a.seconds is not None and a.seconds < 0):
        p.error("--interval must be > 0 and --seconds >= 0")
    for flag, value in (("--kv-events", a.kv_events), ("--replay", a.replay)):
        if value is not None and not value.startswith(("tcp://", "ipc://", "inproc://")):
            p.error(f"{flag}: must be a ZMQ address tcp://HOST:PORT or ipc://PATH, got {value!r}")
    live = a.target.startswith(("http://", "https://"))
    view = open_view(a.json)
    notes: list[str] = []
    in_place = view is not None and getattr(view, "in_place", False)
    report = (lambda line: notes.append(line)) if in_place else _report  # stderr would scribble on the table

    def emit(state: WatchState) -> None:
        obj = state.line()
        if view is None:
            print(json.dumps(obj, separators=(",", ":")), flush=True)
        else:
            view.draw(table_lines(obj, state.url or a.target) + ([""] + notes[-5:] if notes else []))

    try:
        if live:
            watch_server(a, emit, report)
        else:
            watch_capture(a, emit)
    except WatchError as e:
        p.error(str(e))
    except KeyboardInterrupt:
        pass
    finally:
        if view is not None:
            view.close()
    return 0
