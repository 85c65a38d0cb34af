"""Two "machines" on this one: two launches of `ner` that meet over gloo on 127.0.0.1 (a free
port), one process each, as torchrun starts them (`--nnodes 2 --node_rank 0|1`) and as
Lightning's own variables do (`MASTER_ADDR`, `MASTER_PORT`, `NODE_RANK`, `WORLD_SIZE`). Each
launcher runs with a shared disk (both in one folder) and without (a folder a machine, each
with its own caches, checkpoints and temporary files; inputs given to both).

What holds: fit leaves the same weights on both machines; the alignment cache, the frozen
encoder's feature cache (the Lightning-variable runs train a frozen scalar mix), checkpoints and
reports are each written once on a shared disk and once a machine without one (every rename
into place is logged by an audit hook in each process); `ner test` and `ner predict` on two
machines give the figures and files of one process. A launcher whose world size differs from
`num_nodes x devices`, and a resume that the machines cannot all make, are one-line errors.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import ROOT, run_ner, tiny_sentences, write_tiny_corpus
from pytorch_lightning.callbacks import Callback

from ner.cli import launch as launch_checks
from ner.cli import lightning
from ner.cli.lightning import run_lightning
from ner.utils.errors import NERError

TWO_NODES = ["--trainer.num_nodes", "2", "--trainer.devices", "1", "--trainer.strategy", "ddp",
             "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"]  # fmt: skip
CASES = [("torchrun", "shared"), ("torchrun", "separate"), ("env", "shared"), ("env", "separate")]
# every rename into place, by whom: `node<TAB>pid<TAB>absolute target`
AUDIT = """import os, sys
_log = os.environ.get("NER_TEST_RENAMES")
if _log:
    def _renames(event, args):
        if event == "os.rename":
            node = os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "-"))
            with open(os.path.join(_log, f"{os.getpid()}.txt"), "a") as out:
                out.write(f"{node}\\t{os.getpid()}\\t{os.path.abspath(os.fsdecode(args[1]))}\\n")
    sys.addaudithook(_renames)
"""


class NodeWeights(Callback):
    """At the end of fit, every rank saves the weights it holds (a test's witness: only rank 0
    writes checkpoints).

    Args:
        directory: where `rank-<r>.pt` go.
    """

    def __init__(self, directory: str):
        self.directory = directory

    def on_fit_end(self, trainer, pl_module) -> None:
        state = {k: v.detach().cpu() for k, v in pl_module.state_dict().items()}
        torch.save(state, Path(self.directory) / f"rank-{trainer.global_rank}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(launcher: str, node: int, port: int, args: list[str]) -> list[str]:
    if launcher == "torchrun":
        # `--` keeps torchrun's parser off ner's options (`--run` would be "ambiguous")
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank",
                str(node), "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
                "--master_port", str(port), "-m", "ner", "--", *args]  # fmt: skip
    return [sys.executable, "-m", "ner", *args]


def launch(
    world: dict, launcher: str, args: list[str], expect: int | None = 0, two=TWO_NODES
) -> list[str]:
    """Run `ner ARGS` as two machines (`two`: the trainer options that say so); each one's
    stderr. Each exits with `expect` (None: any code)."""
    port = free_port()
    procs = []
    for node in (0, 1):
        cwd = world["nodes"][node]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(world["hook"]), str(ROOT / "tests"), str(ROOT)]),
               "NER_TEST_RENAMES": str(world["renames"]), "TMPDIR": str(cwd / "tmp")}  # fmt: skip
        (cwd / "tmp").mkdir(parents=True, exist_ok=True)
        if launcher == "env":
            env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": str(node),
                    "WORLD_SIZE": "2"}  # fmt: skip
        out = open(cwd / f"stderr-{node}.txt", "w+")  # noqa: SIM115
        procs.append((subprocess.Popen(command(launcher, node, port, [*args, *two]),
                      cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=out), out))  # fmt: skip
    errors = []
    for proc, out in procs:
        try:
            code = proc.wait(timeout=150)
        except subprocess.TimeoutExpired:
            for other, _ in procs:
                other.kill()
            pytest.fail(f"{launcher} launch timed out: {args}")
        out.seek(0)
        errors.append(out.read())
        out.close()
        assert expect is None or code == expect, errors[-1][-3000:]
    return errors


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Odd-sized splits, so the two ranks get unequal shares."""
    folder = tmp_path_factory.mktemp("multinode-corpus")
    write_tiny_corpus(folder / "train.txt", tiny_sentences(23, seed=5))
    write_tiny_corpus(folder / "dev.txt", tiny_sentences(13, seed=6))
    write_tiny_corpus(folder / "test.txt", tiny_sentences(17, seed=7))
    config = folder / "fit.yaml"  # trainer.yaml without early stopping: a fixed 12 epochs
    trainer = (ROOT / "configs" / "trainer.yaml").read_text()
    config.write_text(trainer.replace("patience: 3", "patience: 100"))
    return folder


