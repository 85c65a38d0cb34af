"""Atomic file writes: an output file appears whole, or not at all; and file locks, so that
processes sharing a disk build a cache file once."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ner.utils.errors import NERError


@contextmanager
def atomic_write(path: str | Path, binary: bool = False, durable: bool = False) -> Iterator[IO]:
    """A text (or `binary`) handle on a temporary file in `path`'s own directory, renamed onto
    it only on success, so a crash leaves the old file or the new one, never a torn one.
    `durable`: flushed to disk (file and directory) before the rename, as checkpoints are.

    The temporary file is `.partial-*.tmp`, a name that holds no part of the target's (so
    Lightning's search for `last*` checkpoints never picks up a half-written one)."""
    target = Path(path)
    if not target.parent.is_dir():
        raise NERError("output directory does not exist", path=str(target.parent))
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".partial-", suffix=".tmp")
    except OSError as exc:
        raise _write_error(exc, target) from None
    try:
        mode = {"mode": "wb"} if binary else {"mode": "w", "encoding": "utf-8", "newline": "\n"}
        with os.fdopen(fd, **mode) as out:
            yield out
            if durable:
                out.flush()
                os.fsync(out.fileno())
        # mkstemp makes the file 0600; give it the mode a plain open() would
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, target)
        if durable:
            _fsync_dir(target.parent)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRORS:
            raise _write_error(exc, target) from None
        raise


# what the machine, not the program, gets wrong when writing: a one-line error, not a traceback
WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EFBIG}


def _write_error(exc: OSError, target: Path) -> Exception:
    if exc.errno not in WRITE_ERRORS:
        return exc
    return NERError(f"cannot write ({exc.strerror or exc}); nothing was written", path=str(target))


def _fsync_dir(directory: Path) -> None:
    # the rename itself is durable only once the directory entry is on disk
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """A staging folder beside `path` (absent or empty), renamed onto it only on success: an
    output folder appears whole, or not at all. A failure removes the staging folder."""
    target = Path(path)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise NERError("exists and is not an empty folder; nothing was written", path=str(path))
    if not target.parent.is_dir():
        raise NERError("output's parent folder does not exist", path=str(target.parent))
    try:
        stage = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
    except OSError as exc:
        raise _write_error(exc, target) from None
    try:
        yield stage
        os.chmod(stage, 0o777 & ~current_umask())  # mkdtemp makes it 0700
        if target.is_dir():
            target.rmdir()  # empty, checked above
        os.replace(stage, target)
    except BaseException as exc:
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRORS:
            raise _write_error(exc, target) from None
        raise


def writable_folder(path: str | Path, parents: bool = True) -> Path:
    """A folder for an output of several files, each written whole (`atomic_write`): made if
    absent (with `parents`, its missing parents too) and checked by writing the way
    `atomic_write` does, so an unwritable one fails before any work starts. An output that
    must appear whole as a folder is `atomic_folder`'s instead."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise NERError("exists and is not a folder", path=str(folder))
    if not parents and not folder.parent.is_dir():
        raise NERError("output's parent folder does not exist", path=str(folder.parent))
    made = not folder.exists()
    try:
        folder.mkdir(parents=parents, exist_ok=True)
    except OSError as exc:
        raise NERError(
            f"cannot create output folder ({exc.strerror or exc})", str(folder)
        ) from None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".partial-", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        if made and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # leave nothing behind for an output that was never written
        raise NERError(f"cannot write ({exc.strerror or exc})", path=str(folder)) from None
    return folder


# what a filesystem without locks answers (e.g. Lustre mounted without `flock`)
NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}
_unlocked_said: set[str] = set()


@contextmanager
def exclusive(path: str | Path) -> Iterator[IO[bytes]]:
    """The file `path` (made empty if absent) open for reading and writing, under an exclusive
    lock held for the block: processes that share its filesystem, on this machine or on others
    (NFS and the usual cluster filesystems carry `flock` locks between machines), take turns, so
    what one builds under the lock the next finds built, never half-written. The file may be
    a lock file only, or data of its own written in place (never replaced: the lock is on it).

    Where the filesystem has no locks, the block runs unlocked, said once on stderr: outputs
    written whole (`atomic_write`, renames) stay whole, but two processes may build one twice."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise _write_error(exc, Path(path)) from None
    with os.fdopen(fd, "r+b") as handle:  # closing it releases the lock
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in NO_LOCKS:
                raise
            folder = str(Path(path).parent)
            if folder not in _unlocked_said:
                _unlocked_said.add(folder)
                print(f"note: {folder}: the filesystem refuses file locks; processes sharing it "
                      "may build the same cache file twice", file=sys.stderr)  # fmt: skip
        yield handle
