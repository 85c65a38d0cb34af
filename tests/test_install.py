"""The install is reproducible: constraints.txt pins every direct dependency pyproject.toml names
(core, every extra, dev) to one version inside pyproject's range, and the running environment
holds exactly those versions. Offline: it reads the two files and the installed metadata."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = canonicalize_name(PROJECT["name"])


def pins() -> dict[str, Version]:
    """constraints.txt's pins, by canonical name; every line is `name==version`, once."""
    found: dict[str, Version] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"not an exact pin: {line}"
        assert not req.extras and req.marker is None and req.url is None, line
        name = canonicalize_name(req.name)
        assert name not in found, f"pinned twice: {name}"
        found[name] = Version(specs[0].version)
    return found


def direct(extras: list[str] | None = None) -> list[Requirement]:
    """The requirements of the core and of the named extras (all of them, dev included, when
    none are named), `ner[a,b]` self-references resolved to those extras' requirements."""
    optional = PROJECT["optional-dependencies"]
    todo = [*PROJECT["dependencies"]] if extras is None else []
    for extra in optional if extras is None else extras:
        todo.extend(optional[extra])
    found, seen = [], set()
    while todo:
        req = Requirement(todo.pop())
        if canonicalize_name(req.name) == NAME:
            todo.extend(r for e in sorted(req.extras - seen) for r in optional[e])
            seen |= req.extras
        elif (req.marker is None or req.marker.evaluate()) and str(req) not in map(str, found):
            found.append(req)
    return found


def test_constraints_pin_exact_build_agnostic_versions():
    found = pins()
    assert len(found) > 50  # the whole closure, not only the direct dependencies
    assert NAME not in found  # the project itself is installed from the working tree
    assert all(v.local is None for v in found.values()), "a local tag (+cpu) pins one build"
    header = CONSTRAINTS.read_text().split("\n\n", 1)[0]
    assert "bash scripts/setup.sh --lock" in header  # how to regenerate it


def test_self_references_resolve_to_the_extras():
    names = {canonicalize_name(r.name) for r in direct(["all"])}
    assert {"matplotlib", "onnx", "litserve", "tensorboard"} <= names
    assert NAME not in names


@pytest.mark.parametrize("req", direct(), ids=str)
def test_every_direct_dependency_is_pinned_inside_its_range(req):
    pinned = pins().get(canonicalize_name(req.name))
    assert pinned is not None, f"{req.name} is not pinned in constraints.txt"
    assert req.specifier.contains(pinned, prereleases=True), f"{req.name}=={pinned} vs {req}"


@pytest.mark.parametrize("req", direct(), ids=str)
def test_the_environment_holds_the_pinned_versions(req):
    pinned = pins()[canonicalize_name(req.name)]
    installed = importlib.metadata.version(req.name)
    # PEP 440's ==: the pin 2.13.0 holds for 2.13.0+cpu, as it does for pip
    assert SpecifierSet(f"=={pinned}").contains(installed, prereleases=True), (
        f"{req.name} {installed} installed, {pinned} pinned: scripts/setup.sh installs the pins"
    )


def test_setup_installs_from_the_constraints():
    script = (ROOT / "scripts" / "setup.sh").read_text()
    assert "CONSTRAINTS=constraints.txt" in script
    assert '-c "$pins" -e ".[all,dev]"' in script
