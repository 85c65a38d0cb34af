"""Empty input is input: a text with no words (empty, spaces, line breaks) gets `"entities": []`
on every path, as an empty line inside a file does, and every module takes a batch of zero
words. A request that cannot be tagged fails alone, never the requests pooled with it."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from helpers import LABELS, decisive, run_ner, tiny_tagger_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ner.inference.backends import accelerate
from ner.inference.ensemble import Ensemble
from ner.inference.routine import iter_tags
from ner.model import checkpoint
from ner.model.tagger import NERTagger
from ner.modules.combiners import (
    ConcatLayers,
    LastLayer,
    MeanLayers,
    ScalarMix,
    SingleLayer,
    SumLayers,
)
from ner.modules.heads import BiLSTMHead, LinearHead
from ner.modules.pooling import MODES
from ner.modules.word_features import WordFeatures
from ner.serving.api import tag_requests
from ner.serving.batcher import TaggingAPI

EMPTY = ["", " ", "   ", "\n", "\t \r\n", "\u00a0\u2028"]
REAL = "john smith visited paris and berlin with mary ."


@pytest.fixture(scope="module")
def model(tiny_model_dir) -> NERTagger:
    """Every part that could meet zero words: CRF head, casing and character features."""
    tagger, _ = tiny_tagger_batch(tiny_model_dir, seed=3)
    tagger.consistency = 1.0
    return decisive(tagger, 3)


@pytest.fixture(scope="module")
def ckpt(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("empty") / "model.ckpt"
    torch.save({"state_dict": model.state_dict(), "ner": checkpoint.pack(model)}, path)
    return path


def test_empty_texts_get_no_entities_alone_and_beside_real_ones(model):
    assert model.predict(EMPTY) == [[] for _ in EMPTY]
    mixed = model.predict(["", REAL, "  "])
    assert mixed[0] == mixed[2] == []
    assert mixed[1] == model.predict([REAL])[0] and mixed[1]  # the real one is tagged as alone
    assert model.predict([]) == []


def test_documents_of_empty_sentences_decode_with_consistency(model):
    tagged = list(iter_tags(model, [[], [], []], doc_ids=[0, 0, 1], consistency=1.0))
    assert tagged == [([], []), ([], []), ([], [])]
    real = REAL.split()
    together = list(iter_tags(model, [[], real, []], doc_ids=[0, 0, 0], consistency=1.0))
    assert together[1] == next(iter_tags(model, [real], doc_ids=[0], consistency=1.0))


COMBINERS = [LastLayer(), SingleLayer(1), SumLayers(), MeanLayers(), ConcatLayers(), ScalarMix()]
HEADS = [LinearHead(), LinearHead(crf=True), BiLSTMHead(hidden_size=8)]


@pytest.mark.parametrize("combiner", COMBINERS, ids=lambda c: type(c).__name__)
@pytest.mark.parametrize("head", HEADS, ids=["linear", "crf", "bilstm"])
def test_every_combiner_and_head_takes_a_batch_of_zero_words(tiny_model_dir, combiner, head):
    tagger = NERTagger(
        encoder=str(tiny_model_dir), labels=LABELS, combiner=copy.deepcopy(combiner),
        head=copy.deepcopy(head), word_features=WordFeatures(casing_dim=4, char_dim=8),
    ).eval()  # fmt: skip
    assert tagger.predict(["", "\n"]) == [[], []]
    tagged = list(iter_tags(tagger, [[]]))
    assert tagged == [([], [])]


@pytest.mark.parametrize("mode", MODES)
def test_every_pooling_mode_takes_zero_words(mode):
    from ner.modules.pooling import WordPooling

    pooling = WordPooling(mode)
    pieces = torch.randn(2, 2, 3)  # [R, P, D]: [CLS] [SEP] of two empty texts
    vectors = pooling.words(pieces, {"piece_word": torch.full((2, 2), -1),
                                     "word_mask": torch.zeros(2, 0, dtype=torch.bool)})  # fmt: skip
    assert vectors.shape == (2, 0, pooling.output_dim(3))


def test_word_features_take_zero_words_and_zero_bytes():
    features = WordFeatures(casing_dim=4, char_dim=8, char_filters=5)
    for chars in (torch.zeros(3, 0, 0, dtype=torch.long), torch.zeros(1, 2, 0, dtype=torch.long)):
        sentences, words, _ = chars.shape
        batch = {"word_shape": torch.zeros(sentences, words, dtype=torch.long),
                 "word_chars": chars}  # fmt: skip
        assert features(batch).shape == (sentences, words, 9)


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8", "torchao-int8"])
def test_backends_tag_empty_texts(model, backend, tmp_path):
    fast = copy.deepcopy(model)
    if backend == "torchao-int8":
        fast = accelerate(fast, "torch", "int8")
    else:
        fast = accelerate(fast, "onnx", "int8" if backend == "onnx-int8" else None, tmp_path)
    assert fast.predict(EMPTY) == [[] for _ in EMPTY]
    assert fast.predict(["", REAL])[0] == []


def test_an_ensemble_tags_empty_texts(tiny_model_dir, model):
    other, _ = tiny_tagger_batch(tiny_model_dir, seed=4)
    ensemble = Ensemble([model, decisive(other, 4)]).eval()
    assert ensemble.predict(["", " \n", REAL])[:2] == [[], []]


def test_ner_tag_on_input_of_only_empty_lines(ckpt, tmp_path, capsys, monkeypatch):
    import io

    for data in ("\n\n", " \n\t\n\n", "\n"):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
        code, out, err = run_ner(["tag", str(ckpt), "-"], capsys)
        assert code == 0, err
        records = [json.loads(line) for line in out.splitlines()]
        assert [r["text"] for r in records] == data.split("\n")[:-1]
        assert all(r["entities"] == [] for r in records)


def test_ner_predict_on_empty_lines(ckpt, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text(f"\n   \n{REAL}\n\n")
    out = tmp_path / "out.jsonl"
    code, _, err = run_ner(["predict", "--ckpt_path", str(ckpt), "--data.predict_file",
                            str(source), "--trainer.enable_progress_bar", "false",
                            "--output", str(out)], capsys)  # fmt: skip
    assert code == 0, err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text"] for r in records] == ["", "   ", REAL, ""]
    assert [r["entities"] == [] for r in records] == [True, True, False, True]


def request(*items: str) -> dict:
    return {"items": list(items), "word_tags": False}


def test_server_requests_of_empty_texts_are_answered(model):
    answers = tag_requests(model, [request(""), request("   ", "\n"), request(REAL)])
    assert [[r["entities"] for r in a["results"]] for a in answers[:2]] == [[[]], [[], []]]
    assert answers[2]["results"][0]["entities"] == model.predict([REAL])[0]


class Failing:
    """A tagger that fails on any batch holding a word `boom`: a request that cannot be tagged."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, batch):
        if (batch["input_ids"] == self.model.tokenizer.convert_tokens_to_ids("b")).any():
            raise RuntimeError("a bug met in the network")
        return self.model(batch)


