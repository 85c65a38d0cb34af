"""Resume after a kill: the sampler's position, atomic checkpoint writes, and `kill -9` of a
real `ner fit` then `--ckpt_path last` ending where an uninterrupted run ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT

from ner.data.batching import LengthBucketSampler, ResumableLoader
from ner.model.resume import AtomicCheckpointIO


def loader(epoch: int = 1) -> ResumableLoader:
    sampler = LengthBucketSampler(list(range(1, 41)), list(range(40)), 4, shuffle=True, seed=3)
    sampler.set_epoch(epoch)
    return ResumableLoader(list(range(40)), batch_sampler=sampler, collate_fn=list)


def test_loader_resumes_at_the_next_batch_of_the_saved_epoch():
    full = list(loader())
    assert len(full) == 10
    first = loader()
    it = iter(first)
    seen = [next(it) for _ in range(4)]
    state = first.state_dict()
    assert state == {"epoch": 1, "consumed": 4}
    resumed = loader()
    resumed.load_state_dict(state)
    assert seen + list(resumed) == full  # nothing repeated, nothing skipped
    assert resumed.state_dict() == {"epoch": 1, "consumed": 10}
    assert list(resumed) == full  # the skip applies once
    other = loader(epoch=2)
    other.load_state_dict(state)
    assert len(list(other)) == 10  # a state saved at epoch 1 does not skip epoch 2


def test_checkpoint_write_interrupted_leaves_the_old_file_and_no_partial(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1}, path)
    before = path.read_bytes()

    def dies_halfway(obj, handle):
        handle.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": 2}, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_checkpoint_is_staged_in_its_own_directory_not_tmpdir(tmp_path, monkeypatch):
    staged = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: staged.append(Path(a)) or real_replace(a, b))
    AtomicCheckpointIO().save_checkpoint({"step": 1}, tmp_path / "best.ckpt")
    assert [p.parent for p in staged] == [tmp_path]  # a rename, never a cross-device move
    assert torch.load(tmp_path / "best.ckpt")["step"] == 1


def fit_config(tmp: Path, model_dir: Path, corpus_dir: Path, every_n_steps: int) -> Path:
    config = tmp / "fit.yaml"
    config.write_text(
        f"""
seed_everything: 7
trainer:
  max_epochs: 3
  precision: 32-true
  logger: false
  enable_progress_bar: false
  num_sanity_val_steps: 0
  use_distributed_sampler: false
  callbacks:
    - class_path: pytorch_lightning.callbacks.ModelCheckpoint
      init_args: {{filename: best, monitor: val/f1, mode: max, enable_version_counter: false}}
    - class_path: ner.model.resume.LastCheckpoint
      init_args: {{every_n_steps: {every_n_steps}}}
    - ner.model.resume.ResumeState
model:
  encoder: {model_dir}
  encoder_lr: 1.0e-3
  head_lr: 1.0e-2
data:
  data_dir: {corpus_dir}
  batch_size: 4
""",
        encoding="utf-8",
    )
    return config


def ner_fit(cwd: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "tests")}
    return subprocess.run(
        [sys.executable, "-m", "ner.cli.main", "fit", "-c", str(config), "--run", "r", *extra],
        capture_output=True, text=True, env=env, cwd=cwd,
    )  # fmt: skip


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(run_dir / "checkpoints" / "r" / "last.ckpt", weights_only=False)
    assert ckpt["epoch"] == 2  # the third epoch finished
    return ckpt["state_dict"]


@pytest.mark.parametrize(
    ("every_n_steps", "kill_after"), [(0, 0), (3, 3)], ids=["epoch-boundary", "mid-epoch"]
)
def test_kill_9_then_ckpt_path_last_ends_as_the_uninterrupted_run(
    tmp_path, tiny_model_dir, tiny_corpus_dir, every_n_steps, kill_after
):
    config = fit_config(tmp_path, tiny_model_dir, tiny_corpus_dir, every_n_steps)
    (tmp_path / "plain").mkdir()
    plain = ner_fit(tmp_path / "plain", config)
    assert plain.returncode == 0, plain.stderr
    steps_per_epoch = (
        torch.load(tmp_path / "plain" / "checkpoints" / "r" / "last.ckpt", weights_only=False)[
            "global_step"
        ]
        // 3
    )
    # epoch boundary: killed as the second epoch's first batch starts; mid-epoch: killed inside
    # the second epoch, after a step checkpoint that is itself mid-epoch, with batches lost
    kill = steps_per_epoch + kill_after
    if every_n_steps:
        saved = kill // every_n_steps * every_n_steps
        assert saved % steps_per_epoch and saved < kill, (steps_per_epoch, saved, kill)
    (tmp_path / "killed").mkdir()
    killed = ner_fit(
        tmp_path / "killed", config, "--trainer.callbacks+=kill_switch.KillAt",
        f"--trainer.callbacks.step={kill}",
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = ner_fit(tmp_path / "killed", config, "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr
    assert "Restoring states from the checkpoint" in resumed.stderr + resumed.stdout
    expected, got = final_weights(tmp_path / "plain"), final_weights(tmp_path / "killed")
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    leftovers = [p.name for p in (tmp_path / "killed" / "checkpoints" / "r").iterdir()]
    assert sorted(leftovers) == ["README.md", "best.ckpt", "last.ckpt"]
