"""Entity F1 of taggers on a labelled corpus at several weights of document consistency, from one
encoding pass a model: what `ner score` reports.

Each model scores the corpus's sentences once through the one inference routine (`map_batches`:
its window settings, the corpus's documents as context); each weight then decodes those outputs
document by document exactly as `iter_tags(..., consistency=W)` does (`decode_documents`), and
is scored with the metric `ner test` uses (`entity_counts`, `entity_scores`). The members of an
ensemble share one batch (`Ensemble` checks that they can), so one pass of each member gives
both its own outputs and the ensemble's (`Ensemble.combine`, what the ensemble's forward does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from ner.corpus.reader import Corpus
from ner.evaluation.metrics import entity_counts, entity_scores
from ner.inference.consistency import SURE, decode_documents, sentence_outputs, split_outputs
from ner.inference.ensemble import Ensemble
from ner.inference.routine import Tagger, map_batches

ENSEMBLE = "ensemble"  # the ensemble's name in the results, beside its members' names
Outputs = tuple[Tensor, Tensor]  # one sentence's emissions and tag probabilities `[n, C]`
Scores = dict[str, dict[str, Any]]  # str(weight) -> an `entity_scores` report


def model_outputs(model: Tagger, corpus: Corpus) -> list[Outputs]:
    """Each sentence's `sentence_outputs`, from one pass of `model` over the corpus."""
    words = [s.words for s in corpus.sentences]
    return list(map_batches(model, lambda b: sentence_outputs(model, b), words, corpus.doc_ids))


def ensemble_outputs(ensemble: Ensemble, corpus: Corpus) -> list[list[Outputs]]:
    """Each member's `model_outputs`, then the ensemble's, from one pass of each member."""
    models = [*ensemble.members, ensemble]

    def run(batch: dict[str, Tensor]) -> list[tuple[Outputs, ...]]:
        mask = batch["word_mask"]
        emissions = [m(batch).float() for m in ensemble.members]  # each [B, W, C]
        found = [*emissions, ensemble.combine(emissions, mask)]
        per_model = [split_outputs(m, e, mask) for m, e in zip(models, found, strict=True)]
        return list(zip(*per_model, strict=True))  # a batch row: its outputs under each model

    words = [s.words for s in corpus.sentences]
    rows = list(map_batches(ensemble, run, words, corpus.doc_ids))
    return [[row[i] for row in rows] for i in range(len(models))]


def tags_at(
    model: Tagger, corpus: Corpus, outputs: Sequence[Outputs], weight: float, sure: float = SURE
) -> list[list[str]]:
    """The IOB2 tags of each sentence, decoded from `outputs` with consistency `weight`."""
    words = [s.words for s in corpus.sentences]
    tagged = decode_documents(model, words, outputs, corpus.doc_ids, weight, sure)
    return [tags for tags, _ in tagged]


def sweep(
    model: Tagger,
    corpus: Corpus,
    outputs: Sequence[Outputs],
    weights: Sequence[float],
    sure: float = SURE,
    mode: str = "default",
) -> Scores:
    """The entity scores of `model`'s outputs decoded at each weight (keys: `str(float(w))`)."""
    gold = [s.tags for s in corpus.sentences]
    types = sorted(corpus.entities())
    scores = {}
    for weight in weights:
        tags = tags_at(model, corpus, outputs, weight, sure)
        scores[str(float(weight))] = entity_scores(entity_counts(tags, gold, mode), types)
    return scores


def score_taggers(
    members: Sequence[Tagger],
    names: Sequence[str],
    corpus: Corpus,
    weights: Sequence[float] | None = None,
    ensemble: bool = False,
    sure: float = SURE,
    mode: str = "default",
) -> dict[str, Scores]:
    """Each tagger's scores on `corpus` at each weight, and with `ensemble` their ensemble's.

    Args:
        members: the taggers (to ensemble them: of one tokenizer, window settings and labels).
        names: their names in the result (e.g. checkpoint paths); the ensemble is `ensemble`.
        corpus: the labelled sentences, their documents each sentence's context.
        weights: consistency weights (None: each tagger's own, the ensemble at the first's).
        ensemble: also score their ensemble.
        sure: the consistency gate (`ner.inference.consistency.SURE`).
        mode: the metric's chunking, default or strict (`ner.evaluation.metrics`).
    """
    models = list(members)
    if ensemble:
        # its own decoding head joins the members on their device
        combined = Ensemble(models, names).to(next(models[0].parameters()).device)
        models.append(combined)
        outputs = ensemble_outputs(combined, corpus)
        names = [*names, ENSEMBLE]
    else:
        outputs = [model_outputs(m, corpus) for m in models]
    found = {}
    for name, model, out in zip(names, models, outputs, strict=True):
        own = weights if weights is not None else [getattr(model, "consistency", 0.0)]
        found[name] = sweep(model, corpus, out, own, sure, mode)
    return found
