"""Checkpoints, and their ensemble, scored on a labelled CoNLL file at several weights of
document consistency (`ner score`; the scoring itself is `ner.inference.scoring`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ner.corpus.reader import read_conll
from ner.inference.consistency import SURE
from ner.inference.scoring import Scores, score_taggers
from ner.model.tagger import load_tagger
from ner.utils.errors import NERError
from ner.utils.precision import resolve_device


def score_checkpoints(
    checkpoints: Sequence[str],
    file: str | Path,
    weights: Sequence[float] | None = None,
    ensemble: bool | None = None,
    context_pieces: int | None = None,
    sure: float = SURE,
    mode: str = "default",
    device: str = "auto",
) -> dict[str, Scores]:
    """`{checkpoint or "ensemble": {str(weight): entity_scores report}}` on `file`.

    Args:
        checkpoints: checkpoint files (to ensemble them: of one tokenizer, windows and labels).
        file: a labelled CoNLL file; its -DOCSTART- documents give each sentence its context.
        weights: document-consistency weights (None: each checkpoint's own, as `ner test`
            decodes it; the ensemble at the first checkpoint's).
        ensemble: also score their ensemble (None: when there are several checkpoints).
        context_pieces: pieces of document context a side instead of each checkpoint's own.
        sure: the consistency gate: an occurrence this sure of its type keeps it.
        mode: the metric's chunking, default or strict (`ner test --model.metric_mode`).
        device: auto (a GPU if there is one), cpu, cuda:N.
    """
    if len(set(checkpoints)) != len(checkpoints):
        raise NERError("a checkpoint is given twice", path="checkpoints")
    corpus = read_conll(str(file))
    where = resolve_device(device)
    members = [load_tagger(path).to(where) for path in checkpoints]
    if context_pieces is not None:
        for member in members:
            member.window_settings = member.window_settings.overridden(
                context_pieces=context_pieces
            )
    ensemble = len(members) > 1 if ensemble is None else ensemble
    return score_taggers(members, list(checkpoints), corpus, weights, ensemble, sure, mode)
