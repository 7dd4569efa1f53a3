"""The ``selfjudge`` command line: one subcommand per job.

Each job module exposes ``register(subparsers)`` which adds its parser and sets
``func`` (called with the parsed namespace). Modules are imported only when the
CLI starts, so each job keeps its heavy imports inside its ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module path for each job; each module defines register(subparsers)
JOB_MODULES: list[str] = [
    "selfjudge.judge.train",
    "selfjudge.judge.autojudge",
    "selfjudge.labelling.pipeline",
    "selfjudge.engine.cli",
    "selfjudge.models.distill",
    "selfjudge.demo",
    "selfjudge.bench.wallclock",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="selfjudge", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in JOB_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
