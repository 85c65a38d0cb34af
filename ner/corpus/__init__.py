"""Text and CoNLL files as words and tags, no torch: the reader and writers, tag schemes, raw
text to words with offsets, word shapes, prediction inputs and outputs."""
