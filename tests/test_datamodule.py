"""NERDataModule: labels, label checks, collate, length buckets, piece budget, seeds, DDP split."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_sentences, write_tiny_corpus

import ner.data.splits as splits
from ner.data.batching import LengthBucketSampler, batches_by_length, collate
from ner.data.datamodule import NERDataModule
from ner.utils.errors import NERError

LABELS = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """eng.train (60 sentences, some long), eng.testa, eng.testb, in 3 documents each."""
    directory = tmp_path_factory.mktemp("dm-corpus")
    train = tiny_sentences(60, seed=2)
    for i in range(0, 60, 7):  # long sentences: several windows at max_length 16
        train[i] = train[i] * 4
    train[5] = [("\u200b", "O"), *train[5]]  # a zero-piece word
    write_tiny_corpus(directory / "eng.train", train, docs=3)
    write_tiny_corpus(directory / "eng.testa", tiny_sentences(15, seed=3), docs=3)
    write_tiny_corpus(directory / "eng.testb", tiny_sentences(15, seed=4), docs=3)
    return directory


def make(corpus_dir, model_dir, tmp_path, **kwargs) -> NERDataModule:
    kwargs = {"tokenizer": str(model_dir), "cache_dir": str(tmp_path / "cache"), **kwargs}
    return NERDataModule(data_dir=str(corpus_dir), **kwargs)


def test_labels_from_training_data_right_after_init(corpus_dir, tiny_model_dir, tmp_path):
    data = make(corpus_dir, tiny_model_dir, tmp_path)
    assert data.labels == LABELS
    assert data.scheme_of_train == "IOB2" and data.files["val"].endswith("eng.testa")
    data.set_labels(["O", "B-X", "I-X"])
    assert data.labels == ["O", "B-X", "I-X"]


def test_batches_are_padded_to_the_batch_max(corpus_dir, tiny_model_dir, tmp_path):
    data = make(corpus_dir, tiny_model_dir, tmp_path, max_length=16, batch_size=8)
    data.setup("fit")
    assert data.num_zero_piece_words == 1
    rows = data.datasets["train"]
    seen = []
    for batch in data.train_dataloader():
        ids = batch["sent_id"].tolist()
        seen += ids
        B, W = batch["labels"].shape
        windows = [w for i in ids for w in rows[i]["input_ids"]]
        assert batch["input_ids"].shape == (len(windows), max(map(len, windows)))  # [R, P]
        assert W == max(len(rows[i]["tokens"]) for i in ids) and B == len(ids) <= 8
        assert batch["attention_mask"].sum(1).tolist() == [len(w) for w in windows]
        for b, i in enumerate(ids):
            n = len(rows[i]["tokens"])
            assert batch["labels"][b, :n].tolist() == rows[i]["ner_tags"]
            assert batch["word_mask"][b].tolist() == [True] * n + [False] * (W - n)
            assert (batch["labels"][b, n:] == -100).all()
            owned = batch["piece_word"][batch["piece_word"] // W == b] if n else torch.tensor([])
            assert sorted(set((owned % W).tolist())) == list(range(n))  # every word has a piece
        assert batch["input_ids"].dtype == batch["piece_word"].dtype == torch.long
        assert batch["word_mask"].dtype == torch.bool
    assert sorted(seen) == list(range(60))


def test_collate_exact():
    rows = [
        {
            "input_ids": [[2, 7, 8, 3]],
            "piece_word": [[-1, 0, 1, -1]],
            "ner_tags": [1, 0],
            "sent_id": 4,
        },
        {
            "input_ids": [[2, 9, 3], [2, 9, 5, 3]],
            "piece_word": [[-1, 0, -1], [-1, -1, 1, -1]],
            "ner_tags": [2, -100],
            "sent_id": 9,
        },
        {"input_ids": [[2, 6, 3]], "piece_word": [[-1, 0, -1]], "ner_tags": [0], "sent_id": 1},
    ]
    batch = collate(rows, pad_id=0)
    assert batch["input_ids"].tolist() == [[2, 7, 8, 3], [2, 9, 3, 0], [2, 9, 5, 3], [2, 6, 3, 0]]
    assert batch["attention_mask"].tolist() == [
        [1, 1, 1, 1],
        [1, 1, 1, 0],
        [1, 1, 1, 1],
        [1, 1, 1, 0],
    ]
    assert batch["piece_word"].tolist() == [
        [-1, 0, 1, -1],
        [-1, 2, -1, -1],
        [-1, -1, 3, -1],
        [-1, 4, -1, -1],
    ]
    assert batch["labels"].tolist() == [[1, 0], [2, -100], [0, -100]]
    assert batch["word_mask"].tolist() == [[True, True], [True, True], [True, False]]
    assert batch["sent_id"].tolist() == [4, 9, 1]


def test_piece_budget(corpus_dir, tiny_model_dir, tmp_path):
    data = make(corpus_dir, tiny_model_dir, tmp_path, max_length=16, max_pieces=64)
    data.setup("fit")
    sizes = []
    for loader in (data.train_dataloader(), data.val_dataloader()):
        for batch in loader:
            R, P = batch["input_ids"].shape
            assert R * P <= 64 or len(batch["sent_id"]) == 1
            sizes.append(len(batch["sent_id"]))
    assert max(sizes) > 1 and len(set(sizes)) > 1  # the budget, not a fixed count, cuts batches


def test_order_is_seeded_and_varies_per_epoch(corpus_dir, tiny_model_dir, tmp_path):
    def order(seed, epoch=0, split="train"):
        data = make(corpus_dir, tiny_model_dir, tmp_path, max_length=16, batch_size=4, seed=seed)
        data.setup("fit")
        loader = data.train_dataloader() if split == "train" else data.val_dataloader()
        loader.batch_sampler.sampler.set_epoch(epoch)  # the hook Lightning calls
        return [b["sent_id"].tolist() for b in loader]

    assert order(1) == order(1)
    assert order(1) != order(2) and order(1) != order(1, epoch=1)
    assert sorted(sum(order(1, epoch=1), [])) == list(range(60))
    val = order(1, split="val")
    assert val == order(2, split="val", epoch=3)  # evaluation: one fixed length order
    data = make(corpus_dir, tiny_model_dir, tmp_path, max_length=16)
    data.setup("validate")
    lengths = data.sampler("val").lengths
    flat = sum(val, [])
    assert [lengths[i] for i in flat] == sorted(lengths)


def test_batches_by_length():
    assert batches_by_length([5, 1, 3, 1, 9], batch_size=2) == [[1, 3], [2, 0], [4]]
    # padded pieces: rows x longest; the 9-piece sentence alone exceeds the budget and goes alone
    assert batches_by_length([5, 1, 3, 1, 9], None, 6, rows=[1, 1, 1, 2, 1]) == [
        [1, 3],
        [2],
        [0],
        [4],
    ]


def test_distributed_split(monkeypatch):
    lengths = [i % 7 + 1 for i in range(50)]
    everything = sorted(
        sum(LengthBucketSampler(lengths, [1] * 50, 4, shuffle=True, seed=3), []),
    )
    assert everything == list(range(50))
    for shuffle in (True, False):
        per_rank = []
        for rank in range(3):
            monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
            monkeypatch.setattr(torch.distributed, "get_rank", lambda r=rank: r)
            monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
            sampler = LengthBucketSampler(lengths, [1] * 50, 4, shuffle=shuffle, seed=3)
            per_rank.append(list(sampler))
            assert len(sampler) == len(per_rank[-1])
        counts = [len(r) for r in per_rank]  # 13 batches, padded to 15 by repeating 2
        assert counts == [5, 5, 5]
        repeated = [i for b in per_rank[1][-1:] + per_rank[2][-1:] for i in b]
        assert sorted(i for r in per_rank for b in r for i in b) == sorted([*range(50), *repeated])
    # regression: one evaluation batch for 2 ranks left rank 1 none, and Lightning stopped
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    for rank in range(2):
        monkeypatch.setattr(torch.distributed, "get_rank", lambda r=rank: r)
        assert list(LengthBucketSampler([3, 2, 1], [1, 1, 1], 64)) == [[2, 1, 0]]


def test_dev_tag_missing_from_training_fails_before_training(corpus_dir, tiny_model_dir, tmp_path):
    dev = tmp_path / "dev.txt"
    dev.write_text("-DOCSTART- O\n\njohn B-PER\nsaid O\n\nthe O\nun B-MISC\n", encoding="utf-8")
    data = make(corpus_dir, tiny_model_dir, tmp_path, val_file=str(dev))
    known = ", ".join(LABELS)
    message = f"{dev}:7: tag 'B-MISC' is not in the training label set [{known}]"
    with pytest.raises(NERError) as err:
        data.setup("fit")
    assert str(err.value) == message
    assert "train" not in data.datasets  # nothing tokenized yet
    # a bad test file fails at fit too
    data = make(corpus_dir, tiny_model_dir, tmp_path, test_file=str(dev))
    with pytest.raises(NERError, match="B-MISC"):
        data.setup("fit")


def test_context_and_predict_split(corpus_dir, tiny_model_dir, tmp_path):
    text = tmp_path / "input.txt"
    text.write_text("john visited paris\nthe bank\n", encoding="utf-8")
    data = make(corpus_dir, tiny_model_dir, tmp_path, context_pieces=4, predict_file=str(text))
    data.setup("fit")
    first, second = data.datasets["train"][0], data.datasets["train"][1]
    assert first["piece_word"][0][:2] == [-1, 0]  # a document's first sentence: no left context
    # [CLS] core right-context(4) [SEP]: the second sentence sees the first's last 4 pieces
    assert second["input_ids"][0][1:5] == first["input_ids"][0][-9:-5]
    assert second["piece_word"][0][1:5] == [-1] * 4 and second["piece_word"][0][5] == 0
    assert first["input_ids"][0][-5:-1] == second["input_ids"][0][5:9]
    data.setup("predict")
    batch = next(iter(data.predict_dataloader()))
    assert batch["sent_id"].tolist() == [1, 0]  # length order: "the bank" is shorter
    assert (batch["labels"] == -100).all() and batch["word_mask"].sum().item() == 5
    # text lines are separate documents: no context between them
    assert data.datasets["predict"]["piece_word"][0][0] == [-1, 0, 1, 2, -1]


def test_hub_datamodule(tmp_path, tiny_model_dir):
    from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value

    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    features = Features(
        {"tokens": List(Value("string")), "ner_tags": List(ClassLabel(names=names))}
    )
    rows = Dataset.from_dict(
        {"tokens": [["john", "in", "paris"], ["mary", "smith"]], "ner_tags": [[1, 0, 3], [1, 2]]},
        features=features,
    )
    DatasetDict({"train": rows, "validation": rows}).save_to_disk(tmp_path / "hub")
    data = NERDataModule(
        hub_name=str(tmp_path / "hub"), tokenizer=str(tiny_model_dir), cache_dir=str(tmp_path / "c")
    )
    assert data.labels == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    data.setup("fit")
    batch = next(iter(data.val_dataloader()))
    assert batch["labels"].tolist() == [[3, 4, -100], [3, 0, 1]]
    with pytest.raises(NERError, match=r"no split 'test' \(has train, validation\)"):
        data.setup("test")


def test_missing_training_data(tmp_path, tiny_model_dir):
    data = NERDataModule(tokenizer=str(tiny_model_dir))
    with pytest.raises(NERError, match="no training data"):
        data.labels  # noqa: B018
    assert splits.SPLIT_FILES["val"][0] == "eng.testa"


class _Recorder(__import__("pytorch_lightning").LightningModule):
    """Records the sentence order Lightning feeds it."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.orders: dict[int, list[int]] = {}

    def training_step(self, batch, batch_idx):
        self.orders.setdefault(self.current_epoch, []).extend(batch["sent_id"].tolist())
        return (self.weight * batch["input_ids"].float().mean()).sum()

    def predict_step(self, batch, batch_idx):
        return batch["sent_id"].tolist()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_lightning_sets_the_epoch_and_predicts_everything(corpus_dir, tiny_model_dir, tmp_path):
    import pytorch_lightning as pl

    data = make(corpus_dir, tiny_model_dir, tmp_path, max_length=16, batch_size=8)
    data.files["val"] = None  # no validation loop
    data.files["predict"] = str(corpus_dir / "eng.testb")
    model = _Recorder()
    trainer = pl.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=data)
    assert sorted(model.orders[0]) == sorted(model.orders[1]) == list(range(60))
    assert model.orders[0] != model.orders[1]  # Lightning reached set_epoch
    predicted = trainer.predict(model, datamodule=data)
    assert sorted(i for batch in predicted for i in batch) == list(range(15))
    assert data.predict_input.corpus.path.endswith("eng.testb")


def test_data_module_packs_training_only(corpus_dir, tiny_model_dir, tmp_path):
    plain = make(corpus_dir, tiny_model_dir, tmp_path / "a", context_pieces=4)
    packed = make(corpus_dir, tiny_model_dir, tmp_path / "b", context_pieces=4, pack_words=40)
    plain.setup("fit")
    packed.setup("fit")
    train, packs = plain.datasets["train"], packed.datasets["train"]
    assert len(packs) < len(train)
    assert sum(packs["tokens"], []) == sum(train["tokens"], [])
    assert sum(packs["ner_tags"], []) == sum(train["ner_tags"], [])
    # a pack stays within the cap, unless it is one sentence longer than the cap
    assert all(len(t) <= 40 or t in train["tokens"] for t in packs["tokens"])
    assert packed.datasets["val"]["tokens"] == plain.datasets["val"]["tokens"]  # not packed
    # fewer pieces to encode for the same words: context only at each pack's two ends
    pieces = [sum(len(w) for ws in d["input_ids"] for w in ws) for d in (train, packs)]
    assert pieces[1] < pieces[0]
