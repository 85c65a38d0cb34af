"""Atomic file writes: an output file appears whole, or not at all."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ner.errors import NERError


@contextmanager
def atomic_write(path: str | Path) -> Iterator[IO[str]]:
    """A text handle on a temporary file beside `path`, renamed onto it only on success."""
    target = Path(path)
    if not target.parent.is_dir():
        raise NERError("output directory does not exist", path=str(target.parent))
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            yield out
        # mkstemp makes the file 0600; give it the mode a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
