"""Cache directory and atomic folder writes for converted / assembled models.

Everything selfjudge derives from the installed wheels (the dequantised target, the
assembled draft) is written once into a user cache folder and reused. Writes go to a
temporary sibling folder that is renamed into place only when complete, so an
interrupted conversion never leaves a half-written folder that would later load.
"""

from __future__ import annotations

import contextlib
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
    """True when ``folder`` was finished by :func:`atomic_folder` (its marker exists)."""
    return (Path(folder) / COMPLETE_MARKER).is_file()


@contextlib.contextmanager
def atomic_folder(final: str | os.PathLike, marker_text: str = "{}") -> Iterator[Path]:
    """Yield a temporary folder next to ``final``; on success rename it to ``final``.

    The marker file ``selfjudge_complete.json`` (content ``marker_text``) is written
    last inside the temporary folder, so a folder is complete iff it has the marker.
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
        (tmp / COMPLETE_MARKER).write_text(marker_text)
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
