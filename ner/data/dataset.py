"""The Hugging Face `datasets` layer: CoNLL corpus / hub / disk / parquet -> `Dataset` -> windows.

Every source ends in the same columns, one row a sentence in document order: `tokens`, `ner_tags`
(ids into the label list, IOB2; -100 where unlabelled), `doc_id`, `sent_id` (index in the split);
`tokenize_dataset` adds `input_ids`, `piece_word` (`[windows][pieces]`), `num_pieces` and
`zero_piece_words` through a cached `Dataset.map`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from ner.corpus.reader import DOCSTART
from ner.corpus.schemes import detect_scheme, entity_types, label_list, to_iob2
from ner.data import alignment
from ner.data.windows import WindowSettings
from ner.utils.errors import NERError
from ner.utils.files import exclusive


def _features():
    from datasets import Features, List, Value

    return Features(
        {
            "tokens": List(Value("string")),
            "ner_tags": List(Value("int64")),
            "doc_id": Value("int64"),
            "sent_id": Value("int64"),
        }
    )


def rows_to_dataset(
    tokens: list[list[str]],
    tags: list[list[str]] | None,
    doc_ids: list[int],
    labels: Sequence[str] | None,
    where: str,
):
    """Sentences -> `Dataset`; `tags`: IOB2 strings; `tags` or `labels` None: unlabelled (-100).

    `where` names the source in errors."""
    from datasets import Dataset

    index = {label: i for i, label in enumerate(labels or [])}
    ner_tags = []
    for s, words in enumerate(tokens):
        if tags is None or labels is None:
            ner_tags.append([-100] * len(words))
            continue
        try:
            ner_tags.append([index[t] for t in tags[s]])
        except KeyError as exc:  # the wording of reader.check_labels
            known = ", ".join(labels)
            what = f"sentence {s}: tag {exc.args[0]!r} is not in the training label set [{known}]"
            raise NERError(what, path=where) from None
    columns = {
        "tokens": tokens,
        "ner_tags": ner_tags,
        "doc_id": doc_ids,
        "sent_id": list(range(len(tokens))),
    }
    return Dataset.from_dict(columns, features=_features())


def corpus_to_dataset(corpus, labels: Sequence[str] | None):
    """A `reader.Corpus` as a `Dataset` (labels None: unlabelled data, `ner_tags` all -100)."""
    sentences = corpus.sentences
    tokens, tags = [s.words for s in sentences], [s.tags for s in sentences]
    return rows_to_dataset(tokens, tags, corpus.doc_ids, labels, corpus.path)


def _load_raw(name_or_path: str, split: str, cache_dir: str | None):
    """A `datasets.Dataset` from `save_to_disk`, a parquet file, or `load_dataset` (hub or dir)."""
    import datasets

    path = Path(name_or_path)
    try:
        if (path / "dataset_dict.json").is_file():
            saved = datasets.load_from_disk(str(path))
            if split not in saved:
                raise NERError(f"no split {split!r} (has {', '.join(saved)})", path=name_or_path)
            return saved[split]
        if (path / "dataset_info.json").is_file():
            return datasets.load_from_disk(str(path))  # one saved Dataset serves every split
        if path.is_file() and path.suffix == ".parquet":
            return datasets.load_dataset(
                "parquet", data_files=str(path), split="train", cache_dir=cache_dir
            )
        return datasets.load_dataset(name_or_path, split=split, cache_dir=cache_dir)
    except (FileNotFoundError, ValueError) as exc:
        if isinstance(exc, NERError):
            raise
        raise NERError(f"cannot load split {split!r}: {exc}", path=name_or_path) from None


def _hub_rows(name_or_path: str, split: str, cache_dir: str | None):
    """(tokens, IOB2 tags, doc ids) of a hub-style split with `tokens` and `ner_tags` columns."""
    raw = _load_raw(name_or_path, split, cache_dir)
    where = f"{name_or_path}[{split}]"
    if "tokens" not in raw.column_names or "ner_tags" not in raw.column_names:
        raise NERError(f"needs `tokens` and `ner_tags` columns, has {raw.column_names}", path=where)
    names = getattr(raw.features["ner_tags"], "feature", None)
    names = getattr(names, "names", None)
    tokens, tags = raw["tokens"], raw["ner_tags"]
    if names is not None:
        tags = [[names[t] for t in row] for row in tags]
    elif tags and tags[0] and not isinstance(tags[0][0], str):
        raise NERError("`ner_tags` are integers without ClassLabel names", path=where)
    # Documents: a -DOCSTART- row opens one; without any, each row is its own (as
    # `Corpus.doc_ids`: nothing says that neighbouring rows belong together).
    rows_tokens, rows_tags, doc_ids, doc, marked = [], [], [], 0, False
    for words, row_tags in zip(tokens, tags, strict=True):
        if words and words[0] == DOCSTART:
            doc += bool(rows_tokens)
            marked = True
            continue
        if words:  # empty rows carry nothing to tag
            rows_tokens.append(list(words))
            rows_tags.append(list(row_tags))
            doc_ids.append(doc)
    if not marked:
        doc_ids = list(range(len(rows_tokens)))
    try:
        scheme = detect_scheme(rows_tags)
        rows_tags = [to_iob2(t, scheme) for t in rows_tags]
    except ValueError as exc:
        raise NERError(str(exc), path=where) from None
    return rows_tokens, rows_tags, doc_ids


def hub_labels(name_or_path: str, split: str = "train", cache_dir: str | None = None) -> list[str]:
    """The IOB2 label list of a hub-style split (`schemes.label_list` of its entity types)."""
    _, tags, _ = _hub_rows(name_or_path, split, cache_dir)
    return label_list(entity_types(t for row in tags for t in row))


def load_hub(
    name_or_path: str,
    split: str,
    labels: Sequence[str] | None = None,
    cache_dir: str | None = None,
):
    """A split of a hub dataset (`tokens` + `ner_tags`), a `save_to_disk` folder or a parquet file,
    with the columns of `corpus_to_dataset`; `labels` None: this split's own `hub_labels`.

    Tag names are converted to IOB2; `-DOCSTART-` rows delimit documents and are dropped (none:
    each row its own document); empty rows are dropped.
    """
    tokens, tags, doc_ids = _hub_rows(name_or_path, split, cache_dir)
    if labels is None:
        labels = label_list(entity_types(t for row in tags for t in row))
    return rows_to_dataset(tokens, tags, doc_ids, labels, f"{name_or_path}[{split}]")


def tokenizer_fingerprint(tokenizer) -> str:
    """A digest of everything in the tokenizer that changes piece ids (vocab, normalizer, ...)."""
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    # transformers rewrites these on every call (the bundled MiniLM file ships truncation and
    # padding at 128, reset to None by the first call): they would change the digest, not the ids
    state.pop("truncation", None)
    state.pop("padding", None)
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def _align_batch(batch, tokenizer, settings: WindowSettings):
    """Windows for a batch of rows in document order; context sees the documents in the batch."""
    return alignment.align_rows(tokenizer, batch["tokens"], batch["doc_id"], settings)


PROGRESS_ROWS = 5000


@contextlib.contextmanager
def _progress_bar(show: bool) -> Iterator[None]:
    from datasets.utils import logging

    enabled = logging.is_progress_bar_enabled()
    if enabled and not show:
        logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled and not show:
            logging.enable_progress_bar()


def tokenize_dataset(dataset, tokenizer, settings: WindowSettings, cache_dir: str | None = None):
    """Add `input_ids`, `piece_word` (`[windows][pieces]`), `num_pieces`, `zero_piece_words`.

    Cached: the fingerprint covers the rows, the tokenizer, the window settings and the alignment
    code. The cache file goes to `cache_dir` if given, else beside the dataset's own files; an
    in-memory dataset without `cache_dir` is not cached. Built once by whichever process sharing
    `cache_dir` comes first (`ner.utils.files.exclusive`), never read half-written.
    """
    from datasets import List, Value
    from datasets.fingerprint import Hasher

    code = hashlib.sha256(Path(alignment.__file__).read_bytes() + Path(__file__).read_bytes())
    fingerprint = Hasher.hash(
        [
            dataset._fingerprint,
            tokenizer_fingerprint(tokenizer),
            sorted(settings.as_dict().items()),
            code.hexdigest(),
        ]
    )
    cache_file = None
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
        cache_file = os.path.join(cache_dir, f"aligned-{fingerprint}.arrow")
    features = dataset.features.copy()
    features["input_ids"] = List(List(Value("int32")))
    features["piece_word"] = List(List(Value("int32")))
    features["num_pieces"] = Value("int32")
    features["zero_piece_words"] = Value("int32")
    # Processes that share the cache folder (ranks of one machine, or machines on one shared
    # disk) take turns: the first builds the file (datasets writes it beside the target and
    # renames it into place), the others load it whole; a machine with a disk of its own
    # builds its own. A bar is worth showing for a corpus that takes seconds, not a few lines.
    lock = exclusive(f"{cache_file}.lock") if cache_file else contextlib.nullcontext()
    with lock, _progress_bar(len(dataset) >= PROGRESS_ROWS):
        return dataset.map(
            _align_batch,
            batched=True,
            # context needs whole documents: one batch then (NER splits are small: CoNLL-2003
            # train is 14k sentences, a few MB of ids); without context any cut is fine
            batch_size=None if settings.context_pieces > 0 else 1000,
            fn_kwargs={"tokenizer": tokenizer, "settings": settings},
            features=features,
            new_fingerprint=fingerprint,
            cache_file_name=cache_file,
            desc="Aligning word pieces",
        )
