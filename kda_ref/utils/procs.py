"""Worker processes: how they start, a free local port for a process group's rendezvous, stopping a
process for sure, and what of an engine's tokenizer can cross to another process (context parallelism's
ranks, disaggregation's workers, ``kda-ref serve``'s engine process)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import socket
import threading

# what a CPU worker needs imported: a forkserver imports it once, and every worker forks from there (first:
# the module that makes a quietly launched forkserver ignore a terminal's Ctrl-C, before torch's import)
WORKER_PRELOAD = ["kda_ref.utils.quiet_start", "torch", "torch.distributed", "kda_ref.context_parallel.launch", "kda_ref.disagg.dist"]


def worker_context(backend: str):
    """The ``multiprocessing`` context workers of ``backend`` start from.

    ``"gloo"`` (CPU): a **forkserver** that has imported torch and the engine once (:data:`WORKER_PRELOAD`);
    each worker is forked from it, so it starts in tens of milliseconds instead of importing torch again
    (1.5-3 s a worker on a 2-core machine -- per context-parallel prefill, per rank). The server is a
    clean process (no threads, no CUDA), so forking from it is safe whatever the parent runs.
    ``"nccl"``: ``spawn``, the start method CUDA documents (each worker initialises its own GPU).
    Where the platform has no forkserver (Windows, macOS before 3.14 defaults aside): ``spawn``."""
    if backend == "nccl" or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_PRELOAD)  # read when the server starts (the first worker); later calls are no-ops
    return ctx


def _in_parent_env(env: dict, target, args: tuple) -> None:
    os.environ.clear()
    os.environ.update(env)
    target(*args)


def worker_process(ctx, target, args: tuple, **kw):
    """``ctx.Process`` running ``target(*args)`` under the parent's environment as it is now: a
    forkserver's child would otherwise see the server's environment, from when the server started
    (``NCCL_*`` / ``GLOO_*`` settings, or a test's fault switch, set later would be lost)."""
    return ctx.Process(target=_in_parent_env, args=(dict(os.environ), target, args), **kw)


@contextlib.contextmanager
def terminal_signals_held():
    """A terminal's SIGINT and SIGHUP held back inside the block and raised when it ends (the first one, to the
    handler that was there); a no-op off the main thread, where Python cannot set handlers. Workers start
    inside it: a Ctrl-C in the middle of a start left a worker half started that the caller's cleanup did not
    know of, which then printed a traceback reading arguments its exited parent had freed. (A handler, not a
    signal mask: Python runs its handlers on the main thread whichever thread the kernel delivered to.)"""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    sigs = [sig for sig in (signal.SIGINT, getattr(signal, "SIGHUP", None)) if sig is not None]
    old = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in old.items():  # None: a handler set outside Python, which cannot be put back
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])


