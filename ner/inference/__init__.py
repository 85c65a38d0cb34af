"""Batches in, tags out: THE inference routine (typed on a small protocol, not on the
LightningModule), faster backends (ONNX Runtime, int8) and the ONNX export."""