def new_world(tmp: Path, layout: str) -> dict:
    """Two machines' working folders (one folder when the disk is shared), the audit hook."""
    (tmp / "hook").mkdir()
    (tmp / "hook" / "sitecustomize.py").write_text(AUDIT)
    (tmp / "renames").mkdir()
    nodes = [tmp / "disk"] * 2 if layout == "shared" else [tmp / "disk-0", tmp / "disk-1"]
    for folder in nodes:
        folder.mkdir(exist_ok=True)
    return {"nodes": nodes, "hook": tmp / "hook", "renames": tmp / "renames", "layout": layout}


def renames(world: dict) -> list[tuple[str, str, Path]]:
    lines = [ln for f in world["renames"].iterdir() for ln in f.read_text().splitlines()]
    return [(node, pid, Path(target)) for node, pid, target in (ln.split("\t") for ln in lines)]


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def fitted(request, tmp_path_factory, tiny_model_dir, corpus) -> dict:
    """A fit on two machines; the Lightning-variable runs train a frozen scalar mix from the
    feature cache, the torchrun runs fine-tune."""
    launcher, layout = request.param
    world = new_world(tmp_path_factory.mktemp(f"{launcher}-{layout}"), layout)
    witness = world["nodes"][0].parent / "weights"
    witness.mkdir()
    # a frozen encoder learns only in the head and the mix: a higher rate for them
    frozen = ["--model.freeze_encoder", "true", "--model.combiner",
              "ner.modules.combiners.ScalarMix", "--model.head_lr", "5e-2"]  # fmt: skip
    frozen = frozen if launcher == "env" else []
    errors = launch(world, launcher, [
        "fit", "-c", str(corpus / "fit.yaml"), "--model.encoder", str(tiny_model_dir),
        "--data.data_dir", str(corpus), "--data.batch_size", "4", "--trainer.max_epochs", "12",
        "--model.encoder_lr", "3e-3", "--model.head_lr", "1e-2", "--model.warmup_ratio", "0.0",
        "--trainer.precision", "32-true", "--run", "mn", *frozen,
        "--trainer.callbacks+=test_multinode.NodeWeights",
        "--trainer.callbacks.directory", str(witness)])  # fmt: skip
    return {**world, "launcher": launcher, "witness": witness, "errors": errors,
            "frozen": bool(frozen), "fit_renames": renames(world)}  # fmt: skip


def test_fit_leaves_the_same_weights_on_both_machines(fitted):
    first = torch.load(fitted["witness"] / "rank-0.pt")
    second = torch.load(fitted["witness"] / "rank-1.pt")
    assert first.keys() == second.keys()
    for name, value in first.items():
        assert torch.equal(value, second[name]), name  # bit for bit: DDP averages gradients
    # and they are what machine 0 saved as the last state
    last = fitted["nodes"][0] / "checkpoints" / "mn" / "last.ckpt"
    saved = torch.load(last, weights_only=False)["state_dict"]
    assert saved.keys() == first.keys()
    assert all(torch.equal(saved[name], value) for name, value in first.items())


