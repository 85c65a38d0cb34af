"""The `ner` command: the entry point (`ner.cli.main`) and one module a subcommand."""
