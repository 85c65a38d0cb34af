"""`CompileEncoder`: the compiled encoder computes what the eager one does, a fit with it writes a
checkpoint that loads strictly (`Module.compile` keeps the parameter names)."""

from __future__ import annotations

import torch
from test_cli import fit_config
from test_export import LABELS, SENTENCES

from ner.callbacks import CompileEncoder
from ner.commands.lightning import run_lightning
from ner.inference import map_batches
from ner.tagger import NERTagger, load_tagger


def test_the_compiled_encoder_gives_the_eager_emissions(tiny_model_dir):
    torch.manual_seed(0)
    model = NERTagger(encoder=str(tiny_model_dir), labels=LABELS).eval()
    batches = []
    list(map_batches(model, lambda b: batches.append(b) or [None] * len(b["sent_id"]), SENTENCES))
    with torch.no_grad():
        eager = model(batches[0])
        CompileEncoder().on_fit_start(None, model)
        compiled = model(batches[0])
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
