"""Every subcommand names the same thing the same way: one option, one help text, no synonyms."""

from __future__ import annotations

import argparse

import pytest

from selfjudge.cli import build_parser
from selfjudge.cli.generate import POLICIES

#: options that mean one thing everywhere, with the subcommands that must have them
SHARED = {
    "--target": {"generate", "label", "autojudge-label", "bench", "demo", "train-eagle", "distill-draft"},
    "--draft": {"generate", "label", "autojudge-label"},
    "--drafter": {"generate", "label", "autojudge-label", "bench", "demo"},
    "--eagle": {"generate", "label", "autojudge-label", "bench", "demo"},
    "--lookup-store": {"generate", "label", "autojudge-label", "bench"},
    "--device": {"generate", "label", "autojudge-label", "bench", "demo", "train-eagle", "distill-draft"},
    "--dtype": {"generate", "label", "autojudge-label", "bench", "demo"},
}
#: option names that once meant what a SHARED option means; only allowed as that option's alias
SYNONYMS = {"--pair": "--target", "--model": "--target", "--draft-dir": "--draft", "--target-dir": "--target"}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _options(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {name: a for a in sub._actions for name in a.option_strings}


def _comparable(action: argparse.Action) -> tuple:
    """What a user sees of an option, without the part that says what it does in this subcommand."""
    help_text = action.help if action.option_strings[0] != "--drafter" else None  # says what drafts, per command
    choices = tuple(action.choices) if action.choices is not None else None
    return (tuple(action.option_strings), action.default, choices, action.metavar, help_text)


def test_shared_options_are_the_same_option_everywhere():
    subs = _subcommands()
    for option, where in SHARED.items():
        missing = sorted(name for name in where if option not in _options(subs[name]))
        assert not missing, f"{option} missing from {missing}"
        seen = {_comparable(_options(subs[name])[option]) for name in where}
        assert len(seen) == 1, f"{option} differs between subcommands: {seen}"


def test_no_subcommand_uses_a_synonym_of_its_own():
    for name, sub in _subcommands().items():
        options = _options(sub)
        for synonym, meaning in SYNONYMS.items():
            if synonym in options:
                assert options[synonym] is options.get(meaning), f"{name}: {synonym} is not an alias of {meaning}"


def test_every_option_has_help():
    for name, sub in _subcommands().items():
        bare = sorted({a.option_strings[0] for a in sub._actions if a.option_strings and not a.help})
        assert not bare, f"{name}: options without help: {bare}"


def test_pair_is_the_target_option(capsys):
    parser = build_parser()
    args = parser.parse_args(["generate", "--pair", "some/folder", "--prompt", "hi"])
    assert args.target == "some/folder"


def test_the_vocabulary_test_sees_a_difference():
    """Negative control: a subcommand whose --target is another option fails the comparison."""
    odd = argparse.ArgumentParser()
    odd.add_argument("--target", default=None, help="target HF folder")
    usual = _options(_subcommands()["label"])["--target"]
    assert _comparable(_options(odd)["--target"]) != _comparable(usual)


def test_generate_offers_every_engine_policy():
    from selfjudge.engine.policies import POLICY_NAMES

    assert POLICIES == POLICY_NAMES
    gen = _options(_subcommands()["generate"])
    assert tuple(gen["--policy"].choices) == POLICY_NAMES


@pytest.mark.parametrize("argv, message", [
    (["--policy", "judge"], "--verifier is required"),
    (["--policy", "relaxed", "--verifier", "v.safetensors"], "--verifier is required"),
    (["--policy", "relaxed", "--top-n-gate", "3"], "--top-n-gate applies"),
])
def test_generate_refuses_policy_parameters_that_do_not_apply(argv, message):
    from selfjudge.cli.generate import make_cli_policy

    args = build_parser().parse_args(["generate", "--prompt", "hi", *argv])
    with pytest.raises(ValueError, match=message):
        make_cli_policy(args, target=None)
