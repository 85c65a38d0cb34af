"""`ner seeds`: one config over several seeds, each scored on dev (and with `--test` on test),
summarised as mean ± std, so no result rests on one seed.

    ner seeds -c configs/conll2003-minilm.yaml --seeds 1 2 3 [--test] [--run NAME] [fit options]
    ner seeds --experiment context64 epochs5 --seeds 1 2 3   # the default + configs/experiment/X
    ner seeds --from-record docs/runs/ladder/crf.json --seeds 1   # a record's config again

`--experiment NAME ...` runs each named recipe in turn, each with `-c configs/experiment/NAME.yaml`
after the offline default's config (unless a `-c` is given) and its own run `exp/NAME`.
`--from-record RECORD ...` runs each record's resolved config (`config`, what `ner results save
--seeds` keeps; `ner fit` options given here go on top) as run `exp/RECORD` (the file's name),
whatever the offline default has become since. Seed S trains with `--seed_everything S` (which
also orders the batches) into `checkpoints/NAME/seed-S/`; its `best.ckpt` is evaluated with `ner
test` on the dev file (reports in `seed-S/dev/`) and, with `--test`, on the test file
(`seed-S/test/`). The table, the figures and the config go to `runs/NAME/seeds.md` and
`seeds.json`. A seed finished before with the same configuration (`seed-S/seed.json`) is read
back, so an interrupted sweep resumes where it stopped. "The same" is the resolved configuration
(config files and defaults as they are now), not the options as typed: a seed trained before a
config file or a default changed is trained again, saying what changed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ner.cli.lightning import CONFIGS_DIR, NERCLI, run_lightning
from ner.cli.main import summary as command_summary
from ner.data.datamodule import NERDataModule
from ner.evaluation.spread import markdown, summary
from ner.model.tagger import NERTagger
from ner.utils.errors import NERError
from ner.utils.files import atomic_write

# The sections of a fit's config that decide what it trains (the rest are output options).
RECIPE_KEYS = ("seed_everything", "trainer", "model", "data", "optimizer", "lr_scheduler", "run")


def parser() -> argparse.ArgumentParser:
    """The options of `ner seeds` (any other option goes to `ner fit`)."""
    p = argparse.ArgumentParser(prog="ner seeds", description=command_summary("seeds"))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--test", action="store_true", help="also score test (report it once)")
    p.add_argument(
        "--run",
        help="name of the run (default: exp/EXPERIMENT or exp/RECORD, else "
        "the first config's name)",
    )
    p.add_argument(
        "--experiment", nargs="+", default=[], metavar="NAME",
        help="files of configs/experiment/ (names without .yaml): a run each, exp/NAME",
    )  # fmt: skip
    p.add_argument(
        "--from-record", nargs="+", default=[], metavar="RECORD",
        help="records of docs/runs/ that hold a config: a run each, exp/RECORD",
    )  # fmt: skip
    return p


def has_config(args: list[str]) -> bool:
    """Whether `args` name a config file (`-c`, `--config`)."""
    return any(a in ("-c", "--config") or a.startswith("--config=") for a in args)


def with_experiment(name: str, fit_args: list[str]) -> list[str]:
    """`fit_args` with the experiment's config file after the others (the offline default's
    config first when no `-c` is given); a one-line error for an unknown experiment."""
    path = CONFIGS_DIR / "experiment" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise NERError(f"no experiment {name!r} (one of {known})", path="--experiment")
    default = [] if has_config(fit_args) else ["-c", str(CONFIGS_DIR / "conll2003-minilm.yaml")]
    return [*default, *fit_args, "-c", str(path)]


def with_record(record: str, name: str, fit_args: list[str]) -> list[str]:
    """`fit_args` on top of the resolved config a record keeps, written to
    `runs/NAME/record-config.yaml` for `-c`; a one-line error for a record without one."""
    path = Path(record)
    if not path.is_file():
        raise NERError("no such record", path=record)
    config = json.loads(path.read_text(encoding="utf-8")).get("config")
    if not config:
        raise NERError("the record holds no config to train from (see its command)", path=record)
    written = Path("runs") / name / "record-config.yaml"
    written.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(written) as handle:
        yaml.safe_dump(config, handle, sort_keys=False)
    return ["-c", str(written), *fit_args]


def run_name(args: argparse.Namespace, fit_args: list[str]) -> str:
    """The run of options that name no experiment or record: `--run`, else the first config's
    name."""
    if args.run:
        return args.run
    for flag, value in zip(fit_args, fit_args[1:], strict=False):
        if flag in ("-c", "--config"):
            return Path(value).stem
    return "seeds"


def planned_runs(args: argparse.Namespace, fit_args: list[str]) -> list[tuple[str, list[str]]]:
    """(run name, `ner fit` options) of each run asked for: an experiment or a record each, or
    the options alone."""
    named = [*args.experiment, *args.from_record]
    if not named:
        return [(run_name(args, fit_args), fit_args)]
    if args.run and len(named) > 1:
        raise NERError("names one run; several experiments or records each run as exp/NAME",
                       path="--run")  # fmt: skip
    runs = [(args.run or f"exp/{e}", with_experiment(e, fit_args)) for e in args.experiment]
    for record in args.from_record:
        name = args.run or f"exp/{Path(record).stem}"
        runs.append((name, with_record(record, name, fit_args)))
    return runs


class _Resolver(NERCLI):
    """Parses and resolves a fit's config (files, class defaults, run name); builds nothing."""

    def _set_seed(self) -> None:
        return

    def instantiate_classes(self) -> None:
        return


