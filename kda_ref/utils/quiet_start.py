"""Imported first by a worker forkserver (:data:`kda_ref.utils.procs.WORKER_PRELOAD`): a forkserver launched
quietly -- with SIGINT and SIGHUP blocked, as :func:`kda_ref.utils.procs.quiet_forkserver` launches it --
ignores them from here on, before its seconds of preload (torch) begin, and unblocks them; the forkserver
hands the ignored disposition on to every worker it forks. A forkserver launched any other way is left as it
was. The parent only blocks (it never ignores), so a signal that reaches it during the launch waits and is
handled there once the launch is over, instead of being lost."""

import signal

_QUIET = [sig for sig in (signal.SIGINT, getattr(signal, "SIGHUP", None)) if sig is not None]

if hasattr(signal, "pthread_sigmask") and set(_QUIET) <= signal.pthread_sigmask(signal.SIG_BLOCK, []):
    for _sig in _QUIET:
        signal.signal(_sig, signal.SIG_IGN)  # discards what a terminal sent the group meanwhile
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _QUIET)