def test_caches_checkpoints_and_logs_are_written_once_per_disk(fitted):
    layout, nodes = fitted["layout"], fitted["nodes"]
    written = Counter(target for _, _, target in fitted["fit_renames"])
    writers_of = {}
    for node, _, target in fitted["fit_renames"]:
        writers_of.setdefault(target, set()).add(node)
    for folder in dict.fromkeys(nodes):  # each disk
        cache = folder / "runs" / "mn" / "cache"
        aligned = sorted(cache.glob("aligned-*.arrow"))
        assert len(aligned) == 2  # train and dev (test is not aligned by fit)
        for path in aligned:
            assert written[path] == 1, (path, written[path])  # built once, renamed into place
        layers = sorted(cache.glob("features/*/layer-*.npy"))
        # scalar mix: 4 hidden states, for train and for dev (other windows, other keys)
        assert len(layers) == (8 if fitted["frozen"] else 0)
        for path in layers:
            assert written[path] == 1, path
    checkpoints = nodes[0] / "checkpoints" / "mn"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["README.md", "best.ckpt", "last.ckpt"]
    for name in ("README.md", "best.ckpt", "last.ckpt"):
        assert writers_of[checkpoints / name] == {"0"}  # machine 0 alone writes checkpoints
    if layout == "separate":
        assert not (nodes[1] / "checkpoints").exists()
        assert sorted(p.name for p in (nodes[1] / "runs" / "mn").iterdir()) == ["cache"]
    assert not [t for t in written if ".partial-" in t.name or t.name.startswith("tmp")]


@pytest.fixture(scope="module")
def one_process(fitted, corpus, tmp_path_factory):
    """`ner test` and `ner predict` of the fitted checkpoint in this one process."""
    out = tmp_path_factory.mktemp("one-process")
    best = str(fitted["nodes"][0] / "checkpoints" / "mn" / "best.ckpt")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(out)
        evaluate_in_process(best, corpus, out)
    return out


def evaluate_in_process(best: str, corpus: Path, out: Path) -> None:
    run_lightning(["test", "--ckpt_path", best, "--data.test_file", str(corpus / "test.txt"),
                   "--output", str(out / "report"),
                   "--trainer.enable_progress_bar", "false"])  # fmt: skip
    run_lightning(["predict", "--ckpt_path", best, "--data.predict_file",
                   str(corpus / "test.txt"), "--data.predict_format", "conll",
                   "--output", str(out / "predicted.jsonl"),
                   "--trainer.enable_progress_bar", "false"])  # fmt: skip


def test_test_and_predict_on_two_machines_equal_one_process(fitted, one_process, corpus):
    nodes = fitted["nodes"]
    if fitted["layout"] == "separate":  # a machine without the shared disk gets a copy
        (nodes[1] / "checkpoints" / "mn").mkdir(parents=True)
        shutil.copy2(nodes[0] / "checkpoints" / "mn" / "best.ckpt", nodes[1] / "checkpoints" / "mn")
    best = "checkpoints/mn/best.ckpt"  # relative: each machine reads its own disk
    before = Counter(renames(fitted))
    test = ["test", "--ckpt_path", best, "--data.test_file", str(corpus / "test.txt")]
    launch(fitted, fitted["launcher"], [*test, "--output", "report"])
    launch(fitted, fitted["launcher"], ["predict", "--ckpt_path", best, "--data.predict_file",
                                        str(corpus / "test.txt"), "--data.predict_format", "conll",
                                        "--output", "predicted.jsonl"])  # fmt: skip
    single = json.loads((one_process / "report" / "best.test-report.json").read_text())
    report = json.loads((nodes[0] / "report" / "best.test-report.json").read_text())
    assert single["metrics"]["f1"] > (0.1 if fitted["frozen"] else 0.3)  # it learned (frozen: less)
    assert report["metrics"] == single["metrics"] and report["analysis"] == single["analysis"]
    expected = (one_process / "report" / "best.test-predictions.txt").read_text()
    assert (nodes[0] / "report" / "best.test-predictions.txt").read_text() == expected
    assert expected.count("\n\n") == 17
    predicted = (one_process / "predicted.jsonl").read_bytes()
    assert (nodes[0] / "predicted.jsonl").read_bytes() == predicted
    assert len(predicted.splitlines()) == 17
    new = Counter(renames(fitted)) - before
    # evaluation caches nothing: a frozen encoder's features live in each process's temp folder
    scratch = [folder / "tmp" for folder in nodes]
    outputs = Counter(t.name for (_, _, t), n in new.items() for _ in range(n)
                      if not any(t.is_relative_to(s) for s in scratch))  # fmt: skip
    # `ner test` also rewrites the fit's model card beside the checkpoint, once, where the
    # checkpoint's card has not got this test's scores yet (tests/test_model_card.py)
    assert outputs.pop("README.md", 0) <= 1
    assert outputs == {"best.test-report.json": 1, "best.test-predictions.txt": 1,
                       "predicted.jsonl": 1}  # fmt: skip
    if fitted["layout"] == "separate":
        assert not (nodes[1] / "report").exists() and not (nodes[1] / "predicted.jsonl").exists()


