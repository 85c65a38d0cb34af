"""Atomic writes: on failure the old file stays and no temporary file is left behind."""

from __future__ import annotations

import pytest

from ner.utils.errors import NERError
from ner.utils.files import atomic_write


def test_success_replaces_and_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_write(target) as out:
        out.write("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_write(target) as out:
        out.write("new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_missing_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(NERError, match="output directory does not exist"):
        with atomic_write(tmp_path / "nope" / "out.txt"):
            pass
