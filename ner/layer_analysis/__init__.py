"""What each hidden state knows: word vectors of every layer (`ner embed`), probes
(`ner probe`) and per-epoch projections (`LayerProjection`, `ner project`)."""
