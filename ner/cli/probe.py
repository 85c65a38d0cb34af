"""`ner probe`: how well each hidden state of a frozen encoder, and each combination of them,
tags entities with a small probe head (the BERT paper's Table 7, feature-based).

    ner probe [--encoder NAME] (--data-dir DIR | --train F --dev F [--test F]) [--test-report]
              [--seeds 1 2 3] [--epochs 50] [--patience 3] [--lr 1e-3] [--batch-size 32]
              [--pooling first]
              [--head ner.modules.heads.LinearHead] [--head-args '{"crf": true}'] [--output DIR]
              [--limit N]

The encoder runs once a split; every probe (hidden states 0..L, sum / mean / concat of the last
four, a scalar mix of all) trains on the stored word vectors, each state standardised with train's
statistics, until dev F1 stops improving (its best epoch kept), over each seed; each row says what
it costs (the encoder layers computed) and how many epochs it took. Test is scored only with
`--test-report` or an explicit `--test FILE`. DIR (default `runs/probe/<encoder name>`) gets
probe.csv, probe.md, probe.json and probe.png.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Callable
from pathlib import Path

from ner.cli.main import summary
from ner.corpus.reader import Corpus, Document, Sentence, check_labels, read_conll
from ner.corpus.schemes import entity_types, label_list
from ner.data.pretrained import BUNDLED_ENCODER
from ner.data.splits import find_split_file
from ner.layer_analysis.embed import WordStates
from ner.layer_analysis.probe import ProbeData, encode_split
from ner.layer_analysis.probe_sweep import TrainConfig, sweep
from ner.layer_analysis.probe_tables import csv_rows, markdown
from ner.modules.heads import TaggingHead
from ner.modules.pooling import MODES
from ner.utils.classes import load_class
from ner.utils.errors import NERError
from ner.utils.extras import require
from ner.utils.files import atomic_write, writable_folder
from ner.utils.precision import resolve_device

SPLITS = {"train": "train", "dev": "val", "test": "test"}  # ours -> ner.data.splits' names


def parser() -> argparse.ArgumentParser:
    """The options of `ner probe`."""
    p = argparse.ArgumentParser(prog="ner probe", description=summary("probe"))
    p.add_argument("--encoder", default=BUNDLED_ENCODER, help="hub name or local path")
    p.add_argument("--data-dir", help="eng.train/eng.testa/eng.testb or train/dev/test.txt")
    p.add_argument("--train", help="training file (overrides --data-dir's)")
    p.add_argument("--dev", help="dev file: selects each probe's epoch")
    p.add_argument("--test", help="test file (scored: implies --test-report)")
    p.add_argument("--test-report", action="store_true", help="also score the test split")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--epochs", type=int, default=50, help="at most this many epochs a probe")
    p.add_argument("--patience", type=int, default=3,
                   help="stop a probe after this many epochs without a better dev F1")  # fmt: skip
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=32, help="sentences a probe batch")
    p.add_argument("--pooling", choices=MODES, default="first")
    p.add_argument(
        "--head", default="ner.modules.heads.LinearHead", help="a head class by its path"
    )
    p.add_argument("--head-args", default="{}", help='JSON keyword arguments, e.g. {"crf": true}')
    p.add_argument("--output", help="output folder (default: runs/probe/<encoder name>)")
    p.add_argument("--limit", type=int, help="first N sentences a split (smoke runs)")
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda:N")
    return p


def split_files(args: argparse.Namespace) -> dict[str, str]:
    """The file of each split to probe on; a one-line error for a missing train, dev or test."""
    given = {"train": args.train, "dev": args.dev, "test": args.test}
    files = {s: given[s] or find_split_file(args.data_dir, SPLITS[s]) for s in given}
    wanted = ["train", "dev"] + (["test"] if args.test_report or args.test else [])
    for split in wanted:
        if not files[split]:
            where = f"no {split} file in {args.data_dir}" if args.data_dir else "not given"
            raise NERError(where, path=f"--{split}")
    return {s: files[s] for s in wanted}


def head_factory(path: str, args_json: str) -> Callable[[], TaggingHead]:
    """A maker of the head class at `path` (`module.Class`) with JSON keyword arguments; made
    once here, so a bad class or argument fails before the encoder runs."""
    cls = load_class(path, TaggingHead, "--head")
    try:
        kwargs = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise NERError(f"not JSON ({exc})", path="--head-args") from None
    if not isinstance(kwargs, dict):
        raise NERError("must be a JSON object", path="--head-args")
    try:
        cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise NERError(f"{path}: {exc}", path="--head-args") from None
    return lambda: cls(**kwargs)


def output_dir(args: argparse.Namespace) -> Path:
    """The output folder (default `runs/probe/<encoder name>`), made with its parents and
    checked writable before any encoding."""
    name = Path(args.encoder.rstrip("/")).name or "encoder"
    return writable_folder(args.output or Path("runs") / "probe" / name)


def read_split(path: str, limit: int | None) -> tuple[Corpus, list[Sentence], list[int]]:
    """A CoNLL file, its sentences (the first `limit`) and the document of each."""
    corpus = read_conll(path)
    return corpus, corpus.sentences[:limit], corpus.doc_ids[:limit]


def write_plot(path: Path, rows: list[dict], title: str) -> None:
    """probe.png: dev F1 by hidden state with error bars; the combinations as labelled lines."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    layers = [r for r in rows if r["layer"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [r["layer"] for r in layers]
    spread = [r["dev"][1] for r in layers]
    spread = None if None in spread else spread  # one seed: no error bars
    ax.errorbar(x, [r["dev"][0] for r in layers], yerr=spread,
                marker="o", capsize=3, color="black", label="one hidden state")  # fmt: skip
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for color, r in zip(colors, (r for r in rows if r["layer"] is None), strict=False):
        # in the legend, not beside the line: combinations often score alike and labels collide
        ax.axhline(r["dev"][0], color=color, linestyle="--", linewidth=1,
                   label=f"{r['name']} ({r['dev'][0]:.1f})")  # fmt: skip
    ax.set(xlabel="hidden state (0 = embeddings)", ylabel="dev entity F1", title=title)
    ax.set_xticks(x)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    with atomic_write(path, binary=True) as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)


