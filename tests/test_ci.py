"""CI tests everything it names: under CI=true a skip fails the run (tests/ci_plugin.py), and
.ci/run sets CI=true itself, then runs the README's test command."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import ROOT

SKIPPING = """
import pytest

def test_passes():
    pass

def test_skips():
    pytest.skip("no data here")

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False
"""


def run(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(SKIPPING)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT / "tests")
    if ci is not None:
        env["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-p", "ci_plugin", "-p", "no:cacheprovider",
               "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")]  # fmt: skip
    return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True)


def test_a_skip_fails_under_ci(tmp_path):
    result = run(tmp_path, "true")
    assert result.returncode == 1, result.stdout
    assert "skipped under CI=true, where nothing may skip: Skipped: no data here" in result.stdout
    assert "1 failed, 1 passed, 1 xfailed" in result.stdout  # an expected failure stays one


def test_a_skip_is_a_skip_elsewhere(tmp_path):
    result = run(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 1 skipped, 1 xfailed" in result.stdout


def test_ci_run_sets_ci_and_reports_skips():
    script = (ROOT / ".ci" / "run").read_text()
    assert "export CI=true" in script
    assert script.rstrip().endswith("bash scripts/setup.sh && .venv/bin/python -m pytest")
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest\n" in readme  # the same command
