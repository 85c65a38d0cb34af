"""`CompileEncoder`: the compiled encoder computes what the eager one does, a fit with it runs
the compiled graph and writes a checkpoint that loads strictly (`Module.compile` keeps the
parameter names)."""

from __future__ import annotations

import torch
from helpers import LABELS, fit_config
from torch._dynamo import register_backend  # the documented way to add a compile backend

from ner.cli.lightning import run_lightning
from ner.inference.export import sample_batch
from ner.model.callbacks import CompileEncoder
from ner.model.tagger import NERTagger, load_tagger

CAPTURED: list[torch.fx.GraphModule] = []


@register_backend(name="ner_test_recorder")
def recorder(graph: torch.fx.GraphModule, example_inputs):
    """A compile backend that keeps each graph dynamo captured and runs it as it is."""
    CAPTURED.append(graph)
    return graph.forward


def test_the_compiled_encoder_gives_the_eager_emissions(tiny_model_dir):
    torch.manual_seed(0)
    model = NERTagger(encoder=str(tiny_model_dir), labels=LABELS).eval()
    batch = sample_batch(model)  # the inference routine's own batch
    with torch.no_grad():
        eager = model(batch)
        CompileEncoder().on_fit_start(None, model)  # inductor: other kernels, fp32 rounding
        compiled = model(batch)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)


def test_the_encoder_runs_as_the_graph_the_backend_was_given(tiny_model_dir):
    torch.manual_seed(0)
    model = NERTagger(encoder=str(tiny_model_dir), labels=LABELS).eval()
    batch = sample_batch(model)
    CAPTURED.clear()
    with torch.no_grad():
        eager = model(batch)
        CompileEncoder(backend="ner_test_recorder").on_fit_start(None, model)
        compiled = model(batch)
    assert CAPTURED, "the forward pass did not go through torch.compile"
    assert torch.equal(compiled, eager)  # the recorder runs the captured ops as they are


def test_a_fit_with_it_writes_a_checkpoint_that_loads(tmp_path, tiny_model_dir, tiny_corpus_dir):
    config = fit_config(tmp_path, tiny_model_dir, tiny_corpus_dir)
    CAPTURED.clear()
    cli = run_lightning(
        ["fit", "-c", str(config), "--trainer.max_steps", "3",
         "--trainer.callbacks+=ner.model.callbacks.CompileEncoder",
         "--trainer.callbacks.backend", "ner_test_recorder"]
    )  # fmt: skip
    assert CAPTURED, "training did not run the compiled encoder"
    loaded = load_tagger(tmp_path / "ckpt" / "last.ckpt")  # strict: the names are the eager ones
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, cli.model.state_dict()[name])