def recipe_of(dumped: str) -> dict[str, Any]:
    """The recipe sections of a dumped config (a run's `config.yaml`, or `fit_recipe`'s)."""
    config = yaml.safe_load(dumped) or {}
    return {key: config.get(key) for key in RECIPE_KEYS}


def fit_recipe(args: list[str]) -> dict[str, Any]:
    """What `ner fit ARGS` would train, as the plain data its `config.yaml` holds: the config
    files and the code's defaults as they are now, the run's folders filled in (nothing is built
    or loaded)."""
    cli = _Resolver(NERTagger, NERDataModule, args=args, run=False,
                    parser_kwargs={"exit_on_error": False})  # fmt: skip
    return recipe_of(cli.parser.dump(cli.config, skip_none=False))


class _Parser(_Resolver):
    """Parses a fit's config and stops: nothing derived from the run name is filled in."""

    def before_instantiate_classes(self) -> None:
        return


def fit_config(args: list[str]) -> dict[str, Any]:
    """The config `ner fit ARGS --print_config` prints (its recipe sections): what a record
    keeps, for `--from-record` to train again under any run name."""
    cli = _Parser(NERTagger, NERDataModule, args=args, run=False,
                  parser_kwargs={"exit_on_error": False})  # fmt: skip
    return recipe_of(cli.parser.dump(cli.config, skip_none=False))


def saved_recipe(name: str, seed: int) -> dict[str, Any] | None:
    """The recipe of a seed's newest `runs/NAME/seed-S/version_*/config.yaml` (None: none)."""
    saved = sorted(
        (Path("runs") / name / f"seed-{seed}").glob("version_*/config.yaml"),
        key=lambda p: int(p.parent.name.split("_")[-1]),
    )
    return recipe_of(saved[-1].read_text()) if saved else None


def differences(before: Any, now: Any, key: str = "") -> list[str]:
    """Dotted keys whose values differ, with both values (`data.batch_size: 32 -> 16`)."""
    if isinstance(before, dict) and isinstance(now, dict):
        keys = list(before) + [k for k in now if k not in before]
        found = (differences(before.get(k), now.get(k), f"{key}.{k}".lstrip(".")) for k in keys)
        return [line for lines in found for line in lines]
    return [] if before == now else [f"{key}: {before!r} -> {now!r}"]


def _evaluate(ckpt: Path, data_file: str, out: Path) -> dict[str, Any]:
    run_lightning(
        ["test", "--ckpt_path", str(ckpt), "--data.test_file", data_file, "--output", str(out),
         "--trainer.enable_progress_bar", "false"]
    )  # fmt: skip
    return json.loads((out / f"{ckpt.stem}.test-report.json").read_text())["metrics"]


