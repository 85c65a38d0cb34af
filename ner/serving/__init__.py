"""`ner serve` above the model: the one model loader, the requests and answers, the pooling
workers, the LitServe app and its page (`ui/`)."""
