"""The Live page's reader of a ``kda-ref serve``: it reads from a thread of its own, so drawing never holds
reading up.

:class:`LiveReader` polls every ``interval`` seconds: the step summaries (``/kda/trace/summary``) and the
detailed records (``/kda/trace``) into a :class:`~model_viz.scenarios.live.LiveWindow` of the newest 256;
steps the server's detail ring dropped first are counted in ``window.missed``.

Design notes: ``docs/visualizer.md#the-live-page``.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

from .live import MAX_RESPONSE_BYTES, LiveError, LiveWindow, _error_text, check_url, fetch_pages

MAX_SUMMARIES = 65_536  # summaries the page keeps (the server's ring)
IDLE_S = 120.0  # the thread stops when the page has not looked for this long (its browser tab is gone)
SUMMARY_PAGES = 16  # /kda/trace/summary answers per poll at most (4,096 steps each)


class LiveReader:
    """Reads ``url`` every ``interval`` seconds until :meth:`close` (module docstring); the page draws from
    :meth:`snapshot`. ``error`` is the last read's :class:`LiveError` (None once a read succeeds)."""

    def __init__(self, url: str, api_key: str | None = None, interval: float = 0.25, start: bool = True):
        self.url, self.key, self.interval = check_url(url), api_key or None, interval
        self.window = LiveWindow()
        self.summaries: list[dict] = []
        self.lost_summaries = 0  # steps whose summary left the server's ring before it was read
        self.summarised = 0  # steps summarised since the page connected
        self.detailed = 0  # of them, steps whose detailed record the page read
        self.error: LiveError | None = None
        self.reads = 0
        self._looked = time.monotonic()  # the page's last look (touch): the thread stops after IDLE_S without one
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread: threading.Thread | None = None  # the reading thread; None while none reads
        self._started = threading.Lock()  # the thread's start and its decision to stop, one at a time
        self._used = start  # read from a thread (start): a look after an idle stop starts it again
        if start:
            self.start()

    @property
    def reading(self) -> bool:
        """Whether a thread reads the server now."""
        return self._thread is not None

    def start(self) -> "LiveReader":
        """Read from a thread from now on (the page's first read is its own: :func:`watch.connect`); a thread
        that stopped after :data:`IDLE_S` unwatched is replaced (:meth:`touch` calls this)."""
        self._used = True
        with self._started:
            if not self._stop.is_set() and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kda-live-reader", daemon=True)
                self._thread.start()
        return self

    def touch(self) -> None:
        """The page looks: it is there (every drawing tick calls this, and :meth:`snapshot`), so the thread
        reads on, or starts again after it stopped unwatched -- a page paused past :data:`IDLE_S`, a tab that
        came back, or a server idle that long while the page waited for its next step."""
        self._looked = time.monotonic()
        if self._used:
            self.start()

    def _run(self) -> None:
        while True:
            with self._started:  # decided under the lock: a touch() now either sees this thread or starts one
                if self._stop.is_set() or time.monotonic() - self._looked >= IDLE_S:
                    self._thread = None
                    return
            self.read()
            self._stop.wait(self.interval)

    def read(self) -> int:
        """One read of the server (summaries, then detailed records); returns the new steps' count."""
        try:
            briefs = self._summaries_after(self.summaries[-1]["step"] if self.summaries else -1)
            doc = fetch_pages(self.url, self.window.last_step, self.key)
        except LiveError as err:
            self.error = err
            return 0
        with self._lock:
            self._add_summaries(briefs)
            n = self.window.add(doc)
            self.detailed += n
            self.error, self.reads = None, self.reads + 1
        return n

    @property
    def skipped(self) -> int:
        """Steps summarised since the page connected whose detailed record left the server's ring before the
        page read it: the server stepped faster than the page reads (the batch, pool and cache views skip
        them; the queue and request tabs do not)."""
        return max(0, self.summarised - self.detailed)

    def _summaries_after(self, step: int) -> dict:
        out: dict = {"summaries": []}
        for _ in range(SUMMARY_PAGES):
            doc = self._get(f"/kda/trace/summary?since={step}")
            out = {**doc, "summaries": out["summaries"] + doc.get("summaries", [])}
            if not doc.get("summaries") or doc["summaries"][-1]["step"] == doc.get("last_step"):
                break
            step = doc["summaries"][-1]["step"]
        return out

    def _get(self, path: str) -> dict:
        req = urllib.request.Request(self.url + path)
        if self.key:
            req.add_header("Authorization", f"Bearer {self.key}")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read(MAX_RESPONSE_BYTES))
        except urllib.error.HTTPError as e:
            raise LiveError("live.err.http", status=e.code, msg=_error_text(e)) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise LiveError("live.err.unreachable", url=self.url[:80], msg=str(getattr(e, "reason", e))[:120]) \
                from None

    def _add_summaries(self, doc: dict) -> None:
        new = [s for s in doc.get("summaries", []) if isinstance(s, dict) and isinstance(s.get("step"), int)]
        if self.summaries and new and new[0]["step"] < self.summaries[-1]["step"]:  # the server restarted
            self.summaries, self.lost_summaries = [], 0
        last = self.summaries[-1]["step"] if self.summaries else None
        first = doc.get("first_step")
        if last is not None and isinstance(first, int) and first > last + 1:
            self.lost_summaries += first - last - 1
        self.summarised += len(new)
        self.summaries = (self.summaries + new)[-MAX_SUMMARIES:]

    def snapshot(self) -> tuple[LiveWindow, list[dict]]:
        """A copy of the window and of the summaries, consistent with each other, for one run of the page (a look:
        :meth:`touch`)."""
        self.touch()
        with self._lock:
            w = LiveWindow(self.window.max_steps, dict(self.window.header), list(self.window.records),
                           self.window.missed, self.window.restarts,
                           {k: dict(v) for k, v in self.window.pool_base.items()})
            return w, list(self.summaries)

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(5)


def queue_series(summaries: list[dict]) -> dict[str, list[int]]:
    """Per summarised step: its step, requests running, requests waiting -- every step, no holes."""
    return {"step": [s["step"] for s in summaries], "running": [s["running"] for s in summaries],
            "waiting": [s["waiting"] for s in summaries]}


def request_table(summaries: list[dict], window: LiveWindow, step: int) -> list[dict]:
    """Each request seen up to ``step``: the ones that ended, from the summaries (complete), and the ones
    still running, from the window's record at ``step``."""
    seen: dict[str, dict] = {}
    for s in summaries:
        if s["step"] > step:
            break
        for rid, info in s.get("ended", {}).items():
            seen[rid] = {**info, "done": True}
    for rid, info in window.state_at(step).get("requests", {}).items():
        seen.setdefault(rid, info)
    return [{"req_id": int(k), **v} for k, v in sorted(seen.items(), key=lambda kv: int(kv[0]))]
