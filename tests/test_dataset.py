"""The datasets layer: CoNLL / save_to_disk / parquet give the same columns; the map is cached."""

from __future__ import annotations

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value
from helpers import align_sentences, hub_rows, tiny_sentences, write_tiny_corpus

import ner.data.dataset as nd
from ner.corpus.reader import read_conll
from ner.data.windows import WindowSettings
from ner.utils.errors import NERError

LABELS = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


@pytest.fixture
def sources(tmp_path):
    """One corpus three ways: a CoNLL file, a save_to_disk DatasetDict, a parquet file."""
    sentences = tiny_sentences(12, seed=4)
    conll = write_tiny_corpus(tmp_path / "train.txt", sentences, docs=3)
    rows = hub_rows(sentences, docs=3)
    DatasetDict({"train": rows, "validation": rows.select(range(5))}).save_to_disk(
        tmp_path / "disk"
    )
    rows.to_parquet(tmp_path / "train.parquet")
    return {"conll": conll, "disk": tmp_path / "disk", "parquet": tmp_path / "train.parquet"}


def test_corpus_to_dataset_columns(sources):
    corpus = read_conll(str(sources["conll"]))
    data = nd.corpus_to_dataset(corpus, LABELS)
    assert data.column_names == ["tokens", "ner_tags", "doc_id", "sent_id"]
    assert data["sent_id"] == list(range(12))
    assert data["doc_id"] == [0] * 4 + [1] * 4 + [2] * 4
    first = corpus.sentences[0]
    assert data[0]["tokens"] == first.words
    assert data[0]["ner_tags"] == [LABELS.index(t) for t in first.tags]
    assert nd.corpus_to_dataset(corpus, None)[0]["ner_tags"] == [-100] * len(first.words)


def test_a_file_without_docstart_has_a_document_a_sentence(tmp_path):
    """Regression: a file without -DOCSTART- lines was one running document, so each tweet of a
    tweet corpus was encoded with its unrelated neighbours as context."""
    sentences = tiny_sentences(5, seed=1)
    plain = read_conll(str(write_tiny_corpus(tmp_path / "plain.txt", sentences, docs=0)))
    assert len(plain.documents) == 1 and plain.doc_ids == [0, 1, 2, 3, 4]
    assert nd.corpus_to_dataset(plain, LABELS)["doc_id"] == [0, 1, 2, 3, 4]
    marked = read_conll(str(write_tiny_corpus(tmp_path / "marked.txt", sentences, docs=1)))
    assert marked.doc_ids == [0] * 5


def test_hub_sources_match_the_conll_file(sources):
    expected = nd.corpus_to_dataset(read_conll(str(sources["conll"])), LABELS).to_dict()
    for source in ("disk", "parquet"):
        assert nd.hub_labels(str(sources[source])) == LABELS
        assert nd.load_hub(str(sources[source]), "train", LABELS).to_dict() == expected
    validation = nd.load_hub(str(sources["disk"]), "validation", LABELS)
    assert validation["tokens"] == expected["tokens"][:4]  # 5 rows minus one -DOCSTART-


def test_hub_without_docstart_makes_each_row_a_document_and_bioes_becomes_iob2(tmp_path):
    names = ["O", "S-PER", "B-LOC", "E-LOC"]
    features = Features(
        {"tokens": List(Value("string")), "ner_tags": List(ClassLabel(names=names))}
    )
    rows = {
        "tokens": [["john", "in", "new", "york"], [], ["mary"]],
        "ner_tags": [[1, 0, 2, 3], [], [1]],
    }
    Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "one")
    data = nd.load_hub(str(tmp_path / "one"), "train", LABELS)
    # no -DOCSTART-: nothing says the rows belong together (regression: they were one document)
    assert data["doc_id"] == [0, 1] and data["sent_id"] == [0, 1]  # the empty row is dropped
    assert data["ner_tags"] == [[5, 0, 1, 2], [5]]


def test_hub_tag_outside_the_labels(sources):
    with pytest.raises(NERError) as err:
        nd.load_hub(str(sources["disk"]), "train", ["O", "B-PER", "I-PER"])
    assert str(err.value).startswith(f"{sources['disk']}[train]: sentence 0: tag ")
    assert str(err.value).endswith("is not in the training label set [O, B-PER, I-PER]")
    with pytest.raises(NERError, match="no split 'test'"):
        nd.load_hub(str(sources["disk"]), "test", LABELS)


def test_tokenized_rows_are_the_alignment_routine(sources, tiny_tokenizer):
    corpus = read_conll(str(sources["conll"]))
    data = nd.tokenize_dataset(
        nd.corpus_to_dataset(corpus, LABELS), tiny_tokenizer, WindowSettings(12, 4, 3)
    )
    documents = [[s.words for s in doc.sentences] for doc in corpus.documents]
    aligned, zero = align_sentences(tiny_tokenizer, documents, 12, 4, 3)
    flat = [a for doc in aligned for a in doc]
    assert data["input_ids"] == [a.input_ids for a in flat]
    assert data["piece_word"] == [a.piece_word for a in flat]
    assert data["num_pieces"] == [a.num_pieces for a in flat]
    assert sum(data["zero_piece_words"]) == zero == 0


def test_map_is_cached_and_settings_change_the_fingerprint(
    sources, tiny_tokenizer, tmp_path, monkeypatch
):
    calls = []
    align = nd._align_batch

    def counting(batch, **kwargs):
        calls.append(len(batch["tokens"]))
        return align(batch, **kwargs)

    monkeypatch.setattr(nd, "_align_batch", counting)
    cache = str(tmp_path / "cache")

    def run(stride, context=0, source="conll"):
        calls.clear()
        if source == "conll":
            data = nd.corpus_to_dataset(read_conll(str(sources["conll"])), LABELS)
        else:
            data = nd.load_hub(str(sources[source]), "train", LABELS)
        out = nd.tokenize_dataset(data, tiny_tokenizer, WindowSettings(16, stride, context), cache)
        return out.cache_files[0]["filename"], sum(calls)

    first, n = run(4)
    assert n == 12
    assert run(4) == (first, 0)  # a fresh read of the same file hits the cache
    assert run(4, source="parquet") == (first, 0)  # same rows, same fingerprint
    second, n = run(5)
    assert second != first and n == 12
    third, n = run(4, context=2)
    assert third not in (first, second) and calls == [12]  # context: one batch, whole documents


def test_tokenizer_fingerprint_ignores_per_call_state(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.backend_tokenizer.enable_truncation(128)  # as the bundled MiniLM file ships
    before = nd.tokenizer_fingerprint(tokenizer)
    tokenizer([["john"]], is_split_into_words=True)  # transformers resets truncation here
    assert nd.tokenizer_fingerprint(tokenizer) == before
    tokenizer.add_tokens(["zzz"])
    assert nd.tokenizer_fingerprint(tokenizer) != before
