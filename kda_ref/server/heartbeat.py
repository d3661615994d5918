"""The engine process's heartbeat: how the HTTP server's process notices an engine that stopped answering.

Both sides agree on the heartbeat timeout ``T`` (``--engine-heartbeat-timeout``): the engine process beats
every :func:`beat_interval` seconds from its own thread (:class:`Heartbeat`); the server's process
(:class:`~kda_ref.server.core_client.EngineCoreClient`) calls it **unresponsive** after ``T`` seconds of
silence; the engine, finding it missed its own beats for :func:`stall_threshold` seconds, cancels every
request it holds before its next step (:class:`StallGuard`), so a request a client was told failed never
runs. Upstream (SGLang's ``--watchdog-timeout``, vLLM's ``EngineDeadError``) has no such contract.

Design notes: ``docs/serving.md#the-heartbeat``.
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
