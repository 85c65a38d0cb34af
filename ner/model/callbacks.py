"""Lightning callbacks of the `ner` commands."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

import torch.distributed as dist
from pytorch_lightning.callbacks import (
    BasePredictionWriter,
    Callback,
    RichProgressBar,
    TQDMProgressBar,
)
from pytorch_lightning.utilities import rank_zero_info
from pytorch_lightning.utilities.model_summary import get_human_readable_count

from ner.corpus.outputs import check_format, open_output, write_predictions, write_predictions_to
from ner.corpus.reader import subset
from ner.modules.encoder import depth


def _on_stderr(init: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # Lightning's bars are made with `file=sys.stdout`, read when the bar is made
    def made_on_stderr(self) -> Any:
        with contextlib.redirect_stdout(sys.stderr):
            return init(self)

    return made_on_stderr


class ProgressBar(TQDMProgressBar):
    """Lightning's tqdm bars on stderr, so that stdout carries only data and reports, and
    without the logger's version number (`v_num`), which says nothing about the run."""

    init_sanity_tqdm = _on_stderr(TQDMProgressBar.init_sanity_tqdm)
    init_train_tqdm = _on_stderr(TQDMProgressBar.init_train_tqdm)
    init_validation_tqdm = _on_stderr(TQDMProgressBar.init_validation_tqdm)
    init_test_tqdm = _on_stderr(TQDMProgressBar.init_test_tqdm)
    init_predict_tqdm = _on_stderr(TQDMProgressBar.init_predict_tqdm)

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics


def use_stderr_progress_bar(trainer) -> None:
    """Swap the trainer's default bar (tqdm, or rich where it is installed, both on stdout)
    for `ProgressBar`; a bar of the user's own stays."""
    for i, callback in enumerate(trainer.callbacks):
        if type(callback) in (TQDMProgressBar, RichProgressBar):
            trainer.callbacks[i] = ProgressBar(callback.refresh_rate)


class PredictionFileWriter(BasePredictionWriter):
    """`ner predict --output OUT`: gathers every rank's predictions and writes them on global
    zero, in input order, through the writer `ner tag` uses. Inside `opened()`, each predict
    run (a part of the input) is appended to one output that appears whole at the end; outside
    it, each run writes the output whole. A run limited to some batches
    (`--trainer.limit_predict_batches`, `fast_dev_run`) writes what it tagged and says so."""

    def __init__(self, datamodule, output: str | None, fmt: str = "jsonl"):
        super().__init__(write_interval="epoch")
        self.datamodule, self.output, self.fmt = datamodule, output, check_format(fmt)
        self.sink: IO[str] | None = None
        self._stack: contextlib.ExitStack | None = None

    @contextlib.contextmanager
    def opened(self) -> Iterator[None]:
        """Append every predict run inside the block to one output, opened by the first write
        (only then is it known which rank is global zero) and renamed into place when the block
        ends without error."""
        with contextlib.ExitStack() as stack:
            self._stack = stack
            try:
                yield
            finally:
                self._stack, self.sink = None, None

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        rows = [row for batch in predictions for row in batch]
        rows += pl_module.held_predictions()  # decoded by documents now, with consistency
        if dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, rows)
            rows = [row for part in gathered for row in part]
        if not trainer.is_global_zero:
            return
        by_id = {row["sent_id"]: (row["tags"], row["scores"]) for row in rows}
        inp = self.datamodule.predict_input
        done = sorted(by_id)
        passages, corpus = inp.passages, inp.corpus
        if len(done) < len(passages):
            print(
                f"partial run: tagged {len(done):,} of {len(passages):,} passages (a "
                "--trainer.limit_* option or fast_dev_run); the output holds those only",
                file=sys.stderr,
            )
            passages = [passages[i] for i in done]
            corpus = None if corpus is None else subset(corpus, done)
        tagged = [by_id[i] for i in done]
        if self._stack is None:
            write_predictions(passages, tagged, self.fmt, self.output, corpus, inp.name)
            return
        if self.sink is None:
            self.sink = self._stack.enter_context(open_output(self.output))
        write_predictions_to(self.sink, passages, tagged, self.fmt, corpus)


def layers_shown(encoder) -> str:
    """`6`, or `4 of 6` when the layers above the deepest one read are dropped."""
    kept, total = depth(encoder), encoder.config.num_hidden_layers
    return str(total) if kept == total else f"{kept} of {total}"


def describe(model) -> str:
    """One line: a tagger's pipeline parts and parameter counts."""
    config = model.encoder.config
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    parts = [
        f"{type(model.encoder).__name__} ({layers_shown(model.encoder)} x {config.hidden_size})",
        type(model.combiner).__name__,
        f"{model.pooling.mode} piece",
        type(model.head).__name__ + (" + CRF" if model.head.crf else ""),
    ]
    if model.word_features is not None:
        parts.insert(3, f"+ word features ({model.word_features.output_dim()})")
    count = get_human_readable_count
    return f"{' -> '.join(parts)}: {count(total)} parameters, {count(trainable)} trained"


class PipelineSummary(Callback):
    """At the start of training, one line on the model (instead of Lightning's summary table,
    whose FLOP count reads 0 for this model and whose size estimate ignores bf16)."""

    def on_fit_start(self, trainer, pl_module) -> None:
        rank_zero_info(f"model: {describe(pl_module)}")


class CompileEncoder(Callback):
    """`torch.compile` the encoder when training starts; opt-in, e.g.
    `--trainer.callbacks+=ner.model.callbacks.CompileEncoder`. The length buckets give many
    shapes, so the graph is compiled with dynamic shapes; the first steps pay the compilation
    (docs/performance.md: what it bought, and cost).

    Args:
        dynamic: compile for symbolic batch and length sizes (False: one graph per shape).
        backend: the `torch.compile` backend (`inductor`, or any registered one).
    """

    def __init__(self, dynamic: bool = True, backend: str = "inductor"):
        self.dynamic, self.backend = dynamic, backend

    def on_fit_start(self, trainer, pl_module) -> None:
        pl_module.encoder.compile(dynamic=self.dynamic, backend=self.backend)


class ValidationHistory(Callback):
    """The `val/*` scores of every validation of a fit (`val/f1_PER`, ..., without `val/`),
    kept in `last.ckpt` so a resumed fit has them too: `best.ckpt` holds no callback state,
    and the model card shows the per-type dev scores of the validation that made it."""

    def __init__(self) -> None:
        self.history: list[dict[str, float]] = []

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return  # a few batches, scored before training: no checkpoint comes of them
        metrics = trainer.callback_metrics
        scores = {k[4:]: float(v) for k, v in metrics.items() if k.startswith("val/")}
        if scores:
            self.history.append({**scores, "epoch": trainer.current_epoch,
                                 "step": trainer.global_step})  # fmt: skip

    def scores_of(self, monitor: str, value: float) -> dict[str, float] | None:
        """The first validation whose `monitor` (`val/f1`) read `value`: the one a
        checkpoint callback kept (it keeps a strictly better score only); None if none."""
        key = monitor.removeprefix("val/")
        return next((h for h in self.history if h.get(key) == value), None)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict.get("history", []))
