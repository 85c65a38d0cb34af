"""Tags -> scores: entity F1 as seqeval computes it, the error analysis of `ner test`, and
summaries over seeds."""
