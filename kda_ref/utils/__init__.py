"""Small helpers shared across the package: integer arithmetic here, process-level tuning in
:mod:`.malloc`, worker processes (a free port, stopping a process for sure) in :mod:`.procs`, files
that users name (regular files only, reads bounded) in :mod:`.files`."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints (pages for ``a`` tokens at ``b`` tokens a page)."""
    return -(-a // b)


def stop_signals() -> tuple:
    """The signals that stop ``kda-ref serve`` gracefully: SIGTERM, SIGINT (Ctrl-C) and SIGHUP (the terminal
    hung up: a closed ssh session), each treated as SIGTERM -- drain, then exit 0."""
    import signal

    return tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))


def interrupt_on_stop_signals() -> None:
    """Make SIGTERM and SIGHUP act as Ctrl-C does (a ``KeyboardInterrupt`` in the main thread) until something
    installs its own handlers. ``kda-ref serve`` calls it first, so a signal while it imports and loads stops it
    (one line, exit 0) instead of being lost or ending it with a traceback; the server then installs its own."""
    import signal

    def interrupt(sig, frame):
        raise KeyboardInterrupt(f"signal {sig}")

    for sig in stop_signals():
        signal.signal(sig, interrupt)


class deferred_stop_signals:
    """``with deferred_stop_signals():`` the stop signals (:func:`stop_signals`) wait (blocked, not lost)
    until the block ends, and arrive at its end. Around heavy imports: a ``KeyboardInterrupt`` raised inside an extension's own
    ``exec`` (pybind11 runs Python that way) marks the interpreter, which then kills itself with SIGINT at
    exit even when the interrupt was caught (CPython 3.11's ``_Py_UnhandledKeyboardInterrupt``)."""

    def __enter__(self):
        import signal

        self._signals = set(stop_signals())
        self._old = signal.pthread_sigmask(signal.SIG_BLOCK, self._signals)
        return self

    def __exit__(self, *exc):
        import signal

        signal.pthread_sigmask(signal.SIG_SETMASK, self._old)
        return False


STOPPED_WHILE_STARTING = "kda-ref serve: stopped by a signal while starting, before serving"


def machine_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (``None`` where the platform does not say)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the platform has one)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def server_threads(cores: int | None = None) -> int:
    """torch intra-op threads for a server's engine: every core but one, which the HTTP event loop keeps
    (measured 2026-12-04 on 2 cores, one 64-token request on an idle server: 2 threads 0.64 s, 1 thread
    0.22 s, offline ``generate`` 0.19 s -- a second torch thread fights the event loop for the last core);
    at most 16, where a small model's ops stop gaining from more."""
    cores = available_cores() if cores is None else cores
    return max(1, min(16, cores - 1))


__all__ = ["available_cores", "cdiv", "machine_memory_bytes", "server_threads"]
