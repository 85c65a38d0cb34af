"""`ner seeds`: several seeds of one config, each scored on dev, summarised as mean ± std."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT, one_line_error, run_ner

from ner.cli.seeds import differences
from ner.evaluation.spread import markdown, mean_std, summary


def report(f1: float, per: float) -> dict:
    return {"f1": f1, "f1_LOC": per, "f1_PER": 1.0}


def test_mean_and_sample_std_by_hand():
    assert mean_std([0.5]) == (0.5, None)  # one seed: no spread, not a spread of 0
    mean, std = mean_std([1.0, 2.0, 4.0])
    assert mean == pytest.approx(7 / 3)
    # sample variance: ((1-7/3)^2 + (2-7/3)^2 + (4-7/3)^2) / 2 = 14/9 / ... = 2.3333
    assert std == pytest.approx(((16 / 9 + 1 / 9 + 25 / 9) / 2) ** 0.5)


def test_summary_and_table_of_three_seeds():
    runs = [
        {"seed": s, "fit_s": 10.0 * s, "dev": report(f, 0.5), "test": report(f - 0.1, 0.4)}
        for s, f in ((1, 0.90), (2, 0.92), (3, 0.94))
    ]
    stats = summary(runs)
    assert stats["seeds"] == [1, 2, 3]
    assert stats["dev"]["f1"] == pytest.approx((92.0, 2.0))
    assert stats["test"]["f1_LOC"] == pytest.approx((40.0, 0.0))
    table = markdown("exp", runs).splitlines()
    assert (
        table[0]
        == "| run | seed | dev F1 | dev LOC | dev PER | test F1 | test LOC | test PER | fit s |"
    )
    assert table[2] == "| exp | 1 | 90.00 | 50.00 | 100.00 | 80.00 | 40.00 | 100.00 | 10 |"
    assert table[-1] == (
        "| exp | mean ± std | 92.00 ± 2.00 | 50.00 ± 0.00 | 100.00 ± 0.00 | 82.00 ± 2.00 "
        "| 40.00 ± 0.00 | 100.00 ± 0.00 | 20 ± 10 |"
    )
    assert "test" not in summary([{k: v for k, v in r.items() if k != "test"} for r in runs])


def test_one_seed_prints_no_spread():
    """Regression: a single seed printed `92.64 ± 0.00`, as if it had been stable over seeds."""
    table = markdown("exp", [{"seed": 1, "fit_s": 12.0, "dev": report(0.9, 0.5)}])
    assert table.splitlines()[-1] == (
        "| exp | mean ± std | 90.00 ± n/a | 50.00 ± n/a | 100.00 ± n/a | 12 ± n/a |"
    )


def test_ner_seeds_trains_and_scores_each_seed(
    tmp_path, tiny_model_dir, tiny_corpus_dir, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    argv = ["seeds", "--seeds", "1", "2", "--run", "tiny",
            "-c", str(ROOT / "configs" / "trainer.yaml"), "--model.encoder", str(tiny_model_dir),
            "--data.data_dir", str(tiny_corpus_dir), "--trainer.max_epochs", "2",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    code, out, err = run_ner(argv, capsys)
    assert code == 0, err
    saved = json.loads((tmp_path / "runs" / "tiny" / "seeds.json").read_text())
    assert [r["seed"] for r in saved["runs"]] == [1, 2]
    for run in saved["runs"]:
        ckpt = tmp_path / "checkpoints" / "tiny" / f"seed-{run['seed']}" / "best.ckpt"
        assert run["checkpoint"].endswith(str(ckpt.relative_to(tmp_path)))
        dev = json.loads((ckpt.parent / "dev" / "best.test-report.json").read_text())
        assert dev["metrics"]["f1"] == run["dev"]["f1"] and "test" not in run
    assert "mean ± std" in out and (tmp_path / "runs" / "tiny" / "seeds.md").is_file()
    # run again: every seed is read back from its seed.json, nothing is trained
    import ner.cli.seeds as seeds

    monkeypatch.setattr(seeds, "_train_and_score", lambda *a: pytest.fail("trained again"))
    code, again, err = run_ner(argv, capsys)
    assert code == 0, err
    assert again.splitlines()[-2] == out.splitlines()[-2]  # the same mean ± std row
    # --test later: each seed's saved best.ckpt is scored on test, still nothing is trained
    code, tested, err = run_ner([*argv, "--test"], capsys)
    assert code == 0, err
    saved = json.loads((tmp_path / "runs" / "tiny" / "seeds.json").read_text())
    for run in saved["runs"]:
        test = tmp_path / "checkpoints" / "tiny" / f"seed-{run['seed']}" / "test"
        report = json.loads((test / "best.test-report.json").read_text())
        assert report["metrics"]["f1"] == run["test"]["f1"]
    assert "test F1" in tested
    # its record keeps the config it trained with: `--from-record` resolves it to the same
    # recipe, so each seed is read back again, nothing trained
    code, _, err = run_ner(["results", "save", "tiny", "--seeds", "runs/tiny/seeds.json",
                            "--label", "tiny", "--records", "records"], capsys)  # fmt: skip
    assert code == 0, err
    assert json.loads(open("records/tiny.json").read())["config"] == saved["config"]
    code, again, err = run_ner(["seeds", "--seeds", "1", "2", "--test", "--from-record",
                                "records/tiny.json", "--run", "tiny"], capsys)  # fmt: skip
    assert code == 0, err
    assert again.splitlines()[-2] == tested.splitlines()[-2]


def test_a_seed_whose_config_changed_is_trained_again(
    tmp_path, tiny_model_dir, tiny_corpus_dir, capsys, monkeypatch
):
    """The same options no longer mean the same recipe when a config file (or a default) they
    name has changed since: that seed is trained again, not read back as if it were current."""
    import ner.cli.seeds as seeds

    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("data:\n  batch_size: 4\n")
    argv = ["seeds", "--seeds", "1", "--run", "tiny",
            "-c", str(ROOT / "configs" / "trainer.yaml"), "-c", str(recipe),
            "--model.encoder", str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
            "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    assert run_ner(argv, capsys)[0] == 0
    record = tmp_path / "checkpoints" / "tiny" / "seed-1" / "seed.json"
    assert json.loads(record.read_text())["recipe"]["data"]["batch_size"] == 4
    # a seed.json from before recipes were recorded: the run's config.yaml stands in for it
    done = json.loads(record.read_text())
    del done["recipe"]
    record.write_text(json.dumps(done))
    monkeypatch.setattr(seeds, "_train_and_score", lambda *a: pytest.fail("trained again"))
    code, _, err = run_ner(argv, capsys)
    assert code == 0, err
    # the same configuration spelled otherwise (a relative path): still read back
    code, _, err = run_ner([a if a != str(recipe) else "recipe.yaml" for a in argv], capsys)
    assert code == 0, err
    # the file changes under the same options: trained again, saying what changed
    recipe.write_text("data:\n  batch_size: 8\n")
    trained = []
    monkeypatch.setattr(seeds, "_train_and_score", lambda *a: trained.append(a) or done["result"])
    code, _, err = run_ner(argv, capsys)
    assert code == 0, err
    assert len(trained) == 1 and "data.batch_size: 4 -> 8" in err and "training again" in err
    assert json.loads(record.read_text())["recipe"]["data"]["batch_size"] == 8


def test_differences_name_each_changed_key():
    before = {"data": {"batch_size": 32, "seed": 1}, "trainer": {"max_epochs": 3}}
    now = {"data": {"batch_size": 16, "seed": 1}, "trainer": {"max_epochs": 3, "x": None}}
    assert differences(before, now) == ["data.batch_size: 32 -> 16"]
    assert differences(before, {**now, "trainer": {"max_epochs": 5}}) == [
        "data.batch_size: 32 -> 16", "trainer.max_epochs: 3 -> 5"]  # fmt: skip


@pytest.fixture
def no_training(monkeypatch):
    """`ner seeds` with each seed's training and scoring replaced by a record of the call."""
    import ner.cli.seeds as seeds

    calls = []

    def train(seed, name, fit_args, test):
        calls.append((name, seed))
        (Path("checkpoints") / name / f"seed-{seed}").mkdir(parents=True)  # as a fit makes it
        return {"seed": seed, "fit_s": 1.0, "checkpoint": "x", "dev": {"f1": 0.5}}

    monkeypatch.setattr(seeds, "_train_and_score", train)
    return calls


