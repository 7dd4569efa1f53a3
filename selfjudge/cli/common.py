"""What every subcommand shares: its parser class, the recorded command line, the
judge threshold argument and the one-line error report.

Library modules take typed arguments and never read ``sys.argv``; the CLI is the
only place that parses arguments, records the command that made an output
(built once, in :func:`selfjudge.cli.main`) and prints.
"""

from __future__ import annotations

import argparse
import math
import shlex
from typing import Sequence

from selfjudge.builtin import DEFAULT_PAIR, QWEN_CODER_PAIR

#: exceptions the library raises for a bad argument or path: reported in one line, exit status 2
USER_ERRORS = (ValueError, OSError)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error: ``selfjudge train: error: ... (see --help)``, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_command(subparsers, name: str, help: str) -> argparse.ArgumentParser:
    """A subcommand parser that also accepts ``--debug`` after the subcommand's name."""
    parser = subparsers.add_parser(name, help=help, description=help)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of an error")
    return parser


def command_line(argv: Sequence[str], prog: str = "selfjudge") -> str:
    """The shell command that reproduces this invocation, as outputs record it."""
    return " ".join([prog, *(shlex.quote(str(a)) for a in argv)])


def finite_float(text: str) -> float:
    """argparse type: a finite number (``nan`` and ``inf`` are refused, they would reach manifests)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--limit 0`` is a one-line error naming the option, never a run)."""
    return _int_at_least(text, 1)


def parse_threshold(text: str | None) -> str | float | None:
    """A judge threshold argument, read by :func:`selfjudge.judge.operating_point.parse_threshold`
    (a logit value, a quality budget or a stored name; None stays None: the default), so a bad one
    stops the command before any model loads."""
    from selfjudge.judge.operating_point import parse_threshold as read

    try:
        return read(text)
    except ValueError as err:
        raise ValueError(f"--{err}") from None


def add_model_arguments(parser: argparse.ArgumentParser, *, draft: bool = True) -> None:
    """``--target NAME|DIR`` (alias ``--pair``) and, where a draft model can be used, ``--draft DIR``:
    the same names and help on every subcommand (``tests/selfjudge/cli/test_vocabulary.py``)."""
    parser.add_argument("--target", "--pair", dest="target", default=DEFAULT_PAIR, metavar="NAME|DIR",
                        help=f'the target: a built-in pair ("{DEFAULT_PAIR}", the default, or "{QWEN_CODER_PAIR}"), a '
                             "local Hugging Face model folder, or a hub id where a hub is reachable (--pair is "
                             "the same option)")
    if draft:
        parser.add_argument("--draft", default=None, metavar="DIR",
                            help="a draft model folder with the target's tokenizer, for --drafter model (prompt "
                                 "lookup and an EAGLE head need none; default: the built-in pair's draft)")


def load_target_and_drafter(args: argparse.Namespace):
    """``(target, drafter, tokenizer)`` for ``--target/--draft/--drafter/--eagle`` and prompt lookup's
    settings (:func:`lookup_lengths`); ``args.drafter`` is set to the kind used. The target alone is
    loaded unless the drafter is a draft model, so a target folder without a draft works with prompt
    lookup and an EAGLE head."""
    from selfjudge.engine.drafter_factory import make_drafter
    from selfjudge.models import load_pair

    draft = getattr(args, "draft", None)
    kind = args.drafter = drafter_name(args.drafter, args.target, draft)
    lengths = lookup_lengths(args)  # refused before any model loads when they do not apply
    if draft is not None and kind != "model":
        raise ValueError(f"--draft is a draft model folder; --drafter {kind} does not use one")
    # "prompt-lookup" loads the target and tokenizer only; make_drafter builds what drafts
    pair = load_pair(args.target, draft, device=args.device, dtype=getattr(args, "dtype", "auto"),
                     drafter="model" if kind == "model" else "prompt-lookup")
    drafter = make_drafter(kind, pair.target, pair.draft if kind == "model" else None,
                           eagle_dir=getattr(args, "eagle", None), pair=args.target, **lengths)
    return pair.target, drafter, pair.tokenizer


