"""Writing safetensors files with the permissions any other file of the user would get.

``safetensors.torch.save_file`` creates its file with mode 0600 whatever the umask, so a
verifier, a draft or a label shard written on a shared machine could not be read by the
group that is meant to use it. :func:`save_safetensors` writes through ``save_file`` and
then sets the mode an ``open()`` would have given (0666 less the umask).
"""

from __future__ import annotations

import os
import threading

__all__ = ["save_safetensors"]

_umask_lock = threading.Lock()


def _umask() -> int:
    with _umask_lock:  # os.umask only reads by setting: set and restore under a lock
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def save_safetensors(tensors: dict, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """``safetensors.torch.save_file(tensors, path, metadata)``, with the file's mode set to
    0666 & ~umask like any file the process creates."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    os.chmod(path, 0o666 & ~_umask())
