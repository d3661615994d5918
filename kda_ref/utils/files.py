"""Opening a file that a user named (a checkpoint folder's files) without trusting the path.

A path may name something that is not a file of bytes: ``open()`` on a FIFO blocks until a writer
comes (forever, if none does), and a symlink to ``/dev/zero`` or ``/dev/urandom`` reads without end;
for all of these ``st_size`` is 0, so a size check alone lets them through. The helpers here accept
regular files only and bound what they read:

* :func:`require_regular` checks ``stat.S_ISREG`` on the resolved path;
* :func:`open_regular` checks it *before* opening, opens with ``O_NONBLOCK`` (a FIFO put there after
  the check opens at once instead of blocking) and checks the open descriptor again, so what is read
  is a regular file;
* :func:`read_regular` reads at most ``limit + 1`` bytes of it and refuses it if more came.

Each takes the caller's error type (``ConfigError``...) and its messages start with ``path:``.
Operating-system errors (no such file, no permission) propagate as :class:`OSError`, for the caller
to word. (:mod:`kda_ref.workloads` depends on nothing of ``kda_ref`` and carries its own opener.)
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _need_regular(mode: int, path, error: type[Exception]) -> None:
    """Raise ``error`` naming ``path`` and what it is unless ``mode`` is a regular file's."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")
    target = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
    raise error(f"path: {os.fspath(path)}{target} is {kind}, not a regular file")


def require_regular(path, error: type[Exception]) -> None:
    """Raise ``error`` unless ``path`` names a regular file (symlinks followed). For a library that opens
    the file by name itself (safetensors) this is the check that can be made: a FIFO put there between
    the check and the library's open, by someone writing to the folder during the load, still blocks it."""
    try:
        mode = os.stat(path).st_mode
    except ValueError as e:  # a NUL byte in the name
        raise error(f"path: {os.fspath(path)!r} is not a usable file name ({e})") from None
    _need_regular(mode, path, error)


def open_regular(path, error: type[Exception]) -> BinaryIO:
    """Open ``path`` for binary reading if it is a regular file (symlinks followed), else raise
    ``error``. Never blocks: checked before opening, opened non-blocking, checked again once open."""
    require_regular(path, error)
    fd = os.open(path, _OPEN_FLAGS)
    try:
        _need_regular(os.fstat(fd).st_mode, path, error)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, limit: int, error: type[Exception], what: str) -> bytes:
    """The bytes of the regular file ``path``, refused with ``error`` past ``limit`` bytes (``what``
    names the file in the message: "a config.json"). Reads at most ``limit + 1`` bytes, whatever the
    file's size claims."""
    with open_regular(path, error) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise error(f"path: {os.fspath(path)} is larger than {limit:,} bytes, the most {what} may hold")
    return data