def quiet_forkserver(ctx) -> None:
    """Launch ``ctx``'s forkserver now (if it is one and none runs yet) so that it and every worker it forks
    ignore SIGINT and SIGHUP: a terminal's Ctrl-C or hang-up reaches the whole process group, the server's
    process owns the shutdown, and a forkserver still importing torch printed a ``KeyboardInterrupt`` traceback.

    The signals are *blocked* during the launch, never ignored (ignoring lost a signal sent during the launch's
    few milliseconds, ~1.3 s into ``kda-ref serve``'s start); the mask survives ``fork`` and ``exec``, the forkserver's
    first preload (:mod:`kda_ref.utils.quiet_start`) turns it into an ignored disposition, and a signal sent meanwhile
    reaches this process's handler when the launch ends (a lost one let the server start and run on). The
    resource tracker starts first, outside the block (its launch unblocks SIGINT when it ends). Main thread only (a
    thread's mask is its own; a handler runs on the main thread). ``kda-ref serve`` calls it before starting :class:`~kda_ref.server.core_client.EngineCoreClient`, a context-parallel prefill before its ranks, disaggregation before its workers."""
    from multiprocessing import forkserver, resource_tracker

    if ctx.get_start_method() != "forkserver" or threading.current_thread() is not threading.main_thread():
        return
    import signal

    resource_tracker.ensure_running()
    quiet = [sig for sig in (signal.SIGINT, getattr(signal, "SIGHUP", None)) if sig is not None]
    old = signal.pthread_sigmask(signal.SIG_BLOCK, quiet)
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def exit_with_parent(code: int = 1) -> None:
    """Exit this worker process as soon as the process that started it is gone, however it went (a SIGKILL runs
    none of its cleanup): a daemon thread waits on ``multiprocessing``'s parent sentinel, which under a
    forkserver too is a pipe from the real parent (``os.getppid()`` would name the forkserver). A
    context-parallel rank (:mod:`kda_ref.context_parallel.launch`) and a disaggregation worker
    (:mod:`kda_ref.disagg.dist`) call it first; without it a killed parent left them running for good (a rank
    blocked flushing a result nobody reads, a worker serving nobody)."""
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(code)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (``MASTER_PORT`` of a process group)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc, grace: float = 5.0) -> None:
    """Join ``proc`` (a ``multiprocessing.Process``) for up to ``grace`` seconds, then terminate it,
    then kill it: it is gone when this returns. One never started is left as it is."""
    if proc.pid is None:
        return
    proc.join(timeout=grace)
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout=5.0)
    if proc.is_alive():
        proc.kill()
        proc.join()


def kill_process(proc) -> None:
    """SIGKILL ``proc`` and reap it: for a worker already judged dead or hung, which a SIGTERM may not move (a
    stopped process keeps it pending; :func:`stop_process` would wait 5 s on it). One never started is left."""
    if proc.pid is None:
        return
    proc.kill()
    proc.join()


def sendable_tokenizer(tokenizer, note: str | None, sender: str, hint: str = "") -> tuple[object | None, str | None]:
    """``(tokenizer, note)`` as another process can receive them: unchanged when the tokenizer pickles, else
    ``None`` with a note naming ``sender`` and why (``hint`` appended). The engine process of ``kda-ref serve``
    (:func:`kda_ref.server.engine_core.front_of`) and disaggregation's workers (:mod:`kda_ref.disagg.dist`)
    tell their parent the engine's tokenizer this way."""
    import pickle

    try:
        pickle.dumps(tokenizer)
    except Exception as err:  # noqa: BLE001 -- any pickling failure: the receiver gets a reason instead
        return None, (f"{sender} {type(tokenizer).__name__} cannot be sent to this process "
                      f"({type(err).__name__}){hint}")
    return tokenizer, note


class Inbox:
    """Messages from several ``multiprocessing`` queues, each pumped by a thread of its own into one
    in-process queue. A writer killed in the middle of a message leaves a message that never completes:
    only that queue's thread blocks on it, never the reader of the others -- who then sees the writer's
    death and its own timeout. Disaggregation's parent and decode workers read their peers through it
    (:mod:`kda_ref.disagg.dist`), as a context-parallel prefill reads its ranks
    (:mod:`kda_ref.context_parallel.launch`): one queue per writer."""

    def __init__(self, queues: dict):
        self._q: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        for key, q in queues.items():
            threading.Thread(target=self._pump, args=(key, q), daemon=True, name=f"inbox-{key}").start()

    def _pump(self, key, q) -> None:
        while not self._stop.is_set():
            try:
                msg = q.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError, ValueError):  # the queue was closed
                return
            self._q.put((key, msg))

    def get(self, timeout: float):
        """``(key, message)``, waiting up to ``timeout`` seconds; ``queue.Empty`` if none came."""
        return self._q.get(timeout=timeout)

    def drain(self, wait: float) -> list:
        """Every message there now, waiting up to ``wait`` seconds for the first."""
        out = []
        try:
            out.append(self._q.get(timeout=wait))
            while True:
                out.append(self._q.get_nowait())
        except queue.Empty:
            return out

    def close(self) -> None:
        self._stop.set()
