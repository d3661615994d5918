"""The Live page on a server that keeps no ``/kda/trace``: vLLM, SGLang, or ``kda-ref serve --trace-steps 0``.

Such a server publishes two things a visualizer can use (:mod:`kda_ref.kv_events`): its prefix cache as KV
events (ZMQ) and its counters as Prometheus ``/metrics``. :class:`ServerWatch` follows both from a thread of
its own -- the same subscriber, forest and metrics reader as ``kda-ref watch`` -- and keeps a series of
metrics snapshots; :meth:`ServerWatch.view` gives the page one consistent copy as plain data: each group's
blocks laid out on one token axis (:func:`layout`), the series, what went wrong. What these servers do not
publish -- the batch of each step, the memory pool's layout -- the page says in words.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

from kda_ref.kv_events.forest import Forest
from kda_ref.kv_events.metrics import snapshot
from kda_ref.kv_events.subscriber import Subscriber
from kda_ref.kv_events.watch import model_of, sources_of
from .live import check_url

MAX_POINTS = 600  # metrics snapshots kept (10 minutes at one a second)
IDLE_S = 120.0  # the watcher stops when the page has not looked for this long (its browser tab is gone)
MAX_BLOCKS_DRAWN = 400  # blocks a forest figure draws at most (the oldest roots first)
STATE_KINDS = ("mamba",)  # a group of these kinds holds recurrent states, not KV


def layout(groups: dict) -> tuple[dict, list]:
    """One token axis for every group of a rank: ``({hash: (start, end, row)}, rows)``. The backbone is the
    KV blocks (every group whose kind is not a state kind): each block starts where its parent ends; a
    block whose parent is not among them (a state block beside the KV chain, or a root) starts at 0 or
    after its parent wherever that was placed. Rows are the backbone's paths, depth first."""
    blocks = {h: n for g in groups.values() for h, n in g["blocks"].items()}
    children: dict = {}
    for h, (parent, _) in blocks.items():
        children.setdefault(parent, []).append(h)
    pos, rows, row = {}, [], 0
    stack = [(h, 0) for h in sorted(h for h, (p, _) in blocks.items() if p not in blocks)][::-1]
    while stack and len(pos) < MAX_BLOCKS_DRAWN:
        h, start = stack.pop()
        end = start + len(blocks[h][1])
        kids = children.get(h, [])
        pos[h] = (start, end, row)
        if not kids:
            rows.append(row)
            row += 1
        stack.extend((k, end) for k in sorted(kids)[::-1])
    return pos, rows


class ServerWatch:
    """Follows one server (module docstring) until :meth:`close`. ``sources`` may be given (a test, or
    ``--kv-events`` by hand); otherwise the server is asked which publishers it has."""

    def __init__(self, url: str, api_key: str | None = None, interval: float = 1.0, sources=None):
        self.url, self.key, self.interval = check_url(url), api_key or None, interval
        self.notes: list[str] = []
        self.sources = sources if sources is not None else sources_of(self.url, self.key, self._note)
        self.model = model_of(self.url, self.key)
        self.forest = Forest()
        self.metrics: dict = {}
        self.series: dict[str, list] = {k: [] for k in ("t", "running", "waiting", "kv_usage", "hit_rate")}
        self._texts: dict = {}
        self._looked = time.monotonic()  # the page's last view() (the thread stops after IDLE_S without one)
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._sub = Subscriber(self.sources, self.forest, report=self._note).connect()
        self._thread = threading.Thread(target=self._run, name="kda-live-watch", daemon=True)
        self._thread.start()

    def _note(self, line: str) -> None:
        self.notes = (self.notes + [line])[-20:]

    def _run(self) -> None:
        next_scrape = 0.0
        while not self._stop.is_set() and time.monotonic() - self._looked < IDLE_S:
            with self._lock:
                self._sub.pump(0.05)
            if time.monotonic() >= next_scrape:
                next_scrape = time.monotonic() + self.interval
                self._scrape()
            time.sleep(0.01)

    def _scrape(self) -> None:
        req = urllib.request.Request(self.url + "/metrics")
        if self.key:
            req.add_header("Authorization", f"Bearer {self.key}")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                m = snapshot(r.read(16 << 20).decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError, ValueError) as e:
            self._note(f"{self.url}/metrics: {str(getattr(e, 'reason', e))[:120]}")
            return
        pc = m.get("prefix_cache") or {}
        q, h = pc.get("queries"), pc.get("hits")
        with self._lock:
            self.metrics = m
            for key, value in (("t", time.time()), ("running", m.get("running")), ("waiting", m.get("waiting")),
                               ("kv_usage", m.get("kv_usage")), ("hit_rate", h / q if q and h is not None else None)):
                self.series[key] = (self.series[key] + [value])[-MAX_POINTS:]

    def view(self, rank: int = 0) -> dict:
        """One consistent copy of what the page draws (module docstring)."""
        self._looked = time.monotonic()
        with self._lock:
            groups = {gi: {"kind": g.kind, "block_size": g.block_size,
                           "blocks": {h: (n.parent, n.tokens) for h, n in g.blocks.items()}}
                      for (r, gi), g in self.forest.groups.items() if r == rank}
            c = self.forest.counts
            out = {"engine": self.metrics.get("engine"), "model": self.model, "metrics": dict(self.metrics),
                   "series": {k: list(v) for k, v in self.series.items()}, "groups": groups,
                   "events": {"batches": c.batches, "stored": c.stored, "removed": c.removed, "cleared": c.cleared,
                              "replayed": c.replayed, "lost": c.lost},
                   "sources": [s.__dict__ for s in self.sources], "notes": list(self.notes)}
        out["layout"], out["rows"] = layout(groups)
        return out

    def token_text(self, tokens) -> str:
        """A block's tokens as text, by the server's ``/detokenize`` (vLLM's and kda-ref's); their ids when the
        server has none. Remembered per block."""
        key = tuple(tokens)
        if key not in self._texts:
            self._texts[key] = self._detokenize(list(key))
        return self._texts[key]

    def _detokenize(self, ids: list[int]) -> str:
        body = json.dumps({"tokens": ids, **({"model": self.model} if self.model else {})}).encode()
        req = urllib.request.Request(self.url + "/detokenize", data=body, headers={"Content-Type": "application/json"})
        if self.key:
            req.add_header("Authorization", f"Bearer {self.key}")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return str(json.loads(r.read(1 << 20)).get("prompt", ids))
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            return " ".join(str(i) for i in ids)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sub.close()


def connect(url: str, api_key: str | None = None):
    """What the Live page attaches to at ``url``: ``("trace", LiveReader)`` for a ``kda-ref serve`` that keeps
    a live trace (the step-by-step views, read from a thread: :mod:`.live_reader`), ``("watch",
    ServerWatch)`` for any server without one (404 at ``/kda/trace``, or an answer that is not a trace: vLLM,
    SGLang); other errors are raised."""
    from .live_reader import LiveReader

    reader = LiveReader(url, api_key, start=False)
    reader.read()
    err = reader.error
    if err is None:
        return "trace", reader.start()
    if not (err.key == "live.err.not_kda" or (err.key == "live.err.http" and err.fmt.get("status") == 404)):
        raise err
    return "watch", ServerWatch(url, api_key)