def one_seed(seed: int, name: str, fit_args: list[str], test: bool) -> dict[str, Any]:
    """Train and score one seed; its dev (and test) report and fit wall time. A seed already
    trained with the same resolved config (however the options spelled it) is read back."""
    record = Path("checkpoints") / name / f"seed-{seed}" / "seed.json"
    recipe = fit_recipe(seed_args(seed, name, fit_args))
    if record.is_file():
        done = json.loads(record.read_text())
        before = done.get("recipe") or saved_recipe(name, seed)
        changed = ["no saved config"] if before is None else differences(before, recipe)
        if not changed:
            return _read_back(record, done, test)
        shown = "; ".join(changed[:3]) + ("; ..." if len(changed) > 3 else "")
        print(f"seed {seed}: trained with another configuration ({shown}): training again",
              file=sys.stderr)  # fmt: skip
    result = _train_and_score(seed, name, fit_args, test)
    _record(record, fit_args, result, recipe)
    return result


def _read_back(record: Path, done: dict[str, Any], test: bool) -> dict[str, Any]:
    result = done["result"]
    if test and "test" not in result:
        # Trained and scored on dev before: the test score needs only its checkpoint.
        best = Path(result["checkpoint"])
        result["test"] = _evaluate(best, result["files"]["test"], best.parent / "test")
        _record(record, done["fit_args"], result, done.get("recipe"))
    return result


def seed_args(seed: int, name: str, fit_args: list[str]) -> list[str]:
    """The `ner fit` options (no subcommand) that train seed `seed` of run `name`."""
    return [*fit_args, "--seed_everything", str(seed), "--run", f"{name}/seed-{seed}"]


def _record(record: Path, fit_args: list[str], result: dict[str, Any], recipe: Any) -> None:
    with atomic_write(record) as handle:
        json.dump({"fit_args": fit_args, "recipe": recipe, "result": result}, handle, indent=2)


def _train_and_score(seed: int, name: str, fit_args: list[str], test: bool) -> dict[str, Any]:
    started = time.perf_counter()
    cli = run_lightning(["fit", *seed_args(seed, name, fit_args)])
    fit_s = time.perf_counter() - started
    files = cli.datamodule.files
    if not files.get("val") or (test and not files.get("test")):
        raise NERError("ner seeds scores dev and test files; give --data.val_file/test_file")
    best = Path(cli.trainer.checkpoint_callback.best_model_path or "")
    if not best.is_file():
        raise NERError("the run saved no best.ckpt (no validation ran)", path=str(best))
    result = {"seed": seed, "fit_s": fit_s, "checkpoint": str(best), "files": dict(files)}
    result["dev"] = _evaluate(best, files["val"], best.parent / "dev")
    if test:
        result["test"] = _evaluate(best, files["test"], best.parent / "test")
    return result


def sweep(name: str, fit_args: list[str], seeds: list[int], test: bool) -> None:
    """Run every seed of one run, then write and print its summary."""
    runs = [one_seed(seed, name, fit_args, test) for seed in seeds]
    out = Path("runs") / name
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(name, runs)
    found = {"runs": runs, "summary": summary(runs), "fit_args": fit_args,
             "config": fit_config(fit_args)}  # fmt: skip
    with atomic_write(out / "seeds.json") as handle:
        json.dump(found, handle, indent=2)
    with atomic_write(out / "seeds.md") as handle:
        handle.write(table + "\n")
    print(table)
    print(f"summary: {out / 'seeds.md'}")


def main(argv: list[str]) -> int:
    """Each run asked for, one after the other (every option is checked before any trains)."""
    args, fit_args = parser().parse_known_args(argv)
    runs = planned_runs(args, fit_args)
    for _, run_args in runs:
        fit_recipe(run_args)  # a bad option or file fails now, not after hours of training
    for name, run_args in runs:
        sweep(name, run_args, args.seeds, args.test)
    return 0
