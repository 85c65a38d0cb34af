"""`ner fit | validate | test | predict`: LightningCLI over `NERTagger` and `NERDataModule`.

Beyond Lightning's CLI: the data -> model links (tokenizer, labels, scheme, seed), `run: NAME`
(checkpoints to `checkpoints/NAME/`, logs to `runs/NAME/`), the model, tokenizer, labels and
window settings of `--ckpt_path` for evaluation and prediction, automatic precision, the
prediction writer, and the evaluation report of `ner test`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.cli import LightningCLI

from ner.analysis import analyse, format_analysis, training_entities
from ner.callbacks import PredictionFileWriter
from ner.checkpoint import MODULE_ARGS, module_spec, read_checkpoint, tagger_kwargs
from ner.datamodule import NERDataModule
from ner.errors import NERError
from ner.metrics import format_report
from ner.outputs import write_test_outputs
from ner.precision import auto_precision
from ner.resume import AtomicCheckpointIO
from ner.tagger import NERTagger, restore

SUBCOMMANDS = ("fit", "validate", "test", "predict")
CKPT_SUBCOMMANDS = ("validate", "test", "predict")
WINDOW_ARGS = ("max_length", "stride", "context_pieces")
CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"
CHECKPOINT_CLASSES = ("ModelCheckpoint", "LastCheckpoint")
LOGGER_CLASSES = ("CSVLogger", "TensorBoardLogger")


def _seed(value: Any) -> int:
    # seed_everything may be true/false (Lightning then draws one); the batch order needs an int
    return value if isinstance(value, int) and not isinstance(value, bool) else 42


def apply_run_name(config: Namespace, run: str) -> None:
    """Checkpoint callbacks without a `dirpath` write to `checkpoints/<run>/`; a logger left at
    Lightning's default name logs under `<run>`."""
    for callback in config.trainer.get("callbacks") or []:
        if not isinstance(callback, Namespace):
            continue
        name = str(callback.get("class_path", "")).rpartition(".")[2]
        if name in CHECKPOINT_CLASSES and callback.init_args.get("dirpath") is None:
            callback.init_args.dirpath = str(Path("checkpoints") / run)
    logger = config.trainer.get("logger")
    if isinstance(logger, Namespace) and logger.get("class_path", "").rpartition(".")[2] in (
        LOGGER_CLASSES
    ):
        if logger.init_args.get("name") in (None, "lightning_logs"):
            logger.init_args.name = run


def from_checkpoint(config: Namespace, section: dict[str, Any]) -> None:
    """The model of a checkpoint's `ner` section (Lightning's CLI would build it from the
    defaults: Lightning #20310, #20801); the data takes its tokenizer and labels, and its window
    settings where the command line leaves them unset."""
    kwargs = tagger_kwargs(section)
    kwargs.pop("metric_mode")  # an evaluation choice, left to the command line
    for name, value in kwargs.items():
        if name in MODULE_ARGS and value is not None:
            spec = module_spec(value)
            value = Namespace(
                class_path=spec["class_path"], init_args=Namespace(**spec["init_args"])
            )
        config.model[name] = value
    config.data.tokenizer = kwargs["encoder"]
    config.data.labels = kwargs["labels"]
    for name, value in (section.get("windows") or {}).items():
        if config.data.get(name) is None:
            config.data[name] = value


