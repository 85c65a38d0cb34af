"""`ner results`: the docs' results tables come from the runs' records, figures checked against
values computed here from planted runs; the repository's docs match their records."""

from __future__ import annotations

import json
import statistics
import subprocess

import pytest
from helpers import ROOT, one_line_error, run_ner

from benchmarks.common import parse_table
from ner.cli import results as command
from ner.evaluation import bench_records
from ner.evaluation import records as results
from ner.utils.errors import NERError


def planted_runs() -> list[dict]:
    runs = []
    for seed, (dev, per, test) in enumerate(((0.91, 0.80, 0.88), (0.93, 0.84, 0.87)), 1):
        runs.append({
            "seed": seed, "fit_s": 100.0 * seed, "checkpoint": f"ckpt-{seed}",
            "dev": {"f1": dev, "f1_PER": per, "f1_LOC": 0.5, "precision": 0.1, "support_PER": 7},
            "test": {"f1": test, "f1_PER": per, "f1_LOC": 0.5},
        })  # fmt: skip
    return runs


def test_a_saved_run_renders_its_mean_and_sample_std(tmp_path):
    seeds_json = tmp_path / "seeds.json"
    config = {"model": {"encoder_lr": 1e-4}, "data": {"batch_size": 16}}
    seeds_json.write_text(json.dumps({"runs": planted_runs(), "config": config}))
    records = tmp_path / "records"
    runs, found = results.seeds_runs(seeds_json)
    path = results.save("exp/a", runs, "recipe A", "ner seeds --seeds 1 2", records, found)
    kept = json.loads(path.read_text())
    assert kept["runs"][0]["dev"] == {"f1": 0.91, "f1_PER": 0.80, "f1_LOC": 0.5}  # F1s only
    assert kept["command"] == "ner seeds --seeds 1 2" and "checkpoint" not in kept["runs"][0]
    assert kept["config"] == config  # what `ner seeds --from-record` trains again
    headers, rows = parse_table(results.table("splits=dev,test rows=exp/a", records))
    assert headers == ["run", "seeds", "dev F1", "dev LOC", "dev PER", "test F1", "test LOC",
                       "test PER", "fit s", "record"]  # fmt: skip
    dev_std = statistics.stdev([91.0, 93.0])
    assert rows == [["recipe A", "1 2", f"92.00 ± {dev_std:.2f}", "50.00 ± 0.00",
                     f"82.00 ± {statistics.stdev([80.0, 84.0]):.2f}", "87.50 ± 0.71",
                     "50.00 ± 0.00", f"82.00 ± {statistics.stdev([80.0, 84.0]):.2f}", "150 ± 71",
                     "[exp/a](runs/exp/a.json)"]]  # fmt: skip


def test_the_save_command_keeps_the_command_it_is_given(tmp_path, capsys):
    """Regression: the subcommand's dest was `command`, so `--command` replaced the subcommand
    and `save` fell through to `render`."""
    seeds_json = tmp_path / "seeds.json"
    seeds_json.write_text(json.dumps({"runs": planted_runs()}))
    records = tmp_path / "records"
    code, out, err = run_ner(["results", "save", "b", "--seeds", str(seeds_json), "--label", "B",
                              "--command", "ner seeds --seeds 1 2", "--records", str(records)],
                             capsys)  # fmt: skip
    assert code == 0, err
    kept = json.loads((records / "b.json").read_text())
    assert kept["label"] == "B" and kept["command"] == "ner seeds --seeds 1 2"
    assert "config" not in kept  # a seeds.json that holds none
    assert out.strip() == str(records / "b.json")


def test_the_records_are_not_ignored_by_git():
    """Regression: `runs/` in .gitignore also ignored docs/runs/, so a clean clone had no
    records and the docs check failed there."""
    record = "docs/runs/ladder/default.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", record], cwd=ROOT, check=False)
    assert ignored.returncode == 1, f"{record} is ignored by .gitignore"


def test_hf_recipe_folders_and_summary_only_records(tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    for run in planted_runs()[::-1]:
        (hf / f"seed-{run['seed']}.json").write_text(json.dumps(run))
    records = tmp_path / "records"
    results.save("hf", results.hf_runs(hf), "HF", "ner bench hf_recipe", records)
    assert [r["seed"] for r in json.loads((records / "hf.json").read_text())["runs"]] == [1, 2]
    old = {"label": "old", "source": "transcribed", "summary": {
        "seeds": [1], "dev": {"f1": [90.0, None], "f1_PER": [95.0, None]}}}  # fmt: skip
    (records / "old.json").write_text(json.dumps(old))
    _, rows = parse_table(results.table("splits=dev rows=old,hf", records))
    assert rows[0] == ["old", "1", "90.00 ± n/a", "", "95.00 ± n/a", "",
                       "[old](runs/old.json) (summary only)"]  # fmt: skip
    assert rows[1][:3] == ["HF", "1 2", f"92.00 ± {statistics.stdev([91.0, 93.0]):.2f}"]


def test_render_fills_blocks_and_check_catches_a_stale_one(tmp_path, capsys):
    records = tmp_path / "records"
    results.save("a", planted_runs(), "A", "", records)
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# x\n<!-- results:start splits=dev rows=a -->\n| stale |\n<!-- results:end -->\n"
    )
    before, after = results.render(doc, records)
    assert "| stale |" in before and "| stale |" not in after
    assert after.startswith("# x\n<!-- results:start splits=dev rows=a -->\n| run | seeds |")
    render = ["results", "render", str(doc), "--records", str(records)]
    code, _, err = run_ner([*render, "--check"], capsys)  # a failed check: 1, not bad input's 2
    assert (code, err) == (1, f"error: {doc}: a results block is not what the records render;"
                              " run `ner results render`\n")  # fmt: skip
    assert doc.read_text() == before  # --check writes nothing
    assert run_ner(render, capsys)[:2] == (0, f"{doc}: rendered\n")
    assert doc.read_text() == after
    assert run_ner([*render, "--check"], capsys)[:2] == (0, f"{doc}: up to date\n")


