"""The `ner` command: `fit`, `validate`, `test`, `predict` (LightningCLI) and `inspect`, `tag`,
`seeds`, `embed`, `probe`, `project`, `export`.

Each subcommand's module is imported only when it runs, so `ner inspect` does not pay for torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ner.errors import NERError
from ner.noise import silence

COMMANDS = {
    "inspect": "ner.commands.inspect",
    "tag": "ner.commands.tag",
    "seeds": "ner.commands.seeds",
    "embed": "ner.commands.embed",
    "probe": "ner.commands.probe",
    "project": "ner.commands.project",
    "export": "ner.commands.export",
}
LIGHTNING = "ner.commands.lightning"


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `ner` console command: a one-line error and exit 2 for bad input."""
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        if words[:1] and words[0] in COMMANDS:
            command = importlib.import_module(COMMANDS[words[0]])
            silence()  # after the imports: a library's own filters must not take precedence
            sys.exit(command.main(words[1:]))
        command = importlib.import_module(LIGHTNING)
        silence()
        command.main(argv)  # None: LightningCLI reads sys.argv itself (and does not warn)
    except NERError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except argparse.ArgumentError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        # outputs are written atomically, so an interrupted run leaves none half-written
        print("error: interrupted (Ctrl-C); no partial output was left", file=sys.stderr)
        sys.exit(130)


def one_line(message: str) -> str:
    """jsonargparse's nested, multi-line errors as one line: where, and the innermost reason."""
    lines = [ln.strip(" -") for ln in message.strip().splitlines() if ln.strip(" -")]
    if len(lines) <= 1:
        return lines[0] if lines else "invalid arguments"
    for i, line in enumerate(lines):
        if line.startswith("Problem with given class_path") and i + 1 < len(lines):
            return f"{lines[0]} {line} {lines[i + 1]}"
    return f"{lines[0]} {lines[-1]}"


if __name__ == "__main__":
    main()
