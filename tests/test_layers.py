"""The package's imports point one way, down the pipeline's layers (docs/design.md).

Every module of `ner/` has a layer here; a module may import only from lower layers, and imports
of `ner` modules sit at the top of a module, never inside a function (so none can hide).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ner"

LAYERS = [
    ["errors"],
    ["files", "precision", "schemes", "noise", "shapes"],
    ["reader", "text", "encoders"],
    ["inputs", "alignment"],
    ["outputs", "dataset", "batching", "stats", "plots"],
    ["feature_cache", "feature_batches", "splits"],
    ["datamodule"],
    ["combiners", "pooling", "crf", "metrics", "optim", "word_features", "seeds"],
    ["heads", "analysis"],
    ["checkpoint", "inference"],
    ["export"],
    ["backends"],
    ["tagger"],
    ["callbacks", "resume", "embed"],
    ["projection", "probe"],
    [
        "commands.inspect",
        "commands.tag",
        "commands.lightning",
        "commands.embed",
        "commands.probe",
        "commands.project",
        "commands.export",
    ],
    ["commands.seeds"],
    ["cli", "commands"],
    ["__init__"],
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")


def ner_imports(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """(imported ner module, line, inside a function) for every import of the package."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                if child.module == "ner":  # `from ner import schemes`
                    targets = [f"ner.{a.name}" for a in child.names]
                else:
                    targets = [child.module]
            for target in targets:
                if target == "ner" or target.startswith("ner."):
                    found.append((target.removeprefix("ner.") or "__init__", child.lineno, inner))
            visit(child, inner)

    visit(tree, False)
    return found


def test_every_module_has_a_layer():
    modules = {module_name(p) or "__init__" for p in PACKAGE.rglob("*.py")}
    modules = {"__init__" if m == "" else m for m in modules}
    assert modules <= set(RANK), (
        f"give these a layer in tests/test_layers.py: {modules - set(RANK)}"
    )


def test_imports_point_down_and_sit_at_the_top():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path) or "__init__"
        if name == "__init__":
            continue  # the package's lazy facade (`ner.NERTagger`) sits above everything
        for target, line, in_function in ner_imports(ast.parse(path.read_text())):
            where = f"ner/{path.relative_to(PACKAGE)}:{line}"
            if in_function:
                problems.append(f"{where}: imports ner.{target} inside a function")
            elif RANK.get(target, -1) >= RANK[name]:
                problems.append(f"{where}: {name} (layer {RANK[name]}) imports {target} (layer "
                                f"{RANK.get(target)}), which is not below it")  # fmt: skip
    assert not problems, "\n".join(problems)


def test_the_check_catches_an_upward_and_a_hidden_import():
    tree = ast.parse("from ner.tagger import NERTagger\ndef f():\n    from ner import reader\n")
    assert ner_imports(tree) == [("tagger", 1, False), ("reader", 3, True)]


def test_modules_and_functions_stay_short():
    """House style: a module under 300 lines, a function on one screen (60 lines)."""
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 300:
            long.append(f"ner/{path.relative_to(PACKAGE)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = node.end_lineno - node.lineno + 1
                if size > 60:
                    where = f"ner/{path.relative_to(PACKAGE)}:{node.lineno}"
                    long.append(f"{where} {node.name}: {size} lines")
    assert not long, "\n".join(long)