def test_the_docs_tables_are_what_their_records_render(capsys):
    docs = [ROOT / "docs" / "results.md", ROOT / "README.md", ROOT / "docs" / "performance.md"]
    assert command.DOCS == docs
    assert command.RECORDS == ROOT / "docs" / "runs"
    for doc in command.DOCS:
        before, after = results.render(doc, command.RECORDS)
        assert "<!-- results:start" in before or "<!-- bench:start" in before
        assert bench_records.fill(after, command.RECORDS) == before, (
            f"{doc}: run `ner results render`"
        )
    code, out, err = run_ner(["results", "render", "--check"], capsys)
    assert code == 0, err


def test_an_ensemble_record_is_one_row_without_fit_time(tmp_path):
    """Also from a file of one report a model (scored before the weights were keys)."""
    scored = []
    for split, f1 in (("dev", 0.9), ("test", 0.8)):
        path = tmp_path / f"{split}.json"
        path.write_text(json.dumps({"m1": {"f1": 0.1}, "ensemble": {"f1": f1, "f1_PER": 0.5}}))
        scored.append(path)
    records = tmp_path / "records"
    results.save("ens", results.score_runs(scored, None, of_ensemble=True), "E", "", records)
    _, rows = parse_table(results.table("splits=dev,test rows=ens", records))
    assert rows == [["E", "ensemble", "90.00 ± n/a", "50.00 ± n/a", "80.00 ± n/a",
                     "50.00 ± n/a", "", "[ens](runs/ens.json)"]]  # fmt: skip


def test_a_compact_block_has_overall_f1_only_and_links_where_told(tmp_path):
    records = tmp_path / "records"
    results.save("a", planted_runs(), "A", "ner seeds --seeds 1 2", records)
    headers, rows = parse_table(
        results.table("splits=dev rows=a types=none link=docs/runs", records)
    )
    assert headers == ["run", "seeds", "dev F1", "fit s", "record"]
    assert rows[0][-1] == "[a](docs/runs/a.json)"
    headers, rows = parse_table(results.table("splits=dev rows=a commands=yes", records))
    assert headers[-2:] == ["record", "command"]
    assert rows[0][-2:] == ["[a](runs/a.json)", "`ner seeds --seeds 1 2`"]


def test_more_than_dev_and_test_is_refused(tmp_path, capsys):
    files = [str(tmp_path / f"{n}.json") for n in ("dev", "test", "other")]
    code, _, err = run_ner(["results", "save", "e", "--score", *files, "--label", "E",
                            "--records", str(tmp_path)], capsys)  # fmt: skip
    assert "at most a test JSON" in one_line_error(code, err)
    code, _, err = run_ner(["results", "save", "e", "--hf", str(tmp_path), "--weight", "1",
                            "--label", "E"], capsys)  # fmt: skip
    assert "--weight and --of-ensemble choose among the rows of --score" in one_line_error(
        code, err
    )


def test_score_records_keep_one_weight_per_checkpoint_or_the_ensemble(tmp_path):
    files = []
    for split, base in (("dev", 0.9), ("test", 0.8)):
        scored = {
            name: {"0.0": {"f1": base}, "0.5": {"f1": base + bump, "f1_PER": 0.5}}
            for name, bump in (("ck/seed-1/best.ckpt", 0.01), ("ck/seed-2/best.ckpt", 0.03),
                               ("ensemble", 0.05))
        }  # fmt: skip
        files.append(tmp_path / f"{split}.json")
        files[-1].write_text(json.dumps(scored))
    runs = results.score_runs(files, 0.5, of_ensemble=False)
    assert [r["seed"] for r in runs] == [1, 2]
    assert [r["dev"]["f1"] for r in runs] == pytest.approx([0.91, 0.93])
    assert [r["test"]["f1"] for r in runs] == pytest.approx([0.81, 0.83])
    (ensemble,) = results.score_runs(files[:1], 0.5, of_ensemble=True)
    assert ensemble == {"seed": "ensemble", "dev": {"f1": pytest.approx(0.95), "f1_PER": 0.5}}
    with pytest.raises(NERError, match="at weight 2.0"):
        results.score_runs(files, 2.0, of_ensemble=False)
    with pytest.raises(NERError, match="scored at weights 0.0, 0.5: give --weight"):
        results.score_runs(files, None, of_ensemble=False)
