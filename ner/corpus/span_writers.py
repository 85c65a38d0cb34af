"""Predictions as the span files annotation tools import, so a model's output opens in the tool
as pre-annotations to correct (`ner tag --format spacy|doccano|label-studio`).

- `spacy`: spaCy/Prodigy JSONL, `{"text", "tokens": [{"text", "start", "end", "id", "ws"}],
  "spans": [{"start", "end", "token_start", "token_end", "label", "text"}], "meta": {"line"}}`:
  the words the passage was tagged as are its tokens (`span_tokens`), so it reads back as them;
- `doccano`: JSONL `{"text", "label": [[start, end, "LABEL"], ...], "line"}`;
- `label-studio`: one JSON list of tasks `{"data": {"text", "line"}, "predictions": [{
  "model_version", "score", "result"}]}`, a result a span (`from_name` "label", `to_name`
  "text", `type` "labels", `value` with `start`, `end`, `text`, `labels`, and a `score`); the
  prediction's score is its passage's least sure word's, so that sorting tasks by it puts first
  those most worth a look.

Offsets count code points (Python's, and what Label Studio stores since its fix for emoji); each
span also carries its text, which `span_alignment` checks when the file is read back. A passage
without words (a blank line) is left out: there is nothing in it to annotate. No torch here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, Any

from ner.corpus.inputs import Passage
from ner.corpus.span_tokens import prodigy_tokens, token_span
from ner.corpus.text import entities_from_tags

TOOL_FORMATS = ("spacy", "doccano", "label-studio")
Tagged = tuple[list[str], list[float]]  # IOB2 tags and per-word scores of one passage


def spacy_record(passage: Passage, entities: list[dict[str, Any]]) -> dict[str, Any]:
    """A passage as a spaCy/Prodigy task, its words as the tokens."""
    spans = [
        {"start": e["start"], "end": e["end"], **token_span(passage.offsets, e["start"], e["end"]),
         "label": e["label"], "text": e["text"]}
        for e in entities
    ]  # fmt: skip
    tokens = prodigy_tokens(passage.words, passage.offsets, passage.text)
    return {"text": passage.text, "tokens": tokens, "spans": spans, "meta": {"line": passage.line}}


def doccano_record(passage: Passage, entities: list[dict[str, Any]]) -> dict[str, Any]:
    """A passage as a doccano sequence-labelling record."""
    labels = [[e["start"], e["end"], e["label"]] for e in entities]
    return {"text": passage.text, "label": labels, "line": passage.line}


def label_studio_task(
    passage: Passage, entities: list[dict[str, Any]], scores: list[float], model_version: str
) -> dict[str, Any]:
    """A passage as a Label Studio task with the model's prediction."""
    result = []
    for k, e in enumerate(entities):
        value = {"start": e["start"], "end": e["end"], "text": e["text"], "labels": [e["label"]]}
        # Label Studio's NER example keeps the score in `value`, its ML backends beside it:
        # both, so each version shows it
        result.append({"id": f"ner-{passage.line}-{k}", "from_name": "label", "to_name": "text",
                       "type": "labels", "value": {**value, "score": e["score"]},
                       "score": e["score"]})  # fmt: skip
    prediction = {"model_version": model_version, "score": min(scores), "result": result}
    return {"data": {"text": passage.text, "line": passage.line}, "predictions": [prediction]}


def write_tool_records(
    out: IO[str], fmt: str, rows: Iterable[tuple[Passage, Tagged]], model_version: str
) -> int:
    """Write each passage with words as `fmt` (one of `TOOL_FORMATS`) as it comes; Label
    Studio's list opens with the first task and closes after the last. Returns the passages
    written."""
    count = 0
    for passage, (tags, scores) in rows:
        if not passage.words:
            continue
        entities = entities_from_tags(tags, scores, passage.offsets, passage.text)
        if fmt == "label-studio":
            task = label_studio_task(passage, entities, scores, model_version)
            out.write(("[\n" if count == 0 else ",\n") + json.dumps(task, ensure_ascii=False))
        else:
            record = (spacy_record if fmt == "spacy" else doccano_record)(passage, entities)
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        count += 1
    if fmt == "label-studio" and count:
        out.write("\n]\n")
    return count