def tiny_options(tiny_model_dir, tiny_corpus_dir) -> list[str]:
    return ["-c", str(ROOT / "configs" / "trainer.yaml"), "--model.encoder", str(tiny_model_dir),
            "--data.data_dir", str(tiny_corpus_dir)]  # fmt: skip


def test_several_experiments_run_one_after_the_other(
    tiny_model_dir, tiny_corpus_dir, no_training, capsys
):
    """`--experiment A B`: a run each, exp/A then exp/B, each with its own recipe file."""
    argv = ["seeds", "--seeds", "1", "2", "--experiment", "quick", "epochs5",
            *tiny_options(tiny_model_dir, tiny_corpus_dir)]  # fmt: skip
    code, out, err = run_ner(argv, capsys)
    assert code == 0, err
    assert no_training == [("exp/quick", 1), ("exp/quick", 2), ("exp/epochs5", 1),
                           ("exp/epochs5", 2)]  # fmt: skip
    epochs = {}
    for name in ("quick", "epochs5"):
        saved = json.loads(open(f"runs/exp/{name}/seeds.json").read())
        assert saved["fit_args"][-1] == str(ROOT / "configs" / "experiment" / f"{name}.yaml")
        epochs[name] = saved["config"]["trainer"]["max_epochs"]
    assert epochs == {"quick": 2, "epochs5": 5}
    assert out.count("mean ± std") == 2
    code, _, err = run_ner([*argv, "--run", "one"], capsys)
    assert "--run: names one run" in one_line_error(code, err)
    code, _, err = run_ner(["seeds", "--experiment", "quick", "nothing"], capsys)
    assert "no experiment 'nothing'" in one_line_error(code, err)
    assert len(no_training) == 4  # a bad name fails before any run trains


