"""The CUDA path on a GPU: marked `gpu`, deselected by default (pyproject's addopts) and run by
`pytest -m gpu` (scripts/gpu_check.sh) on a machine with CUDA; there a missing CUDA is a failure.
The CUDA branches that can run on CPU are tested elsewhere (test_precision's automatic
precision with a mocked CUDA)."""

from __future__ import annotations

import pytest
import torch

from ner.model.tagger import NERTagger

pytestmark = pytest.mark.gpu


def test_tagger_on_cuda_tags_as_on_cpu(tiny_model_dir):
    torch.manual_seed(0)
    tagger = NERTagger(encoder=str(tiny_model_dir), labels=["O", "B-PER", "I-PER"]).eval()
    texts = ["john smith visited paris", "the bank", ""]
    on_cpu = tagger.predict(texts)
    on_gpu = tagger.to("cuda").predict(texts)
    assert [[e["text"] for e in r] for r in on_gpu] == [[e["text"] for e in r] for r in on_cpu]


def test_fit_on_cuda_in_bf16(tmp_path, tiny_model_dir, tiny_corpus_dir, monkeypatch):
    from ner.cli.lightning import CONFIGS_DIR, run_lightning

    monkeypatch.chdir(tmp_path)
    cli = run_lightning(
        ["fit", "-c", str(CONFIGS_DIR / "trainer.yaml"), "--model.encoder", str(tiny_model_dir),
         "--data.data_dir", str(tiny_corpus_dir), "--trainer.max_epochs", "1",
         "--trainer.accelerator", "gpu", "--trainer.devices", "1",
         "--trainer.enable_progress_bar", "false"]
    )  # fmt: skip
    assert cli.trainer.precision in ("bf16-mixed", "16-mixed")
    assert next(cli.model.parameters()).device.type == "cuda"
    assert (tmp_path / "checkpoints" / "ner" / "best.ckpt").is_file()
