"""Cache directory and atomic folder writes for converted / assembled models.

Everything selfjudge derives from the installed wheels (the dequantised target, the
assembled draft) is written once into a user cache folder and reused. Writes go to a
temporary sibling folder that is renamed into place only when complete, so an
interrupted conversion never leaves a half-written folder that would later load.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

CACHE_ENV = "SELFJUDGE_CACHE"
COMPLETE_MARKER = "selfjudge_complete.json"


def default_cache_dir() -> Path:
    """``$SELFJUDGE_CACHE`` if set, else ``~/.cache/selfjudge`` (not created here)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "selfjudge"


def is_complete(folder: str | os.PathLike) -> bool:
    """True when ``folder`` was finished by :func:`atomic_folder` and still holds what it wrote: its
    marker lists every file's size, and each is there at that size (a file truncated or removed
    later, or a marker of an older version without sizes, means the entry is made again)."""
    try:
        marker = json.loads((Path(folder) / COMPLETE_MARKER).read_text(encoding="utf-8"))
        files = marker["files"]
        return isinstance(files, dict) and all(
            (Path(folder) / name).is_file() and (Path(folder) / name).stat().st_size == size
            for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False


def _seal(folder: Path, marker_text: str) -> None:
    """Give every file the umask's mode (``save_pretrained`` writes 0600) and write the marker:
    ``marker_text`` (a JSON object) plus each file's size."""
    from selfjudge.writes import file_mode, write_json

    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            os.chmod(path, file_mode())
            files[str(path.relative_to(folder))] = path.stat().st_size
    marker = json.loads(marker_text)
    if not isinstance(marker, dict):
        raise ValueError(f"marker_text must be a JSON object, got {marker_text!r:.80}")
    write_json(folder / COMPLETE_MARKER, {**marker, "files": files}, indent=None)


@contextlib.contextmanager
def atomic_folder(final: str | os.PathLike, marker_text: str = "{}") -> Iterator[Path]:
    """Yield a temporary folder next to ``final``; on success rename it to ``final``.

    The marker file ``selfjudge_complete.json`` (``marker_text``, a JSON object, plus the size of
    every file written) is written last inside the temporary folder, so a folder is complete iff
    it has the marker and its files still have those sizes (:func:`is_complete`).
    On an exception the temporary folder is removed and ``final`` is untouched. If
    ``final`` already exists (e.g. an older or incomplete copy, or another process
    finished first), it is replaced.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    os.chmod(tmp, 0o755)
    try:
        yield tmp
        _seal(tmp, marker_text)
        if final.exists():
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def entry_lock(final: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on the cache entry ``final`` (``.<name>.lock`` beside it), waiting for
    another process that holds it, so two first runs make the entry once instead of racing. The
    kernel drops the lock when its holder exits, however it exits."""
    import fcntl

    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(final.parent / f".{final.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def remove_stale_temporaries(final: str | os.PathLike) -> None:
    """Remove what killed writers of ``final`` left beside it (``.<name>.tmp-*``, ``.<name>.old-*``).
    Call it only while holding :func:`entry_lock` on ``final``, when no writer can be running."""
    final = Path(final)
    for pattern in (f".{final.name}.tmp-*", f".{final.name}.old-*"):
        for path in final.parent.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def make_once(final: str | os.PathLike, make) -> Path:
    """The cache entry ``final``, made by ``make()`` (which writes it through :func:`atomic_folder`)
    unless it is complete; under the entry's lock, after sweeping what killed writers left, so two
    first runs make it once and a kill at any instant leaves nothing the next run trusts."""
    final = Path(final)
    if is_complete(final):
        return final
    with entry_lock(final):
        if is_complete(final):  # another process finished it while this one waited
            return final
        remove_stale_temporaries(final)
        make()
    return final
