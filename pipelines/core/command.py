"""What every command's command line shares: the `Command` each command module declares once, a
parser whose errors are our one-line errors, and the check that nothing the user typed is left unread.

`tokenbeam NAME ...` (pipelines/cli.py) and `python -m pipelines.MODULE ...` build their parser from
the same `Command`, so the two are one command line. Beam's flags are sorted out in
`pipelines.core.beam_options` (which imports Beam); this module does not import Beam, so commands without a
pipeline, and train's launcher, stay light.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Callable

from pipelines.core.errors import UserError, run_command
from pipelines.core.option_names import unknown_option_error

BEAM_EPILOG = "Any other --flag must be one of Beam's (--runner, --direct_num_workers, ...)."


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (a prefix of a tool flag could be a Beam flag's name) and
    with its errors raised as UserError, so every command prints them the same way.

    `other_options`: for a command that hands the flags it does not know on to Beam, a function
    giving Beam's flags (called only on the error path: it imports Beam); without it, every flag
    must be the parser's own. When argparse finds an error (a required flag missing,
    say) and the command line holds a flag that is neither the parser's nor Beam's, that misspelt
    flag is the error named, with the flag probably meant: `--tokenizr` says "did you mean
    --tokenizer?", not "--tokenizer is required"."""

    def __init__(self, *args, other_options: Callable[[], list[str]] | None = None, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.other_options = other_options
        self.given: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self.given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        misspelt = self.unknown_option()
        if misspelt is not None:
            raise misspelt
        raise UserError(f"{message} (see `{self.prog} --help`)")

    def unknown_option(self) -> UserError | None:
        """The error for the first `--flag` given that is neither this parser's nor one of
        `other_options`, or None."""
        own = option_strings(self)
        for arg in self.given:
            if arg == "--":
                break
            name = arg.partition("=")[0]
            if not name.startswith("--") or name in own:
                continue
            if self.other_options is None:
                return unknown_option_error(name, own, what=f"not an option of {self.prog}")
            other = self.other_options()
            if name not in other:
                return unknown_option_error(name, own, other)
        return None


@dataclass(frozen=True)
class Command:
    """One tokenbeam command, declared by its module as `COMMAND`: its texts, its flags, its body.

    `run(args, rest, parser)` is the body: the parsed flags, what the parser left (for a `beam`
    command, Beam's flags and more inputs; otherwise always empty) and the parser (for its option
    names). It returns an exit code, or the run's report (exit 0); errors are raised (UserError).
    `leftovers`: for a command that is not `beam`, why anything the parser left is refused."""
    name: str
    help: str
    usage: str | None
    description: str | None
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, list[str], argparse.ArgumentParser], object]
    beam: bool = False
    leftovers: str = ""
    epilog: str | None = None

    def parser_texts(self) -> dict:
        """The keyword arguments of its parser, standalone or as a subcommand of `tokenbeam`."""
        return {"prog": f"tokenbeam {self.name}", "usage": self.usage, "description": self.description,
                "epilog": self.epilog or (BEAM_EPILOG if self.beam else None)}


def beam_option_names() -> list[str]:
    """Beam's flags, asked only to name a misspelt flag of a `beam` command (it imports Beam)."""
    from pipelines.core.beam_options import beam_option_names as names

    return names()


def add_command_arguments(parser: "Parser", command: Command) -> None:
    """Give `parser` the command's flags, and Beam's as the other flags it may be given."""
    parser.other_options = beam_option_names if command.beam else None
    command.add_arguments(parser)


def build_parser(command: Command) -> "Parser":
    parser = Parser(**command.parser_texts())
    add_command_arguments(parser, command)
    return parser


def run_parsed(command: Command, args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser):
    """The command's body, once anything left over that is not for Beam is refused."""
    if not command.beam:
        refuse_leftovers(rest, parser, command.leftovers)
    return command.run(args, rest, parser)


def run(command: Command, argv: list[str]):
    """Run the command line ARGV of `command` (without its name); returns what its body returns."""
    parser = build_parser(command)
    args, rest = parser.parse_known_args(argv)
    return run_parsed(command, args, rest, parser)


def main(command: Command, argv: list[str] | None = None) -> int:
    """`python -m pipelines.MODULE ARGV`, the same as `tokenbeam NAME ARGV`: its exit code."""
    return run_command(lambda: run(command, sys.argv[1:] if argv is None else argv))


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every `--flag` the parser knows."""
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]  # noqa: SLF001


def implementation_from_environment():
    """Which implementation bpe_ops runs (compiled or Python twins, PCRE2 or `regex`, the cache
    folder), from TOKENBEAM_PURE_PYTHON / TOKENBEAM_REGEX / TOKENBEAM_CACHE_DIR: the one place the
    environment is read for it. The pipelines hand it on to their workers as an argument."""
    from bpe_ops.implementation import from_environment

    try:
        return from_environment(os.environ)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def refuse_leftovers(rest: list[str], parser: argparse.ArgumentParser, why: str) -> None:
    """For a command that runs no Beam pipeline: anything argparse did not take is an error."""
    for arg in rest:
        if arg.startswith("--"):
            raise unknown_option_error(arg.partition("=")[0], option_strings(parser), what=why)
    if rest:
        raise UserError(f"unexpected argument {rest[0]!r} ({why})")


def parse_dropout(p: str | None, seed: str | None):
    """`--dropout P --seed S` as a `bpe_ops.dropout.Dropout`, None for the deterministic encoding (no
    --dropout, or P = 0); UserError when P is no probability, S no non-negative integer, or --seed
    comes without --dropout."""
    from bpe_ops.dropout import Dropout, check_dropout, check_seed

    if p is None:
        if seed is not None:
            raise UserError("--seed is the seed of BPE-dropout: it needs --dropout P")
        return None
    try:
        value = check_dropout(float(p))
    except ValueError:
        raise UserError(f"--dropout must be a probability between 0 and 1, got {p!r}") from None
    try:
        seed_value = check_seed(int(seed)) if seed is not None else 0
    except ValueError:
        raise UserError(f"--seed must be a non-negative integer, got {seed!r}") from None
    return Dropout(value, seed_value) if value else None


def check_special_token(token: str, given: str) -> str:
    """A special token from the command line (`given` is the flag's value, for the message); UserError
    when it is empty or only whitespace. Text is split on every special token (when training, and when
    encoding with specials allowed): an empty one would split every text between each two characters,
    and a whitespace-only one at each such run of whitespace (` ` would strip the leading space from
    every word's pre-token), which no one means."""
    if not token.strip():
        raise UserError(f"--special-token {given!r}: a special token must not be empty or only whitespace (text "
                        f"is split on each special token, so it would cut every text apart)")
    return token


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true",
                        help="print errors and warnings only (no progress, no summary)")


def add_dropout_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dropout", default=None, metavar="P",
                        help="BPE-dropout for training data: skip each merge with probability P (0 to 1; 1 gives "
                             "bytes only); each record's randomness comes from (--seed, its id), so reruns match")
    parser.add_argument("--seed", default=None, metavar="S",
                        help="--dropout: the seed (a non-negative integer; default 0)")
