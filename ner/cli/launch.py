"""Several processes and machines for `ner fit|validate|test|predict`: the launcher's world
size checked against `trainer.num_nodes x trainer.devices` before anything starts, every rank
resuming from the same checkpoint, and the process group taken down when the command ends.

Launchers: torchrun (`WORLD_SIZE`, `LOCAL_WORLD_SIZE`), SLURM's srun (`SLURM_NTASKS`,
`SLURM_NTASKS_PER_NODE`), or Lightning's own variables (`MASTER_ADDR`, `MASTER_PORT`,
`NODE_RANK`, and `WORLD_SIZE` where the user sets it); docs/several-machines.md shows each.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from lightning_fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from pytorch_lightning.callbacks import Callback

from ner.utils.errors import NERError


def end_process_group() -> None:
    """Destroy the default process group if this process made one (a command's last act: left
    to interpreter exit, torchrun workers were seen to abort there now and then)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def launcher_world() -> tuple[int, int | None, str] | None:
    """(processes in all, processes a machine or None, what says so) where a launcher started
    this process as one of several; None where nothing did (Lightning then starts them)."""
    env = os.environ
    if TorchElasticEnvironment.detect():
        per_node = int(env["LOCAL_WORLD_SIZE"]) if "LOCAL_WORLD_SIZE" in env else None
        return int(env["WORLD_SIZE"]), per_node, f"torchrun: WORLD_SIZE={env['WORLD_SIZE']}"
    if SLURMEnvironment.detect():
        per_node = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
        tasks = env["SLURM_NTASKS"]
        return int(tasks), int(per_node) if per_node.isdigit() else None, f"SLURM_NTASKS={tasks}"
    if "WORLD_SIZE" in env:
        return int(env["WORLD_SIZE"]), None, f"WORLD_SIZE={env['WORLD_SIZE']}"
    return None


def device_count(devices: Any, accelerator: Any) -> int | None:
    """The processes a machine that `trainer.devices` asks for, as Lightning counts them
    (`auto`: every GPU, or 1 on CPU); None where that cannot be told before the Trainer exists."""
    gpu = str(accelerator) in ("gpu", "cuda") or (
        str(accelerator) in ("None", "auto") and torch.cuda.is_available()
    )
    if isinstance(devices, bool):
        return None
    if devices in (None, "auto"):
        return torch.cuda.device_count() if gpu else 1
    if devices in (-1, "-1"):  # every GPU
        return torch.cuda.device_count() if gpu else None
    if isinstance(devices, list | tuple):
        return len(devices)
    if isinstance(devices, str):
        text = devices.strip()
        if "," in text:  # GPU ids, "0,1" or "0,"
            return len([d for d in text.split(",") if d.strip()])
        return int(text) if text.isdigit() else None
    return devices if isinstance(devices, int) and devices > 0 else None


def check_world_size(trainer: Any) -> None:
    """A one-line error where the launcher's processes differ from `num_nodes x devices`, or
    `NODE_RANK` names a machine beyond `num_nodes`, before any process waits for the others."""
    nodes = int(trainer.get("num_nodes") or 1)
    node_rank = os.environ.get("NODE_RANK")
    if node_rank is not None and node_rank.isdigit() and int(node_rank) >= nodes:
        raise NERError(f"is {nodes}, but NODE_RANK is {node_rank}: give every machine "
                       "--trainer.num_nodes N (N machines)", path="trainer.num_nodes")  # fmt: skip
    launched = launcher_world()
    devices = device_count(trainer.get("devices"), trainer.get("accelerator"))
    if launched is None or devices is None:
        return
    world, per_node, source = launched
    if world == nodes * devices and per_node in (None, devices):
        return
    hint = ""
    if per_node and world % per_node == 0:
        hint = f": give --trainer.num_nodes {world // per_node} --trainer.devices {per_node}"
    raise NERError(
        f"the launcher starts {world} processes ({source}"
        f"{f', {per_node} a machine' if per_node else ''}), but trainer.num_nodes x "
        f"trainer.devices is {nodes} x {devices} = {nodes * devices}{hint}"
    )


def resume_path(ckpt_path: str, trainer) -> Path | None:
    """The file `--ckpt_path` resumes from: the path, or for `last` the newest `*last*.ckpt`
    in the checkpoint folders (as Lightning looks for it); None if there is none."""
    if ckpt_path != "last":
        return Path(ckpt_path) if Path(ckpt_path).is_file() else None
    folders = {Path(c.dirpath) for c in trainer.checkpoint_callbacks if c.dirpath}
    found = [p for d in folders if d.is_dir() for p in d.glob("*last*.ckpt")]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def shown(path: Path | None) -> str | None:
    """A path relative to the working folder where it lies inside it."""
    if path is None:
        return None
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def digest(path: Path | None) -> str | None:
    """sha256 of a file (None for none)."""
    if path is None:
        return None
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            sha.update(block)
    return sha.hexdigest()


class SameResume(Callback):
    """`ner fit --ckpt_path` under several processes: every rank must resume from the same
    checkpoint. Each rank finds its own (Lightning looks on its machine's disk), so machines
    without a shared disk could resume one from `last.ckpt` and another from scratch (and then
    wait on each other forever): a one-line error instead, on every rank, before any restores."""

    def __init__(self, ckpt_path: str, found: Path | None):
        """Args:
        ckpt_path: `--ckpt_path` as given (a path, or `last`).
        found: the file this rank resumes from (`resume_path`, looked up before the ranks
            share rank 0's checkpoint folders), or None.
        """
        self.ckpt_path, self.found = ckpt_path, found

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or trainer.world_size == 1 or not dist.is_initialized():
            return
        mine = (shown(self.found), digest(self.found))
        everyone: list[Any] = [None] * trainer.world_size
        dist.all_gather_object(everyone, mine)
        if len({d for _, d in everyone}) == 1:
            return
        ranks = ", ".join(
            f"rank {r}: {p or 'none'}" + (f" (sha256 {d[:12]})" if d else "")
            for r, (p, d) in enumerate(everyone)
        )
        raise NERError(f"{self.ckpt_path}: the ranks would resume from different checkpoints "
                       f"({ranks}); machines without a shared disk need the same checkpoint "
                       "folder copied to each", path="--ckpt_path")  # fmt: skip
