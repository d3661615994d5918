"""Worker processes: a free local port for a process group's rendezvous, and stopping a process for
sure (context parallelism's ranks, disaggregation's workers)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (``MASTER_PORT`` of a process group)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc, grace: float = 5.0) -> None:
    """Join ``proc`` (a ``multiprocessing.Process``) for up to ``grace`` seconds, then terminate it,
    then kill it: it is gone when this returns."""
    proc.join(timeout=grace)
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout=5.0)
    if proc.is_alive():
        proc.kill()
        proc.join()
