"""The `ner` subcommands outside LightningCLI, one module each."""
