"""The engine process's heartbeat: how the HTTP server's process notices an engine that stopped answering.

A crashed engine process is found at once (its pipe ends); a *frozen* one is not: stopped by SIGSTOP, a
long garbage collection, a swap storm, a kernel call that holds the GIL. Its pipe stays open, so without a
deadline ``/health`` kept answering 200, open streams froze silently, ``/metrics`` hung and a new request
waited 60 s for a ``TimeoutError`` -- and then ran, and was counted a success, when the engine resumed.

Both sides of the pipe agree on one number, the heartbeat timeout ``T`` (``--engine-heartbeat-timeout``):

* the engine process sends a beat every :func:`beat_interval` seconds from a thread of its own
  (:class:`Heartbeat`), so an engine busy with a long step still beats (a step releases the GIL);
* the server's process (:class:`~kda_ref.server.core_client.EngineCoreClient`) calls the engine
  **unresponsive** once it heard nothing for ``T`` seconds: ``/health`` answers 503 saying so, new
  requests get a 503 at once, open streams end with an error, ``/metrics`` is answered from the HTTP
  side; the first message heard again makes it responsive again;
* the engine process, when it runs again, finds that it missed its own beats for
  :func:`stall_threshold` seconds (``T`` less two intervals: whenever the server gave up, the engine sees
  at least that gap) and, before its loop takes another request or runs another step, cancels every
  request it holds (:class:`StallGuard`) and answers unrun the submissions the server gave up on while it
  was frozen (:meth:`~kda_ref.server.engine_core.EngineCore.serve` reads every message already queued before
  acting on one). A request a client was told failed is therefore aborted, never run, and counted an abort.

Neither upstream engine has this exact contract. SGLang's ``--watchdog-timeout`` (``server_args.py``,
default 300 s) kills the server when one forward batch takes longer; vLLM's API server finds a dead engine
core (``EngineDeadError``) but waits on a live, silent one. Here a freeze is survivable: the server stays
up and answers honestly, and serving resumes with the engine.
"""

from __future__ import annotations

import threading
import time

HEARTBEAT_TIMEOUT_S = 10.0  # seconds of silence after which the server calls its engine process unresponsive
MAX_BEAT_INTERVAL_S = 0.25


def beat_interval(timeout: float) -> float:
    """Seconds between two beats for heartbeat timeout ``timeout``: at least eight beats fit in it."""
    return min(MAX_BEAT_INTERVAL_S, timeout / 8)


def stall_threshold(timeout: float) -> float:
    """The gap in its own beats past which the engine process treats itself as stalled: ``timeout`` less
    two intervals, so that any silence the server saw as ``timeout`` the engine sees as at least this."""
    return timeout - 2 * beat_interval(timeout)


def check_timeout(timeout) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0.5 <= timeout <= 3600:
        raise ValueError(f"heartbeat_timeout: must be a number of seconds in [0.5, 3600], got {timeout!r}")
    return float(timeout)


class Heartbeat:
    """The engine process's beats (module docstring): ``send()`` every interval from a daemon thread, and the
    largest gap between two beats since the loop last asked (:meth:`stalled`)."""

    def __init__(self, send, timeout: float):
        self._send, self.interval = send, beat_interval(timeout)
        self.threshold = stall_threshold(timeout)
        self._lock = threading.Lock()
        self._last, self._max_gap = time.monotonic(), 0.0
        self._fired = self._last  # when stalled() last found a stall: the gap it saw is not counted again

    def start(self) -> "Heartbeat":
        with self._lock:
            self._last, self._max_gap = time.monotonic(), 0.0
            self._fired = self._last
        threading.Thread(target=self._run, name="kda-core-heartbeat", daemon=True).start()
        return self

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            try:
                self.beat()
            except (OSError, ValueError):  # the pipe closed: the server's process is gone
                return

    def beat(self) -> None:
        """One beat: note the gap since the last one, then send (the thread started by :meth:`start` calls it;
        a test beats by hand to stall it)."""
        now = time.monotonic()
        with self._lock:  # from the last beat, or from the last stall found if later (one freeze, one stall)
            self._max_gap, self._last = max(self._max_gap, now - max(self._last, self._fired)), now
        self._send()

    def stalled(self) -> float | None:
        """The largest gap between beats since the last call, counting the one still open, if it reached the
        stall threshold (else None); the count starts again, and a gap is measured from the last stall found
        at the latest, so one freeze is one stall whether the loop or the heartbeat thread wakes first. The
        loop's thread asks before every turn."""
        now = time.monotonic()
        with self._lock:
            gap, self._max_gap = max(self._max_gap, now - max(self._last, self._fired)), 0.0
            if gap < self.threshold:
                return None
            self._fired = now
        return gap


class StallGuard:
    """A :class:`~kda_ref.server.loop.StepObserver` of the engine process's loop (its three methods; this module
    imports no torch, so the command line can read :data:`HEARTBEAT_TIMEOUT_S`): at the top of every turn,
    before the loop takes new requests or steps, a stall found by :meth:`Heartbeat.stalled` cancels every
    request in ``streams()`` (the engine process's open streams) -- the server has answered them all with an
    error by now."""

    def __init__(self, heartbeat: Heartbeat, streams):
        self.heartbeat, self.streams = heartbeat, streams
        self.stalls: list[float] = []  # the gaps found, in seconds (a test and the log read them)

    def between_steps(self, loop) -> None:
        gap = self.heartbeat.stalled()
        if gap is None:
            return
        self.stalls.append(gap)
        for stream in self.streams():
            stream.cancel("abort")

    def after_step(self, loop, ended, stepped) -> None:
        """Nothing: the guard acts between steps only."""

    def loop_ended(self, loop) -> None:
        """Nothing: the engine process stops its heartbeat itself."""
