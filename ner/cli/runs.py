"""What `run: NAME` (`--run NAME`) sets in a fit's config: where checkpoints, logs and caches
go, and one version folder for every logger of the run."""

from __future__ import annotations

from pathlib import Path

from jsonargparse import Namespace

CHECKPOINT_CLASSES = ("ModelCheckpoint", "LastCheckpoint")
LOGGER_CLASSES = ("CSVLogger", "TensorBoardLogger")


def apply_run_name(config: Namespace, run: str) -> None:
    """Checkpoint callbacks without a `dirpath` write to `checkpoints/<run>/`; a logger left at
    Lightning's default name logs under `<run>` (several loggers there, in one version folder);
    the data's caches go to `runs/<run>/cache` unless `data.cache_dir` says otherwise (nothing
    lands in a user-wide cache), and whatever Lightning writes to its root folder to
    `runs/<run>/`."""
    if config.data.get("cache_dir") is None:
        config.data.cache_dir = str(Path("runs") / run / "cache")
    if config.trainer.get("default_root_dir") is None:  # where a run without a logger keeps
        config.trainer.default_root_dir = str(Path("runs") / run)  # its config.yaml
    for callback in config.trainer.get("callbacks") or []:
        if not isinstance(callback, Namespace):
            continue
        name = str(callback.get("class_path", "")).rpartition(".")[2]
        if name in CHECKPOINT_CLASSES and callback.init_args.get("dirpath") is None:
            callback.init_args.dirpath = str(Path("checkpoints") / run)
    named = [lg for lg in loggers(config) if lg.class_path.rpartition(".")[2] in LOGGER_CLASSES]
    for logger in named:
        if logger.init_args.get("name") in (None, "lightning_logs"):
            logger.init_args.name = run
    share_version(named)


def share_version(named: list[Namespace]) -> None:
    """Loggers of one folder (CSV and TensorBoard, say) write to one `version_N`: left to
    themselves each picks the next free number, and the second finds the first's folder."""
    roots = {(str(lg.init_args.get("save_dir")), lg.init_args.get("name")) for lg in named}
    if (
        len(named) < 2
        or len(roots) > 1
        or any(lg.init_args.get("version") is not None for lg in named)
    ):
        return
    save_dir, name = roots.pop()
    folder = Path(save_dir) / str(name)
    taken = [p.name.removeprefix("version_") for p in folder.glob("version_*") if p.is_dir()]
    version = max((int(t) for t in taken if t.isdigit()), default=-1) + 1
    for logger in named:
        logger.init_args.version = version


def loggers(config: Namespace) -> list[Namespace]:
    """The configured loggers (`trainer.logger`: one, a list, or none)."""
    logger = config.trainer.get("logger")
    found = logger if isinstance(logger, list) else [logger]
    return [lg for lg in found if isinstance(lg, Namespace) and lg.get("class_path")]
