"""The package tree is the pipeline (docs/design.md): each subpackage of `ner/` is a layer, and a
module imports only from its own package or from the packages below it. Inside a package the
imports form no cycle; `ner.corpus` needs no torch; imports of `ner` sit at the top of a module,
never inside a function (so none can hide); modules stay under 300 lines and functions under 60.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ner"

# lowest first: a package may import from itself and from the packages before it
PACKAGES = ["utils", "corpus", "data", "modules", "evaluation", "inference", "model", "serving",
            "layer_analysis", "cli"]  # fmt: skip
RANK = {name: rank for rank, name in enumerate(PACKAGES)}
TOP = ("__init__", "__main__")  # the lazy facade and `python -m ner`, above everything
HEAVY = {"torch", "transformers", "pytorch_lightning", "lightning_fabric", "datasets"}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    """`ner/data/alignment.py` -> `data.alignment`; a package's `__init__` -> the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def imports(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) of every absolute import; `ner` itself and
    its modules lose the `ner.` prefix (`ner` -> `__init__`)."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                if child.module == "ner" or child.module.startswith("ner."):
                    # `from ner.data import alignment` names the module `data.alignment`
                    targets = [f"{child.module}.{a.name}" for a in child.names]
                else:
                    targets = [child.module]
            for target in targets:
                if target == "ner" or target.startswith("ner."):
                    target = target.removeprefix("ner").removeprefix(".") or "__init__"
                found.append((target, child.lineno, inner))
            visit(child, inner)

    visit(tree, False)
    return found


def load_tree(root: Path) -> dict[str, list[tuple[str, int, bool]]]:
    """Every module under `root` (a package folder) with its imports."""
    return {module_name(p, root): imports(ast.parse(p.read_text())) for p in root.rglob("*.py")}


def resolve(target: str, modules: set[str]) -> str | None:
    """The module an import names (`data.alignment.WindowSettings` -> `data.alignment`)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def package_of(module: str) -> str:
    return module.split(".")[0]


def violations(root: Path) -> list[str]:
    """Every break of the package rules in the tree at `root`."""
    tree = load_tree(root)
    modules = set(tree)
    problems, edges = [], {}
    for name, found in sorted(tree.items()):
        if name in TOP:
            continue
        if package_of(name) not in RANK:
            problems.append(f"{name}: not in a package of the pipeline ({', '.join(PACKAGES)})")
            continue
        edges[name] = set()
        for target, line, in_function in found:
            module = resolve(target, modules)
            if module is None:
                continue
            where = f"{name}:{line}"
            if in_function:
                problems.append(f"{where}: imports ner.{module} inside a function")
            if module in TOP or package_of(module) not in RANK:
                problems.append(f"{where}: imports ner.{module}, above every package")
            elif RANK[package_of(module)] > RANK[package_of(name)]:
                problems.append(
                    f"{where}: imports ner.{module}, a package above {package_of(name)}"
                )
            elif package_of(module) == package_of(name) and module != name:
                edges[name].add(module)
    problems += [f"import cycle: {' -> '.join(c)}" for c in cycles(edges)]
    problems += torch_in_corpus(tree, modules)
    return problems


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected knot of `edges` (depth-first search)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def torch_in_corpus(tree: dict, modules: set[str]) -> list[str]:
    """`ner.corpus` reads and writes text without torch, through any of its ner imports."""
    problems = []
    for name in (m for m in tree if package_of(m) == "corpus"):
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for target, line, _ in tree[current]:
                if target.split(".")[0] in HEAVY:
                    problems.append(f"{name}: needs {target} (through {current}:{line})")
                module = resolve(target, modules)
                if module is not None and module not in TOP:
                    todo.append(module)
    return problems


def test_the_package_rules_hold():
    problems = violations(PACKAGE)
    assert not problems, "\n".join(problems)


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A copy of the rules' world: a fake package tree with the given modules."""
    root = tmp_path / "ner"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"data/a.py": "from ner.model.tagger import X\n", "model/tagger.py": ""},
         "imports ner.model.tagger, a package above data"),
        ({"data/a.py": "def f():\n    from ner.data import b\n", "data/b.py": ""},
         "imports ner.data.b inside a function"),
        ({"data/a.py": "from ner.data.b import X\n", "data/b.py": "from ner.data.a import Y\n"},
         "import cycle: data.a -> data.b -> data.a"),
        ({"corpus/a.py": "from ner.utils.p import X\n", "utils/p.py": "import torch\n"},
         "corpus.a: needs torch (through utils.p:1)"),
        ({"helpers.py": ""}, "helpers: not in a package of the pipeline"),
        ({"utils/a.py": "import ner\n"}, "imports ner.__init__, above every package"),
    ],
)  # fmt: skip
def test_the_rules_catch_a_planted_violation(tmp_path, files, expected):
    problems = violations(plant(tmp_path, files))
    assert any(expected in p for p in problems), problems


def test_a_clean_planted_tree_passes(tmp_path):
    files = {
        "utils/e.py": "",
        "corpus/r.py": "from ner.utils.e import E\n",
        "data/a.py": "from ner.corpus import r\nfrom ner.data.b import B\n",
        "data/b.py": "",
    }
    assert violations(plant(tmp_path, files)) == []


def too_long(root: Path) -> list[str]:
    """Modules over 300 lines and functions over 60 lines under `root`."""
    long = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 300:
            long.append(f"{path.relative_to(root)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = node.end_lineno - node.lineno + 1
                if size > 60:
                    long.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {size} lines")
    return long


def test_modules_and_functions_stay_short():
    """House style: a module under 300 lines, a function on one screen (60 lines)."""
    long = too_long(PACKAGE)
    assert not long, "\n".join(long)


def test_the_length_check_catches_a_long_function(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    root = plant(tmp_path, {"utils/a.py": f"def f():\n{body}"})
    assert too_long(root) == ["utils/a.py:1 f: 61 lines"]


def test_every_old_module_name_imports_the_module_it_became():
    """Checkpoints and configs name classes by the paths they were written with (ner/utils/
    moved.py): each old name gives the very module object of its new one, also inside a
    renamed package, where the path finder would otherwise load a second copy."""
    import importlib

    from ner.utils.moved import MOVED, current

    for old, new in MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    assert current("ner.layers.projection.LayerProjection") == (
        "ner.layer_analysis.projection.LayerProjection"
    )
    from ner.layer_analysis.projection import LayerProjection
    from ner.layers.projection import LayerProjection as Old

    assert Old is LayerProjection