def test_a_request_that_fails_fails_alone(model):
    api = TaggingAPI(lambda: None)
    api.model = Failing(model)
    answers = api.predict([request(REAL), request("boom boom"), request("", REAL)])
    assert answers[0]["results"][0]["entities"] == model.predict([REAL])[0]
    assert answers[1] == {"error": "could not tag this request (RuntimeError: a bug met in the "
                                   "network)", "status": 500}  # fmt: skip
    assert [r["entities"] for r in answers[2]["results"]] == [[], model.predict([REAL])[0]]


@pytest.fixture(scope="module")
def app(ckpt):
    """`ner serve`'s app in-process on the checkpoint with character features, one worker."""
    from serving import served

    with served(ckpt) as client:
        yield client


def test_the_server_answers_empty_texts_alone_and_in_a_burst(app, model):
    assert app.post(json={"text": ""}).json()["results"] == [{"text": "", "entities": []}]
    both = app.post(json={"texts": ["   ", "\n"]})
    assert both.status_code == 200
    assert [r["entities"] for r in both.json()["results"]] == [[], []]
    bodies = [{"text": "" if i % 3 else REAL} for i in range(60)]  # empty ones pooled with real
    answers = app.post_many(bodies)
    assert [a.status_code for a in answers] == [200] * len(bodies)
    real = app.post(json={"text": REAL}).json()["results"][0]["entities"]
    assert real
    for body, answer in zip(bodies, answers, strict=True):
        assert answer.json()["results"][0]["entities"] == ([] if not body["text"] else real)


# texts with no control characters but those the splitter takes for whitespace: empty, spaces,
# any Unicode (what `check_text` refuses is tested in test_serve)
TEXTS = st.one_of(
    st.sampled_from(EMPTY),
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40),
    st.lists(st.sampled_from(["", " ", "\t", "\n", "paris", "john", "😀", "é"]), max_size=8).map(
        "".join
    ),
)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(batch=st.lists(st.lists(TEXTS, min_size=0, max_size=3), min_size=1, max_size=4))
def test_any_text_gets_an_answer_never_a_500(app, batch):
    answers = app.post_many([{"texts": texts} for texts in batch])
    for texts, answer in zip(batch, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert [r["text"] for r in answer.json()["results"]] == texts
