"""`CompileEncoder`: the compiled encoder computes what the eager one does, a fit with it writes a
checkpoint that loads strictly (`Module.compile` keeps the parameter names)."""

from __future__ import annotations

import torch
from test_cli import fit_config
from test_export import LABELS

from ner.callbacks import CompileEncoder
from ner.commands.lightning import run_lightning
from ner.export import sample_batch
from ner.tagger import NERTagger, load_tagger


def test_the_compiled_encoder_gives_the_eager_emissions(tiny_model_dir):
    torch.manual_seed(0)
    model = NERTagger(encoder=str(tiny_model_dir), labels=LABELS).eval()
    batch = sample_batch(model)  # the inference routine's own batch
    with torch.no_grad():
        eager = model(batch)
        CompileEncoder().on_fit_start(None, model)
        compiled = model(batch)
    assert model.encoder._compiled_call_impl is not None
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)


def test_a_fit_with_it_writes_a_checkpoint_that_loads(tmp_path, tiny_model_dir, tiny_corpus_dir):
    config = fit_config(tmp_path, tiny_model_dir, tiny_corpus_dir)
    cli = run_lightning(
        ["fit", "-c", str(config), "--trainer.max_steps", "3",
         "--trainer.callbacks+=ner.callbacks.CompileEncoder"]
    )  # fmt: skip
    assert cli.model.encoder._compiled_call_impl is not None
    loaded = load_tagger(tmp_path / "ckpt" / "last.ckpt")  # strict: the names are the eager ones
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, cli.model.state_dict()[name])
