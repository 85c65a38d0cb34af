"""Faults outside the program: an unwritable output, a full disk, Ctrl-C. Each ends with one
line on stderr, a non-zero exit, and no output file, not even a partial or temporary one."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

from helpers import ROOT, TAG_LINES, one_line_error, run_ner

import ner.utils.files


def tag_file(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(TAG_LINES * 20) + "\n", encoding="utf-8")
    return text


def test_unwritable_output_directory(trained, tmp_path, capsys, monkeypatch):
    text, out = tag_file(tmp_path), tmp_path / "out.jsonl"

    def refuses(*args, **kwargs):  # what a directory without write permission answers
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path))

    monkeypatch.setattr(ner.utils.files.tempfile, "mkstemp", refuses)
    code, _, err = run_ner(["tag", str(trained["ckpt"] / "best.ckpt"), str(text), "--output",
                            str(out)], capsys)  # fmt: skip
    assert one_line_error(code, err) == (
        f"error: {out}: cannot write (Permission denied); nothing was written"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


class FullDisk:
    """A file handle that takes `room` characters, then fails as a full disk does."""

    def __init__(self, handle, room: int):
        self.handle, self.room = handle, room

    def write(self, data):
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def test_full_disk_while_writing_predictions(trained, tmp_path, capsys, monkeypatch):
    text, out = tag_file(tmp_path), tmp_path / "out.jsonl"
    real = os.fdopen
    monkeypatch.setattr(ner.utils.files.os, "fdopen", lambda *a, **k: FullDisk(real(*a, **k), 2000))
    code, _, err = run_ner(["tag", str(trained["ckpt"] / "best.ckpt"), str(text), "--output",
                            str(out)], capsys)  # fmt: skip
    assert one_line_error(code, err) == (
        f"error: {out}: cannot write (No space left on device); nothing was written"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_ctrl_c_of_ner_tag_stops_cleanly(trained, tmp_path):
    """A real SIGINT to a `ner tag` that is waiting for more of its stdin."""
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "tests")}
    # A child inherits an ignored SIGINT, and Lightning leaves this process's SIGINT ignored
    # after any in-process fit that met a KeyboardInterrupt; a terminal's Ctrl-C has the default.
    proc = subprocess.Popen(
        [sys.executable, "-m", "ner.cli.main", "tag", str(trained["ckpt"] / "best.ckpt"), "-",
         "--input-format", "text", "--output", str(out)],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    proc.stdin.write("\n".join(TAG_LINES) + "\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 120
    while not any(p.name.startswith(".partial-") for p in tmp_path.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline  # it began writing
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == "error: interrupted (Ctrl-C); no partial output was left"
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no out.jsonl, no temporary file


def test_full_disk_during_a_checkpoint_save(
    tmp_path, tiny_model_dir, tiny_corpus_dir, capsys, monkeypatch
):
    """`ner fit` whose checkpoint write hits a full disk: one line, and no torn checkpoint."""
    import torch

    def full(obj, handle):
        handle.write(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_ner(
        ["fit", "-c", str(ROOT / "configs" / "trainer.yaml"), "--model.encoder",
         str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir), "--trainer.max_epochs",
         "1", "--run", "full", "--trainer.enable_progress_bar", "false"],
        capsys,
    )  # fmt: skip
    ckpt_dir = tmp_path / "checkpoints" / "full"
    assert one_line_error(code, err).startswith(f"error: {ckpt_dir}/")
    assert "No space left on device" in err
    assert list(ckpt_dir.iterdir()) == []