class NERCLI(LightningCLI):
    """LightningCLI with the data -> model links and checkpoint-only evaluation."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("model.encoder", "data.tokenizer")
        parser.link_arguments("seed_everything", "data.seed", compute_fn=_seed)
        parser.link_arguments("data.labels", "model.labels", apply_on="instantiate")
        parser.link_arguments("data.scheme_of_train", "model.scheme", apply_on="instantiate")
        parser.add_argument(
            "--run", type=str, default="ner", help="checkpoints/RUN/ and runs/RUN/ (fit)"
        )
        parser.add_argument("--output", type=str | None, default=None, help="predictions file")
        parser.add_argument(
            "--format", type=str, default="jsonl", help="predictions format: jsonl or conll"
        )
        parser.add_argument(
            "--backend", type=str, default="torch", help="evaluation/prediction: torch or onnx"
        )
        parser.add_argument("--quantize", type=str | None, default=None, help="int8 (or none)")

    def _set_seed(self) -> None:
        if self.subcommand in CKPT_SUBCOMMANDS:
            return  # evaluation and prediction draw no random numbers: no seed to report
        super()._set_seed()

    def _parse_ckpt_path(self) -> None:
        # Lightning would parse the checkpoint's hyperparameters into the config, importing
        # whatever class paths they name. `from_checkpoint` does it safely instead.
        return

    def _command_config(self) -> Namespace:
        # no subcommand: classes instantiated only (`cli_for`), as for fit
        return self.config[self.subcommand] if self.subcommand else self.config

    def before_instantiate_classes(self) -> None:
        config = self._command_config()
        self.checkpoint_path, self.checkpoint = None, None
        # our batch sampler shards batches across ranks itself, and Lightning cannot inject its
        # sampler into it (it would fail under DDP): for every command, not only trainer.yaml's
        config.trainer.use_distributed_sampler = False
        if self.subcommand in ("fit", None):
            apply_run_name(config, config.run)
        else:
            # evaluation writes no logs and no config.yaml unless asked: only its report
            if config.trainer.get("logger") in (None, True):
                config.trainer.logger = False
            self.save_config_callback = None
        if self.subcommand in CKPT_SUBCOMMANDS and config.get("ckpt_path"):
            # the weights are loaded here, safely, and Lightning is given none to restore: it
            # has no trainer state to resume for evaluation, only warnings about callbacks
            self.checkpoint_path, config.ckpt_path = config.ckpt_path, None
            self.checkpoint = read_checkpoint(self.checkpoint_path)
            from_checkpoint(config, self.checkpoint["ner"])
        if self.subcommand == "test":
            config.verbose = False  # `after_test` prints the scores; Lightning's table repeats them

    def instantiate_classes(self) -> None:
        super().instantiate_classes()
        if self.checkpoint is not None:
            restore(self.model, self.checkpoint, self.checkpoint_path)
            self.checkpoint = None  # the weights now live in the model
        config = self._command_config()
        if config.get("backend", "torch") != "torch" or config.get("quantize"):
            if self.subcommand not in CKPT_SUBCOMMANDS:
                raise NERError("--backend and --quantize apply to validate, test and predict")
            # the same alignment, batches and decoding; only the forward pass moves
            self.model.accelerate(config.backend, config.quantize)

    def instantiate_trainer(self, **kwargs: Any):
        config = self._get(self.config_init, "trainer", default={})
        if config.get("precision") is None:  # unset: bf16 only where it runs fast
            accelerator = config.get("accelerator") or "auto"
            kwargs.setdefault("precision", auto_precision(str(accelerator)))
        trainer = super().instantiate_trainer(**kwargs)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not a user's own
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if self.subcommand == "predict":
            config = self.config["predict"]
            writer = PredictionFileWriter(self.datamodule, config.get("output"), config.format)
            trainer.callbacks.append(writer)
        return trainer

    def after_test(self) -> None:
        report = self.model.test_report
        if report is None or not self.trainer.is_global_zero:
            return
        config = self.config["test"]
        ckpt_path = self.checkpoint_path
        data = self.datamodule
        sentences = data.sentences("test")
        predictions = [self.model.test_predictions[i] for i in range(len(sentences))]
        analysis = analyse(
            [w for w, _ in sentences],
            [g for _, g in sentences],
            predictions,
            self._seen_entities(),
            self.model.metric_mode,
        )
        print(format_report(report, self.model.labels))
        print(format_analysis(analysis))
        test_file = data.files["test"] or f"{data.hub_name}[test]"
        payload = {"checkpoint": ckpt_path, "test_file": test_file, "metrics": report}
        path = write_test_outputs(
            report_dir(config.get("output"), ckpt_path, self.trainer),
            Path(ckpt_path).stem if ckpt_path else "model",
            {**payload, "analysis": analysis},
            sentences,
            predictions,
            data.scheme_of("test"),
        )
        print(f"report: {path}")

    def _seen_entities(self) -> set[str] | None:
        """The training entities: the checkpoint's, else those of `--data.train_file`, if any."""
        if self.model.train_entities is not None:
            return set(self.model.train_entities)
        data = self.datamodule
        if not data.files.get("train"):
            return None  # e.g. a checkpoint written before entities were recorded
        return training_entities((s.words, s.tags) for s in data.corpus("train").sentences)


def report_dir(output: str | None, ckpt_path: str | None, trainer) -> Path:
    """Where `ner test` writes its report: `--output`, else beside the checkpoint, else logs."""
    if output:
        return Path(output)
    if ckpt_path:
        return Path(ckpt_path).parent
    return Path(trainer.log_dir or ".")


def run_lightning(args: list[str] | None, run: bool = True) -> NERCLI:
    """Parse `args` and run a LightningCLI subcommand; returns the CLI (model, datamodule, ...).

    With `run=False`, `args` hold no subcommand and the classes are only instantiated.
    """
    parser_kwargs: dict[str, Any] = {"exit_on_error": False}
    if run:
        parser_kwargs.update(dict.fromkeys(SUBCOMMANDS, {"exit_on_error": False}))
    return NERCLI(
        NERTagger,
        NERDataModule,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
        # errors come back as exceptions, which `ner.cli.main` prints as one line
        parser_kwargs=parser_kwargs,
    )


def cli_for(args: list[str]) -> NERCLI:
    """Instantiate model, data and trainer from `args` without running anything (config tests)."""
    return run_lightning(args, run=False)


def main(argv: list[str] | None) -> int:
    """`ner fit|validate|test|predict ...` (None: LightningCLI reads sys.argv itself)."""
    run_lightning(argv)
    return 0