def test_resuming_where_one_machine_lacks_the_checkpoint_is_a_one_line_error(
    tmp_path, tiny_model_dir, corpus
):
    world = new_world(tmp_path, "separate")
    fit = ["fit", "-c", str(corpus / "fit.yaml"), "--model.encoder", str(tiny_model_dir),
           "--data.data_dir", str(corpus), "--run", "mn", "--trainer.precision", "32-true",
           "--trainer.enable_progress_bar", "false"]  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:  # machine 0 has a last.ckpt, machine 1 none
        patch.chdir(world["nodes"][0])
        run_lightning([*fit, "--trainer.max_epochs", "1"])
    errors = launch(world, "env", [*fit, "--ckpt_path", "last"], expect=2)
    for err in errors:
        [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert "the ranks would resume from different checkpoints" in line
        assert "rank 0: checkpoints/mn/last.ckpt" in line and "rank 1: none" in line
        assert "Traceback" not in err


def test_a_world_size_other_than_nodes_times_devices_is_a_one_line_error(tmp_path, corpus):
    world = new_world(tmp_path, "shared")
    two = [*TWO_NODES, "--trainer.num_nodes", "1"]  # torchrun starts 2 machines, 1 said
    args = ["fit", "-c", str(corpus / "fit.yaml"), "--data.data_dir", str(corpus)]
    errors = launch(world, "torchrun", args, expect=None, two=two)
    for err in errors:
        [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert line == (
            "error: the launcher starts 2 processes (torchrun: WORLD_SIZE=2, 1 a machine), but "
            "trainer.num_nodes x trainer.devices is 1 x 1 = 1: give --trainer.num_nodes 2 "
            "--trainer.devices 1"
        )


# ---- the launcher's world, checked before any process waits for another ----------------------
TORCHRUN = {"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
            "WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "x"}  # fmt: skip
SLURM = {"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2(x2)", "SLURM_JOB_NAME": "ner",
         "SLURM_NODELIST": "a,b", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
         "SLURM_NODEID": "0"}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "trainer", "message"),
    [
        (TORCHRUN, {"num_nodes": 2, "devices": 2, "accelerator": "cpu"}, None),
        (TORCHRUN, {"num_nodes": 2, "devices": "0,1", "accelerator": "gpu"}, None),
        (TORCHRUN, {"num_nodes": 1, "devices": 2, "accelerator": "cpu"},
         "the launcher starts 4 processes (torchrun: WORLD_SIZE=4, 2 a machine), but "
         "trainer.num_nodes x trainer.devices is 1 x 2 = 2: give --trainer.num_nodes 2 "
         "--trainer.devices 2"),
        (TORCHRUN, {"num_nodes": 4, "devices": "auto", "accelerator": "cpu"},
         "trainer.num_nodes x trainer.devices is 4 x 1 = 4: give --trainer.num_nodes 2 "
         "--trainer.devices 2"),  # the product agrees, the split between machines does not
        (SLURM, {"num_nodes": 2, "devices": [0, 1], "accelerator": "gpu"}, None),
        (SLURM, {"num_nodes": 2, "devices": 1, "accelerator": "cpu"},
         "the launcher starts 4 processes (SLURM_NTASKS=4, 2 a machine)"),
        ({"WORLD_SIZE": "2", "NODE_RANK": "1"}, {"num_nodes": 2, "devices": 1}, None),
        ({"WORLD_SIZE": "2"}, {"num_nodes": 2, "devices": 2},
         "the launcher starts 2 processes (WORLD_SIZE=2), but trainer.num_nodes x "
         "trainer.devices is 2 x 2 = 4"),
        ({"NODE_RANK": "1"}, {"num_nodes": None, "devices": 1},
         "trainer.num_nodes: is 1, but NODE_RANK is 1: give every machine --trainer.num_nodes N"),
        ({}, {"num_nodes": 3, "devices": 5}, None),  # Lightning starts them: nothing to check
    ],
)  # fmt: skip
def test_world_size_check(monkeypatch, env, trainer, message):
    for name in [*TORCHRUN, *SLURM, "NODE_RANK", "MASTER_ADDR"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    if message is None:
        launch_checks.check_world_size(trainer)
        return
    with pytest.raises(NERError) as caught:
        launch_checks.check_world_size(trainer)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_check_runs_before_anything_is_built(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("NODE_RANK", "1")
    code, _, err = run_ner(["fit", "--model.encoder", str(tmp_path / "no-such-model")], capsys)
    assert code == 2 and err.startswith("error: trainer.num_nodes: is 1, but NODE_RANK is 1")


def test_end_process_group_takes_a_real_group_down():
    store = torch.distributed.TCPStore("127.0.0.1", free_port(), 1, is_master=True)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    assert torch.distributed.is_initialized()
    launch_checks.end_process_group()
    assert not torch.distributed.is_initialized()
    launch_checks.end_process_group()  # none left: nothing to do


def test_every_lightning_command_ends_the_process_group(monkeypatch, capsys, trained,
                                                        tiny_corpus_dir):  # fmt: skip
    calls = []
    monkeypatch.setattr(lightning, "end_process_group", lambda: calls.append(1))
    best = str(trained["ckpt"] / "best.ckpt")
    code, out, err = run_ner(["validate", "--ckpt_path", best, "--data.val_file",
                              str(tiny_corpus_dir / "dev.txt"),
                              "--trainer.enable_progress_bar", "false"], capsys)  # fmt: skip
    assert code == 0 and calls == [1], err
    code, _, err = run_ner(["test", "--ckpt_path", best], capsys)  # no test data: an error
    assert code == 2 and calls == [1, 1], err


def options_of(call: list[str]) -> dict[str, str]:
    """`--name value` pairs of one command line."""
    return {name: value for name, value in zip(call, call[1:], strict=False)}


@pytest.mark.parametrize(
    ("env", "devices", "per_rank"),
    [({"SLURM_GPUS_PER_NODE": "a100:4"}, "4", "2"), ({"SLURM_NTASKS_PER_NODE": "8(x2)"}, "8", "1")],
)
def test_the_sbatch_script_launches_both_commands_on_every_rank(tmp_path, env, devices, per_rank):
    script = ROOT / "scripts" / "slurm" / "fit-2-nodes.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    shim = tmp_path / "bin" / "srun"  # records the command srun would start on every rank
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n')
    shim.chmod(0o755)
    slurm = {"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "8", **env}
    env = {**os.environ, **slurm, "PATH": f"{shim.parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(script)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    fit, test = (line.split() for line in (tmp_path / "calls").read_text().splitlines())
    for call in (fit, test):
        options = options_of(call)
        assert options["--trainer.num_nodes"] == "2" and options["--trainer.devices"] == devices
        assert options["--trainer.strategy"] == "ddp"
        assert options["--trainer.precision"] == "bf16-mixed"
    assert fit[:3] == ["--kill-on-bad-exit=1", ".venv/bin/ner", "fit"]
    assert options_of(fit)["--data.batch_size"] == per_rank  # 16 sentences a step in all
    assert options_of(test)["--ckpt_path"] == "checkpoints/slurm/ner-7/best.ckpt"
