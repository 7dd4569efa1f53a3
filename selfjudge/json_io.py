"""JSON from files a user hands in: every way a text can fail to be JSON is one ``ValueError``
naming where it came from (a parse error, a document nested past the parser's depth, bytes
that are not UTF-8), so loaders never let ``RecursionError`` or an unnamed decode error out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def parse_json(text: str | bytes, where: str | Path) -> Any:
    """``json.loads(text)``, or ``ValueError`` naming ``where``."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text)
    except (ValueError, RecursionError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{where}: not valid JSON ({type(err).__name__}: {str(err)[:120]})") from None


def read_json(path: str | Path) -> Any:
    """The JSON document in file ``path`` (``ValueError`` naming it when it is not one)."""
    return parse_json(Path(path).read_bytes(), path)
