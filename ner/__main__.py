"""`python -m ner ...` is the `ner` command."""

from ner.cli.main import main

main()
