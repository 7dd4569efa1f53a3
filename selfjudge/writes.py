"""Writing a job's output files: whole or not at all, with the umask's mode, never through a link.

Every file the package writes goes through :func:`replacing`: the content goes to a fresh
temporary file beside the target (``mkstemp``: a random name, created exclusively, so nothing
planted in the folder can redirect it), gets the mode ``open()`` would have given (0666 less the
umask; ``mkstemp`` and safetensors' ``save_file`` create 0600), and is then renamed over the
target. A rename replaces a symbolic link at the target instead of writing through it, so a link
planted under an output file's name never lets a job write outside its folder, and an interrupted
write leaves the old file or none, never half of one. Files that grow (progress records, logs)
are opened with :func:`open_append`, which replaces a link the same way and opens with
``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["replacing", "write_text", "write_json", "save_safetensors", "save_figure", "open_append", "own_files",
           "file_mode"]

_umask_lock = threading.Lock()


def file_mode() -> int:
    """0666 less the process's umask: the mode ``open()`` gives a new file."""
    with _umask_lock:  # os.umask only reads by setting: set and restore under a lock
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; when the block ends without an exception,
    give it the umask's mode and rename it over ``path`` (replacing a link there, never following
    it); on an exception remove it. Raises ``IsADirectoryError`` when ``path`` is a folder."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        _fsync(tmp)  # durable before it is visible: a crash leaves the old file, not an empty one
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> None:
    write_text(path, json.dumps(obj, indent=indent))


def save_safetensors(tensors: dict, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """``safetensors.torch.save_file(tensors, path, metadata)`` through :func:`replacing`."""
    from safetensors.torch import save_file

    with replacing(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def save_figure(fig, path: str | os.PathLike, **savefig_kwargs) -> None:
    """``fig.savefig(path)`` through :func:`replacing`, in the format ``path``'s suffix names."""
    suffix = Path(path).suffix.lstrip(".") or "png"
    with replacing(path) as tmp:
        fig.savefig(tmp, format=suffix, **savefig_kwargs)


def own_files(folder: str | os.PathLike, pattern: str) -> list[Path]:
    """The files matching ``pattern`` in ``folder`` that a writer of this module can have left:
    sorted, symbolic links excluded (every writer replaces a link, so a link is never a job's own
    output, and a dangling one would fail the reader)."""
    return sorted(p for p in Path(folder).glob(pattern) if not p.is_symlink())


def open_append(path: str | os.PathLike):
    """``open(path, "a")`` that never appends through a symbolic link: a link at ``path`` (never
    one of the package's own files) is removed and a fresh file started, as a rename would replace
    it; ``O_NOFOLLOW`` refuses (``OSError``) a link planted in between."""
    if os.path.islink(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, file_mode())
    return os.fdopen(fd, "a", encoding="utf-8")
