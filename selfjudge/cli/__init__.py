"""The ``selfjudge`` command line: one module per subcommand.

Each subcommand module defines ``register(subparsers)``, which adds its parser
and sets ``func``; ``func(args)`` receives the parsed namespace plus
``args.command_line`` (the command as recorded in every output). Heavy imports
stay inside ``func``, so ``selfjudge --help`` is fast.

Errors: an argument argparse refuses, or a ``ValueError`` / ``OSError`` the
library raises for a bad argument or path, prints one line and exits with
status 2; ``--debug`` shows the traceback instead. Ctrl-C exits with status 130
(every long job resumes when the same command is run again).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from selfjudge.cli.common import USER_ERRORS, ArgumentParser, command_line

#: subcommand modules, in the order ``selfjudge --help`` lists them
COMMAND_MODULES: tuple[str, ...] = (
    "selfjudge.cli.demo",
    "selfjudge.cli.generate",
    "selfjudge.cli.label",
    "selfjudge.cli.autojudge_label",
    "selfjudge.cli.train",
    "selfjudge.cli.import_head",
    "selfjudge.cli.distill_draft",
    "selfjudge.cli.train_eagle",
    "selfjudge.cli.build_store",
    "selfjudge.cli.bench",
    "selfjudge.cli.report",
    "selfjudge.cli.calibrate",
    "selfjudge.cli.convert_labels",
)


def build_parser(prog: str = "selfjudge") -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=prog, description="selfjudge: speculative decoding that accepts draft tokens which keep the meaning")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None, *, prog: str = "selfjudge", command: str | None = None) -> int:
    """Run one subcommand; returns the exit status. ``command`` overrides the recorded
    command line (for scripts that wrap a subcommand, e.g. ``bench/run_wallclock.py``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.command_line = command if command is not None else command_line(argv, prog)
    if not logging.getLogger().handlers:  # library progress messages go to stderr
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{prog} {args.command}: interrupted (run the same command again to resume)", file=sys.stderr)
        return 130
    except USER_ERRORS as err:
        if args.debug:
            raise
        print(f"{prog} {args.command}: error: {err} (--debug shows the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
