"""``selfjudge convert-labels``: rewrite label folders' JSON-lines rows as Parquet shards."""

from __future__ import annotations

from pathlib import Path

from selfjudge.cli.common import add_command


def register(subparsers) -> None:
    p = add_command(subparsers, "convert-labels",
                    "rewrite label folders written before rows were Parquet (shard-*.jsonl) as Parquet shards "
                    "(each read back and compared before its JSON file goes)")
    p.add_argument("folders", nargs="+", type=Path, help="label folders (selfjudge label / autojudge-label --out)")
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.labelling.label_rows import convert_folder
    from selfjudge.labelling.shards import MANIFEST

    for folder in args.folders:
        if not (folder / MANIFEST).is_file():
            raise ValueError(f"folders: {folder} is not a label folder (no {MANIFEST})")
        print(f"{folder}: {convert_folder(folder)} shards converted")
    return 0