def write_outputs(out: Path, rows: list[dict], meta: dict) -> None:
    """probe.csv, probe.md, probe.json and probe.png, each written whole or not at all."""
    with atomic_write(out / "probe.csv") as handle:
        csv.writer(handle, lineterminator="\n").writerows(csv_rows(rows))
    with atomic_write(out / "probe.md") as handle:
        handle.write(markdown(rows, meta["encoder"]))
    mix = next((r["weights"] for r in rows if "weights" in r), None)
    with atomic_write(out / "probe.json") as handle:
        json.dump({**meta, "scalar_mix_weights": mix, "rows": rows}, handle, indent=2)
    write_plot(out / "probe.png", rows, f"probing {Path(meta['encoder'].rstrip('/')).name}")


def main(argv: list[str]) -> int:
    """Read the splits, encode each once, probe every row over every seed, write the tables."""
    args = parser().parse_args(argv)
    require("analysis", "ner probe")
    if min(args.epochs, args.patience, args.batch_size, args.limit or 1) < 1:
        raise NERError("--epochs, --patience, --batch-size and --limit must be at least 1")
    files = split_files(args)
    make_head = head_factory(args.head, args.head_args)
    splits = {s: read_split(f, args.limit) for s, f in files.items()}
    train = [s.tags for s in splits["train"][1]]
    labels = label_list(entity_types(t for tags in train for t in tags))
    for corpus, sents, _ in splits.values():
        # only the sentences probed on: with --limit, those of the whole file may hold more types
        check_labels(Corpus(corpus.path, corpus.scheme, [Document(sents)]), labels)
    out = output_dir(args)
    device = resolve_device(args.device)
    model = WordStates.of_encoder(args.encoder, args.pooling).to(device)
    stored = {
        s: encode_split(model, [x.words for x in sents], docs, [x.tags for x in sents], labels)
        for s, (_, sents, docs) in splits.items()
    }
    del model  # the probes need only the stored states
    on = {s: split.to(device) for s, split in stored.items()}
    data = ProbeData(labels, on["train"], on["dev"], on.get("test"))
    config = TrainConfig(args.epochs, args.patience, args.lr, args.batch_size)
    rows = sweep(data, make_head, args.seeds, config)
    meta = {"encoder": args.encoder, "files": files, "labels": labels, "seeds": args.seeds,
            "head": args.head, "head_args": json.loads(args.head_args), "pooling": args.pooling,
            "epochs": args.epochs, "patience": args.patience, "lr": args.lr,
            "batch_size": args.batch_size, "limit": args.limit,
            "hidden_states": data.shape[0]}  # fmt: skip
    write_outputs(out, rows, meta)
    print(markdown(rows, args.encoder), end="")
    print(f"probe: {out / 'probe.md'}")
    return 0
