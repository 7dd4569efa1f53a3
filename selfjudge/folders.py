"""Output folders of long jobs: one writer at a time, and starting over only in a folder the job made.

Every job that writes a folder (label, autojudge-label, distill-draft, train-eagle,
bench, demo) holds :func:`lock_folder` while it writes: an exclusive ``flock`` on
``DIR/.selfjudge.lock`` that records the holder's pid and command. A second job
pointed at the same folder fails at once with a ``ValueError`` naming the folder
and the holder, instead of interleaving rows; the kernel drops the lock when the
holder exits, however it exits (SIGKILL included), so a stale lock never blocks.

:func:`remove_job_folder` is what ``--no-resume`` does: it removes only the files a
job of that kind writes, and only when the folder's manifest says that kind of job
made it; a folder holding anything else (a home directory, a source tree, another
job's output) is refused untouched.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from pathlib import Path
from typing import Iterable

LOCK_FILE = ".selfjudge.lock"


class FolderLock:
    """An exclusive lock on an output folder (released by :meth:`release`, ``with`` or process exit)."""

    def __init__(self, folder: str | os.PathLike, command: str | None = None):
        self._fd = None  # set first: a refused lock file leaves nothing for __del__ to release
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / LOCK_FILE
        self._fd = _open_lock_file(path)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(self._fd)
            os.close(self._fd)
            self._fd = None
            raise ValueError(
                f"out: {self.folder} is in use by another selfjudge job ({holder}); "
                "wait for it to finish or choose another output folder") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps({"pid": os.getpid(), "command": command}).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:  # a lock dropped without release() must not outlive its owner object
        try:
            self.release()
        except OSError:
            pass


def _open_lock_file(path: Path) -> int:
    """Open (creating) the lock file without following a link: a planted symbolic link or hard link
    would make the lock's record truncate and overwrite a file outside the folder."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as err:
        if path.is_symlink():
            raise ValueError(f"out: {path} is a symbolic link; a lock file must be a plain file in the "
                             "output folder (remove the link)") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise ValueError(f"out: {path} is not a plain file of its own (a device, pipe or hard link); "
                         "remove it and rerun")
    os.set_blocking(fd, True)
    return fd


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return "holder unknown"
    return f"pid {info.get('pid')}" + (f": {info['command']}" if info.get("command") else "")


def lock_folder(folder: str | os.PathLike, command: str | None = None) -> FolderLock:
    """Take the output folder's lock (creating the folder); ``ValueError`` if another job holds it."""
    return FolderLock(folder, command)


def remove_job_folder(folder: str | os.PathLike, *, manifest: str, key: str, value: str,
                      patterns: Iterable[str]) -> None:
    """Start over in ``folder``: delete the job's own files, nothing else.

    Refuses (``ValueError``) unless ``folder/manifest`` exists and its ``key`` is
    ``value`` (the folder was made by this kind of job) and every entry in the
    folder matches one of ``patterns`` (regular expressions over names; the
    manifest and the lock file always match). A missing folder is fine.
    """
    folder = Path(folder)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ValueError(f"out: {folder} is not a folder")
    mpath = folder / manifest
    try:
        made_by = json.loads(mpath.read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError):
        made_by = None
    if made_by != value:
        raise ValueError(f"out: {folder} was not made by this job (no {manifest} with {key}={value!r}); "
                         "--no-resume only starts over in a folder the same job made: choose another --out")
    allowed = [re.compile(p) for p in (*patterns, re.escape(manifest), re.escape(LOCK_FILE))]
    entries = list(folder.iterdir())
    foreign = [p.name for p in entries if p.is_dir() or not any(r.fullmatch(p.name) for r in allowed)]
    if foreign:
        raise ValueError(f"out: {folder} also holds {sorted(foreign)[:5]}, which this job did not write; "
                         "--no-resume refuses to delete them: choose another --out")
    for p in entries:
        if p.name != LOCK_FILE:  # the caller may hold the lock
            p.unlink()
