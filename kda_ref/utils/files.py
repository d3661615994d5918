"""Opening a file that a user named (a checkpoint folder's files, a workload, a trace, a recipe) without
trusting the path.

Regular files only, read within a bound: :func:`require_regular`, :func:`open_regular`, :func:`read_regular`,
:func:`fd_path` (a checked file's ``/dev/fd/N`` name, for safetensors), and for writing :func:`refuse_non_regular`,
:func:`create_regular`, :func:`replaced_whole`. Each takes the caller's error type (``ConfigError``,
``WorkloadError``...), its messages start with ``path:``; operating-system errors (no such file, no permission)
propagate as :class:`OSError`, for the caller to word.
Design notes: ``docs/workloads.md#files-that-are-not-files``
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import BinaryIO, Iterator

_COMMON_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_OPEN_FLAGS = os.O_RDONLY | _COMMON_FLAGS
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | _COMMON_FLAGS  # no O_TRUNC: truncated once checked regular
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _need_regular(mode: int, path, error: type[Exception]) -> None:
    """Raise ``error`` naming ``path`` and what it is unless ``mode`` is a regular file's."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")
    target = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
    raise error(f"path: {os.fspath(path)}{target} is {kind}, not a regular file")


def _stat(path, error: type[Exception]) -> os.stat_result:
    """``os.stat(path)``, a name the OS cannot take (a NUL byte in it) being ``error`` naming ``path``."""
    try:
        return os.stat(path)
    except ValueError as e:  # a NUL byte in the name
        raise error(f"path: {os.fspath(path)!r} is not a usable file name ({e})") from None


def require_regular(path, error: type[Exception]) -> None:
    """Raise ``error`` unless ``path`` names a regular file (symlinks followed). Only a check: a FIFO
    put there between it and an open by name still blocks that open. To read, use :func:`open_regular`
    (and :func:`fd_path` for a library that opens files by name)."""
    _need_regular(_stat(path, error).st_mode, path, error)


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


def fd_path(f, fallback) -> str:
    """A name that opens the very file ``f`` (an open file object) holds: ``/dev/fd/N``, checked to
    lead to ``f``'s file. For a library that takes only a file name (safetensors): after
    :func:`open_regular`, it then reads the regular file that was checked, even if the folder's entry
    has since been replaced by a FIFO (which would block its open). Where the system offers no such
    name (no ``/dev/fd``), ``fallback`` (the name that was checked; the race is then left open)."""
    name = f"/dev/fd/{f.fileno()}"
    try:
        st, own = os.stat(name), os.fstat(f.fileno())
    except OSError:
        return os.fspath(fallback)
    return name if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino) else os.fspath(fallback)


def refuse_non_regular(path, error: type[Exception]) -> None:
    """Raise ``error`` naming ``path`` if it exists and is not a regular file (symlinks followed): the
    check before writing to a name. Enough alone for a writer that writes a temporary file and renames
    it over ``path`` (safetensors' ``save_file``), which never opens the target; anything that opens
    ``path`` itself should use :func:`create_regular`."""
    try:
        mode = _stat(path, error).st_mode
    except FileNotFoundError:
        return
    _need_regular(mode, path, error)


def create_regular(path, error: type[Exception]) -> BinaryIO:
    """Open ``path`` for binary writing, created or truncated, if it is a regular file or does not exist
    (symlinks followed); anything else (a FIFO, a device, a folder) is ``error`` naming ``path``, before
    a byte is written. Never blocks: checked before opening, opened non-blocking (a FIFO without a
    reader then fails at once, one with a reader opens), checked again once open, and truncated only
    then. (``O_NONBLOCK`` stays set on the descriptor; it changes nothing for a regular file.)"""
    refuse_non_regular(path, error)
    try:
        fd = os.open(path, _CREATE_FLAGS, 0o666)
    except OSError as e:
        if e.errno in (errno.ENXIO, errno.EISDIR):  # swapped in since the check: a FIFO with no reader, a folder
            require_regular(path, error)  # names what it is now
            raise error(f"path: {os.fspath(path)} is not a regular file (opening it to write: {e.strerror})") from None
        raise
    try:
        _need_regular(os.fstat(fd).st_mode, path, error)
        os.ftruncate(fd, 0)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def temp_beside(path) -> str:
    """The name of :func:`replaced_whole`'s temporary file for ``path``: in the same folder (a rename never
    crosses file systems), hidden, this process's."""
    folder, name = os.path.split(os.fspath(path))
    return os.path.join(folder or ".", f".{name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def replaced_whole(path, error: type[Exception]) -> Iterator[BinaryIO]:
    """``with replaced_whole(path, error) as f:`` writes ``path`` whole or not at all: into a regular file
    beside it (:func:`create_regular`, so never into a FIFO left there) that takes its name once the block
    ended and it is on disk; removed, ``path`` left as it was, when the block raises (a full disk, a size
    limit, Ctrl-C). ``path`` itself must be a regular file or absent (:func:`refuse_non_regular`); it is
    never opened. A link is followed: its target is what gets replaced, keeping its permission bits. The
    block may close ``f`` (a text or gzip wrapper closes it). The command line's outputs
    (:mod:`kda_ref.utils.outputs`), workload files and training checkpoints are written through it."""
    refuse_non_regular(path, error)
    target = os.path.realpath(path)  # replace what a link points at, not the link
    tmp, made = temp_beside(target), False
    try:
        with create_regular(tmp, error) as f:
            made = True  # a non-regular file already there (refused above) is not ours to remove
            yield f
        fd = os.open(tmp, os.O_RDONLY)  # written and closed: on disk before it takes the name
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(tmp, target)
    finally:
        if made and os.path.lexists(tmp):
            os.unlink(tmp)