def add_drafter_arguments(parser: argparse.ArgumentParser, what: str, eagle_dest: str = "eagle") -> None:
    """``--drafter model|eagle|prompt-lookup`` and ``--eagle DIR``; ``what`` says what the drafter does here."""
    # selfjudge.models.pair.DRAFTER_KINDS, spelled out: importing it would load torch for --help
    parser.add_argument("--drafter", default=None, choices=["model", "eagle", "prompt-lookup"],
                        help=f"{what} (default: the built-in pair's measured best drafter, "
                             "selfjudge/assets/drafters/default.json; with --draft: the draft model)")
    parser.add_argument("--eagle", dest=eagle_dest, default=None,
                        help="EAGLE head folder (config.json + safetensors) for --drafter eagle "
                             "(default: the head shipped for the default pair)")


def add_lookup_store_argument(parser: argparse.ArgumentParser) -> None:
    """``--lookup-store FILE|none``: prompt lookup's n-gram store (default: the pair's record)."""
    parser.add_argument("--lookup-store", default=None, metavar="FILE|none",
                        help="prompt lookup: the n-gram store asked where the context has no match "
                             "(bench/drafters/build_ngram_store.py; default: the pair's record; none: no store)")


def add_lookup_arguments(parser: argparse.ArgumentParser) -> None:
    """``--max-ngram`` / ``--min-ngram`` / ``--lookup-store``: prompt lookup's settings, for a run that
    must keep settings other than the pair's recorded ones (e.g. resuming a label run made before
    they changed)."""
    parser.add_argument("--max-ngram", type=positive_int, default=None,
                        help="prompt lookup: longest n-gram matched (default: the pair's record, 3)")
    parser.add_argument("--min-ngram", type=positive_int, default=None,
                        help="prompt lookup: shortest n-gram matched (default: the pair's record, "
                             "selfjudge/assets/drafters/default.json)")
    add_lookup_store_argument(parser)


def lookup_lengths(args: argparse.Namespace) -> dict:
    """The ``max_ngram``/``min_ngram``/``lookup_store`` given on the command line (for
    ``make_drafter``); refused by name unless the drafter is prompt lookup, where they would
    silently do nothing."""
    given = {k: getattr(args, k) for k in ("max_ngram", "min_ngram", "lookup_store")
             if getattr(args, k, None) is not None}
    if given and args.drafter != "prompt-lookup":
        flags = " and ".join("--" + k.replace("_", "-") for k in given)
        raise ValueError(f"{flags} only apply to --drafter prompt-lookup, not {args.drafter!r}")
    if "min_ngram" in given and "max_ngram" in given and given["min_ngram"] > given["max_ngram"]:
        raise ValueError(f"--min-ngram ({given['min_ngram']}) must not exceed --max-ngram ({given['max_ngram']})")
    return given


def drafter_name(drafter: str | None, pair: str, draft: str | None = None) -> str:
    """``--drafter`` as given, or the pair's default (:func:`selfjudge.models.pair.default_drafter`)."""
    from selfjudge.models.pair import default_drafter

    return drafter if drafter is not None else default_drafter(pair, draft)


def lookup_suffix(drafter) -> str:
    """:func:`selfjudge.models.lookup.lookup_id_suffix` for prompt lookup's drafter; "" for any other."""
    from selfjudge.engine.prompt_lookup import PromptLookupDrafter
    from selfjudge.models.lookup import lookup_id_suffix

    return lookup_id_suffix(drafter) if isinstance(drafter, PromptLookupDrafter) else ""


def add_device_arguments(parser: argparse.ArgumentParser, *, dtype: bool = True) -> None:
    """``--device auto|cpu|cuda|cuda:N`` and (``dtype``) ``--dtype auto|float32|bfloat16|float16``:
    where and in what precision the models run (auto: a GPU in bfloat16 if one is visible, else
    the CPU in float32). Resolved by :mod:`selfjudge.devices`."""
    parser.add_argument("--device", default="auto", help="auto (a CUDA GPU if visible, else cpu), cpu, cuda, cuda:N")
    if dtype:
        parser.add_argument("--dtype", default="auto",
                            help="auto (bfloat16 on CUDA, and for qwen2.5-coder-1.5b on a CPU with bf16 matmuls; "
                                 "else float32), float32, bfloat16 or float16")
