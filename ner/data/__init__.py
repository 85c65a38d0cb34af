"""Words -> encoder windows -> batches: encoders and THE window rule, alignment, the `datasets`
layer, splits, batching, the frozen-encoder feature cache, the Lightning data module."""