def test_a_record_runs_again_from_its_config(
    tiny_model_dir, tiny_corpus_dir, no_training, capsys, tmp_path
):
    """`--from-record`: the record's config, options on top, as exp/RECORD; the offline
    default's config is not read."""
    from ner.cli.seeds import fit_config

    config = fit_config([*tiny_options(tiny_model_dir, tiny_corpus_dir), "--data.batch_size", "3"])
    (tmp_path / "rung.json").write_text(json.dumps({"label": "r", "config": config, "runs": []}))
    argv = ["seeds", "--seeds", "1", "--from-record", "rung.json", "--trainer.max_epochs", "7"]
    code, _, err = run_ner(argv, capsys)
    assert code == 0, err
    assert no_training == [("exp/rung", 1)]
    recipe = json.loads(open("checkpoints/exp/rung/seed-1/seed.json").read())["recipe"]
    assert recipe["data"]["batch_size"] == 3 and recipe["trainer"]["max_epochs"] == 7
    assert recipe["model"]["encoder"] == str(tiny_model_dir)
    assert recipe["seed_everything"] == 1 and recipe["run"] == "exp/rung/seed-1"
    (tmp_path / "bare.json").write_text(json.dumps({"label": "b", "summary": {}}))
    code, _, err = run_ner(["seeds", "--from-record", "bare.json"], capsys)
    assert "bare.json: the record holds no config" in one_line_error(code, err)
