"""Output files of the command line, claimed before the work that fills them.

:func:`claim_output` opens (or creates) the file at once and turns every OS error into an :class:`OutputError`
naming the flag (``error: --trace: ...``), so a bad ``--out`` (a missing folder, ``/dev/full``, ``/proc/x``) stops the command in its
first second, not after minutes of work. :meth:`OutputFile.open` writes it at the end, whole or not at all (a file beside it, flushed,
then renamed over it); a claimed file the work never wrote is removed if the claim created it.
:func:`claim_output_dir` does the same for a folder (``train --out``). Torch-free: the CLI calls it while parsing.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from pathlib import Path

from .files import replaced_whole


class OutputError(ValueError):
    """An output path that cannot be written (names the flag)."""


def _why(err: OSError) -> str:
    return err.strerror or type(err).__name__


class OutputFile:
    """A file claimed by :func:`claim_output`: use ``with out.open() as f`` to write it (an OS error
    while writing is an :class:`OutputError` naming the flag), or :meth:`release` to drop the claim."""

    def __init__(self, path: Path, flag: str, created: bool):
        self.path, self.flag, self.created = path, flag, created
        self.written = False

    @contextlib.contextmanager
    def open(self, mode: str = "w", **kw):
        """``with out.open() as f:`` the file to write (text, or bytes with ``"b"`` in ``mode``; ``kw`` for the
        text wrapper: ``encoding``, ``newline``), written whole or not at all
        (:func:`~kda_ref.utils.files.replaced_whole`); an OS error is an :class:`OutputError` naming the flag."""
        try:
            with replaced_whole(self.path, OutputError) as raw:
                with raw if "b" in mode else io.TextIOWrapper(raw, **kw) as f:
                    yield f
            self.written = True
        except OSError as e:
            raise OutputError(f"{self.flag}: cannot write {self.path} ({_why(e)})") from None

    def write_text(self, text: str) -> None:
        with self.open(encoding="utf-8") as f:
            f.write(text)

    def release(self) -> None:
        """Remove the file if the claim created it and nothing was written (the work failed)."""
        if self.created and not self.written:
            try:
                if self.path.stat().st_size == 0:
                    self.path.unlink()
            except OSError:
                pass


def claim_output(path: str | os.PathLike | None, flag: str) -> OutputFile | None:
    """Open (or create) ``path`` for writing now, before any work; ``None`` passes through (the flag
    was not given). Refuses a folder, a device or other non-regular file, a missing folder, a
    read-only place, an over-long name -- each an :class:`OutputError` naming ``flag``."""
    if path is None:
        return None
    p = Path(path)
    if str(path) == "":
        raise OutputError(f"{flag}: empty path")
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as e:  # ENAMETOOLONG, ELOOP, EACCES on the way
        raise OutputError(f"{flag}: cannot use {str(path)[:120]} ({_why(e)})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{flag}: {path} is a folder")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{flag}: {path} is not a regular file (a device, pipe or socket)")
    if st is None and not p.parent.is_dir():
        raise OutputError(f"{flag}: the folder {p.parent} does not exist")
    try:
        with open(p, "a"):
            pass
        _probe_folder(Path(os.path.realpath(p)).parent)  # the final write renames a file made beside it
    except OSError as e:
        raise OutputError(f"{flag}: cannot write {str(path)[:120]} ({_why(e)})") from None
    return OutputFile(p, flag, created=st is None)


def _probe_folder(folder: Path) -> None:
    """Check that a file can be created in ``folder`` (``OSError`` if not): a new file of its own name made
    and removed, so nothing already there -- a file or a FIFO someone left -- is opened or deleted."""
    fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
    os.close(fd)
    os.unlink(probe)


def claim_output_dir(path: str | os.PathLike, flag: str) -> Path:
    """Create (or reuse) the folder ``path`` now and check that a file can be written in it."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{flag}: {path} exists and is not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
        _probe_folder(p)
    except OSError as e:
        raise OutputError(f"{flag}: cannot write in {str(path)[:120]} ({_why(e)})") from None
    return p
