"""The `ner` command: LightningCLI's `fit`, `validate`, `test`, `predict`, plus `inspect`, `tag`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ner.errors import NERError

SUBCOMMANDS = ("fit", "validate", "test", "predict")
CKPT_SUBCOMMANDS = ("validate", "test", "predict")
QUIET = {"exit_on_error": False}
CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"


def _cli_class():
    from jsonargparse import Namespace
    from pytorch_lightning.cli import LightningCLI

    from ner.checkpoint import module_spec, read_checkpoint, tagger_kwargs

    class NERCLI(LightningCLI):
        """LightningCLI with the data -> model links and checkpoint-only evaluation."""

        def add_arguments_to_parser(self, parser) -> None:
            parser.link_arguments("model.encoder", "data.tokenizer")
            parser.link_arguments("data.labels", "model.labels", apply_on="instantiate")
            parser.link_arguments("data.scheme_of_train", "model.scheme", apply_on="instantiate")
            parser.add_argument("--output", type=str | None, default=None, help="predictions file")
            parser.add_argument(
                "--format", type=str, default="jsonl", help="predictions format: jsonl or conll"
            )

        def _parse_ckpt_path(self) -> None:
            # Lightning would parse the checkpoint's hyperparameters into the config, importing
            # whatever class paths they name. `before_instantiate_classes` does it safely instead.
            return

        def before_instantiate_classes(self) -> None:
            # `ner test --ckpt_path X` rebuilds the model from the checkpoint alone: Lightning's CLI
            # would otherwise build it from the defaults (Lightning #20310, #20801).
            if self.subcommand not in CKPT_SUBCOMMANDS:
                return
            config = self.config[self.subcommand]
            if not config.get("ckpt_path"):
                return
            section = read_checkpoint(config.ckpt_path)["ner"]
            kwargs = tagger_kwargs(section)
            kwargs.pop("metric_mode")  # an evaluation choice, left to the command line
            for name, value in kwargs.items():
                if name in ("combiner", "pooling", "head"):
                    spec = module_spec(value)
                    value = Namespace(
                        class_path=spec["class_path"], init_args=Namespace(**spec["init_args"])
                    )
                config.model[name] = value
            config.data.tokenizer = kwargs["encoder"]
            config.data.labels = kwargs["labels"]

        def instantiate_trainer(self, **kwargs: Any):
            from ner.precision import auto_precision

            config = self._get(self.config_init, "trainer", default={})
            if config.get("precision") is None:  # unset: bf16 only where it runs fast
                accelerator = config.get("accelerator") or "auto"
                kwargs.setdefault("precision", auto_precision(str(accelerator)))
            trainer = super().instantiate_trainer(**kwargs)
            if self.subcommand == "predict":
                from ner.predict_io import PredictionFileWriter

                config = self.config["predict"]
                trainer.callbacks.append(
                    PredictionFileWriter(self.datamodule, config.get("output"), config.format)
                )
            return trainer

        def after_test(self) -> None:
            config = self.config["test"]
            report = self.model.test_report
            if report is None or not self.trainer.is_global_zero:
                return
            from ner.metrics import format_report

            print(format_report(report, self.model.labels))
            out_dir = report_dir(config.get("output"), config.get("ckpt_path"), self.trainer)
            write_test_outputs(
                out_dir, config.get("ckpt_path"), report, self.model, self.datamodule
            )

    return NERCLI


def report_dir(output: str | None, ckpt_path: str | None, trainer) -> Path:
    """Where `ner test` writes its report: `--output`, else beside the checkpoint, else logs."""
    if output:
        return Path(output)
    if ckpt_path:
        return Path(ckpt_path).parent
    return Path(trainer.log_dir or ".")


def write_test_outputs(out_dir: Path, ckpt_path: str | None, report, model, datamodule) -> None:
    """The JSON report and a conlleval-compatible `word gold pred` file, written atomically."""
    import json

    from ner.files import atomic_write
    from ner.schemes import from_iob2

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(ckpt_path).stem if ckpt_path else "model"
    corpus = datamodule.corpora["test"]
    with atomic_write(out_dir / f"{stem}.test-report.json") as out:
        payload = {"checkpoint": ckpt_path, "test_file": corpus.path, "metrics": report}
        out.write(json.dumps(payload, indent=2) + "\n")
    with atomic_write(out_dir / f"{stem}.test-predictions.txt") as out:
        for i, sentence in enumerate(corpus.sentences):
            pred = from_iob2(model.test_predictions[i], corpus.scheme)
            gold = from_iob2(sentence.tags, corpus.scheme)
            rows = zip(sentence.words, gold, pred, strict=True)
            out.writelines(f"{w} {g} {p}\n" for w, g, p in rows)
            out.write("\n")
    print(f"report: {out_dir / (stem + '.test-report.json')}")


def run_lightning(args: list[str] | None, run: bool = True):
    """Parse `args` and run a LightningCLI subcommand; returns the CLI (model, datamodule, ...).

    With `run=False`, `args` hold no subcommand and the classes are only instantiated.
    """
    from ner.datamodule import NERDataModule
    from ner.tagger import NERTagger

    return _cli_class()(
        NERTagger,
        NERDataModule,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
        # errors come back as exceptions, which `main` prints as one line
        parser_kwargs={"exit_on_error": False, **dict.fromkeys(SUBCOMMANDS, QUIET)},
    )


def cli_for(args: list[str]):
    """Instantiate model, data and trainer from `args` without running anything (config tests)."""
    return run_lightning(args, run=False)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `ner` console command."""
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        if words[:1] == ["inspect"]:
            from ner.stats import inspect_main

            sys.exit(inspect_main(words[1:]))
        if words[:1] == ["tag"]:
            from ner.predict_io import tag_main

            sys.exit(tag_main(words[1:]))
        run_lightning(argv)  # None: LightningCLI reads sys.argv itself (and does not warn)
    except NERError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except argparse.ArgumentError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)


def one_line(message: str) -> str:
    """jsonargparse's nested, multi-line errors as one line: where, and the innermost reason."""
    lines = [ln.strip(" -") for ln in message.strip().splitlines() if ln.strip(" -")]
    if len(lines) <= 1:
        return lines[0] if lines else "invalid arguments"
    for i, line in enumerate(lines):
        if line.startswith("Problem with given class_path") and i + 1 < len(lines):
            return f"{lines[0]} {line} {lines[i + 1]}"
    return f"{lines[0]} {lines[-1]}"


if __name__ == "__main__":
    main()
