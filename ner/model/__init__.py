"""The LightningModule that joins the parts (`NERTagger`), its self-contained checkpoints, the
optimiser, and the callbacks of training (checkpoints, resume, summaries)."""
