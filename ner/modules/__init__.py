"""The model's parts, plain `nn.Module`s chosen by class path: layer combiners, word pooling,
word features, tagging heads and the CRF."""
