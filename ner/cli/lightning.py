"""`ner fit | validate | test | predict`: LightningCLI over `NERTagger` and `NERDataModule`.

Beyond Lightning's CLI: the data -> model links (tokenizer, labels, scheme, seed), `run: NAME`
(checkpoints to `checkpoints/NAME/`, logs to `runs/NAME/`), the model, tokenizer, labels and
window settings of `--ckpt_path` for evaluation and prediction, automatic precision, the
prediction writer, the evaluation report of `ner test`, and the model card beside the checkpoint
(`ner fit` writes it, `ner test` adds its test scores).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only

from ner.cli.fit_card import write_fit_card
from ner.cli.launch import SameResume, check_world_size, end_process_group, resume_path
from ner.cli.main import summary, usage
from ner.cli.model_card import add_test_scores
from ner.cli.reports import TEST_FORMATS, fit_line, shown, test_report
from ner.cli.runs import apply_run_name, loggers
from ner.data.datamodule import NERDataModule
from ner.inference.routine import CHUNK_SIZE
from ner.layer_analysis.tensorboard import TensorBoardExtras
from ner.model.callbacks import PredictionFileWriter, ValidationHistory, use_stderr_progress_bar
from ner.model.checkpoint import (
    check_fits,
    materialize,
    module_specs,
    read_checkpoint,
    scalar_args,
)
from ner.model.resume import AtomicCheckpointIO
from ner.model.tagger import NERTagger
from ner.utils.errors import NERError
from ner.utils.extras import require
from ner.utils.precision import auto_precision

SUBCOMMANDS = ("fit", "validate", "test", "predict")
CKPT_SUBCOMMANDS = ("validate", "test", "predict")
# Lines `ner predict` reads, tokenizes and tags at a time: memory follows this, not the input.
# `ner tag`'s chunks, so that both form the same batches and write byte-identical files.
PREDICT_PART = CHUNK_SIZE
CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"


def _seed(value: Any) -> int:
    # seed_everything may be true/false (Lightning then draws one); the batch order needs an int
    return value if isinstance(value, int) and not isinstance(value, bool) else 42


def from_checkpoint(config: Namespace, section: dict[str, Any]) -> None:
    """The model of a checkpoint's `ner` section as the config's `model` (LightningCLI would
    build it from the defaults: Lightning #20310, #20801): its module specs, checked but not
    built (LightningCLI builds them, once), and its settings; the data takes its tokenizer and
    labels. Window settings come from the restored model (`NERDataModule.use_model`)."""
    for name, spec in module_specs(section).items():
        config.model[name] = None if spec is None else Namespace(
            class_path=spec["class_path"], init_args=Namespace(**spec["init_args"]))  # fmt: skip
    for name, value in scalar_args(section).items():
        # evaluation choices, left to the command line: the metric always, the consistency
        # weight where it gives one (else the checkpoint's)
        if name == "metric_mode" or (name == "consistency" and config.model.get(name) is not None):
            continue
        config.model[name] = value
    config.model.encoder = materialize(section)
    config.model.labels = list(section["labels"])
    config.model.pretrained = False
    config.data.tokenizer = config.model.encoder
    config.data.labels = config.model.labels


class NERCLI(LightningCLI):
    """LightningCLI with the data -> model links, checkpoint-only evaluation, progress on
    stderr, the reports of `ner fit` and `ner test` on stdout, and the model card."""

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any):
        self._adding = subcommand  # `add_arguments_to_parser` adds this command's own options
        return super()._prepare_subcommand_parser(klass, subcommand, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("model.encoder", "data.tokenizer")
        parser.link_arguments("seed_everything", "data.seed", compute_fn=_seed)
        parser.link_arguments("data.labels", "model.labels", apply_on="instantiate")
        parser.link_arguments("data.scheme_of_train", "model.scheme", apply_on="instantiate")
        add_options(parser, getattr(self, "_adding", None))

    def _set_seed(self) -> None:
        if self.subcommand in CKPT_SUBCOMMANDS:
            return  # evaluation and prediction draw no random numbers: no seed to report
        super()._set_seed()

    def parse_arguments(self, parser, args) -> None:
        # the command as given, for the model card: the words `ner` hands on, else sys.argv's
        self.argv = [str(a) for a in args] if isinstance(args, list | tuple) else sys.argv[1:]
        super().parse_arguments(parser, args)

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
        # sampler into it (it would fail under DDP): for every command
        config.trainer.use_distributed_sampler = False
        check_world_size(config.trainer)
        if any(lg.class_path.endswith(".TensorBoardLogger") for lg in loggers(config)):
            require("tensorboard", "the TensorBoard logger (configs/logger/tensorboard.yaml)")
        if self.subcommand in ("fit", None):
            apply_run_name(config, config.run)
            without_validation(config)
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
            self.model.restore(self.checkpoint, self.checkpoint_path)
            self.checkpoint = None  # the weights now live in the model
        config = self._command_config()
        if self.subcommand == "fit" and config.get("ckpt_path"):
            # found as Lightning will look for it, before rank 0's folders are broadcast
            resumed = resume_path(config.ckpt_path, self.trainer)
            if resumed is not None:  # Lightning's strict load would end in a traceback
                check_fits(shown(str(resumed)), self.model)
            # every rank resumes from the same checkpoint, or none starts
            self.trainer.callbacks.append(SameResume(config.ckpt_path, resumed))
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
        use_stderr_progress_bar(trainer)
        if any(isinstance(lg, TensorBoardLogger) for lg in trainer.loggers) and not any(
            isinstance(c, TensorBoardExtras) for c in trainer.callbacks
        ):
            trainer.callbacks.append(TensorBoardExtras())
        if self.subcommand == "fit":  # the model card's per-type dev scores
            trainer.callbacks.append(ValidationHistory())
        if self.subcommand == "predict":
            config = self.config["predict"]
            fmt = config.get("format") or "jsonl"
            writer = PredictionFileWriter(self.datamodule, config.get("output"), fmt)
            trainer.callbacks.append(writer)
        return trainer

    def predict(self, model, datamodule, **kwargs: Any) -> None:
        """`ner predict`: the input in parts of `PREDICT_PART` lines, one `trainer.predict` a
        part, appended to one output, so memory stays flat in the input's length. A run
        limited to some batches takes the input as one part: the limit counts over it all."""
        trainer = self.trainer
        limit = trainer.limit_predict_batches
        limited = trainer.fast_dev_run or isinstance(limit, int) or limit < 1.0
        writer = next(c for c in trainer.callbacks if isinstance(c, PredictionFileWriter))
        with writer.opened():
            for _ in datamodule.predict_parts(None if limited else PREDICT_PART):
                trainer.predict(model, datamodule=datamodule, **kwargs)

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(fit_line(self.trainer))
            write_fit_card(self, self._command_config())

    def after_test(self) -> None:
        if self.model.test_report is None or not self.trainer.is_global_zero:
            return
        config = self.config["test"]
        fmt = config.get("format") or "text"
        if fmt not in TEST_FORMATS:
            raise NERError(f"ner test writes {' or '.join(TEST_FORMATS)}, not {fmt!r}", "--format")
        payload = test_report(self, self.checkpoint_path, config.get("output"), fmt)
        add_test_scores(self.checkpoint_path, payload, config)


def add_options(parser, command: str | None) -> None:
    """The options `ner` adds to a LightningCLI command (None: every command's, for configs)."""
    parser.add_argument("--run", type=str, default="ner",
                        help="fit: the run's name: checkpoints/RUN/ and runs/RUN/")  # fmt: skip
    output = {
        "predict": "the predictions file (default: stdout)",
        "test": "the folder of the report files (default: beside the checkpoint)",
    }
    formats = {"predict": "jsonl (default) or conll", "test": "text (default) or json"}
    if command in (None, "predict", "test"):
        parser.add_argument("--output", type=str | None, default=None,
                            help=output.get(command, " / ".join(output.values())))  # fmt: skip
        parser.add_argument("--format", type=str | None, default=None,
                            help=formats.get(command, " / ".join(formats.values())))  # fmt: skip
    if command in (None, *CKPT_SUBCOMMANDS):
        parser.add_argument("--backend", type=str, default="torch",
                            help="the forward pass: torch or onnx (ONNX Runtime, CPU)")  # fmt: skip
        parser.add_argument("--quantize", type=str | None, default=None,
                            help="int8: linear layers in int8 (or none)")  # fmt: skip


def without_validation(config: Namespace) -> None:
    """A fit that validates nothing (`--trainer.limit_val_batches 0`) keeps `last.ckpt` and
    drops what watches `val/f1` (the best checkpoint, early stopping), saying so."""
    if config.trainer.get("limit_val_batches") not in (0, 0.0):
        return
    callbacks = config.trainer.get("callbacks") or []
    kept = [c for c in callbacks if not _watches_val_f1(c)]
    if len(kept) < len(callbacks):
        say("no validation (limit_val_batches 0): no best.ckpt, no early stopping")
    config.trainer.callbacks = kept


@rank_zero_only
def say(message: str) -> None:
    """A note for the user on stderr, once however many processes run."""
    print(message, file=sys.stderr)


def _watches_val_f1(callback: Any) -> bool:
    init_args = callback.get("init_args") if isinstance(callback, Namespace) else None
    return init_args is not None and init_args.get("monitor") == "val/f1"


def run_lightning(args: list[str] | None, run: bool = True) -> NERCLI:
    """Parse `args` and run a LightningCLI subcommand; returns the CLI (model, datamodule, ...).

    With `run=False`, `args` hold no subcommand and the classes are only instantiated.
    """
    parser_kwargs: dict[str, Any] = {"exit_on_error": False, "description": usage()}
    if run:
        parser_kwargs.update(
            {c: {"exit_on_error": False, "description": summary(c)} for c in SUBCOMMANDS}
        )
    try:
        return NERCLI(
            NERTagger,
            NERDataModule,
            args=args,
            run=run,
            save_config_kwargs={"overwrite": True},
            # errors come back as exceptions, which `ner.cli.main.main` prints as one line
            parser_kwargs=parser_kwargs,
        )
    finally:
        end_process_group()  # whatever happened: a process group left to exit may abort it


def cli_for(args: list[str]) -> NERCLI:
    """Instantiate model, data and trainer from `args` without running anything (config tests)."""
    return run_lightning(args, run=False)


def main(argv: list[str] | None) -> int:
    """`ner fit|validate|test|predict ...` (None: LightningCLI reads sys.argv itself)."""
    run_lightning(argv)
    return 0
