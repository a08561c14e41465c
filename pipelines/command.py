"""What every command's command line shares: a parser whose errors are our one-line errors, and
the check that nothing the user typed is left unread.

Beam's flags are sorted out in `pipelines.beam_options` (which imports Beam); this module does not
import Beam, so commands without a pipeline, and train's launcher, stay light.
"""
from __future__ import annotations

import argparse
import difflib
import os

from pipelines.errors import UserError


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (a prefix of a tool flag could be a Beam flag's name) and
    with its errors raised as UserError, so every command prints them the same way."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UserError(f"{message} (see `{self.prog} --help`)")


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every `--flag` the parser knows."""
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]  # noqa: SLF001


def closest_option(name: str, tool_options: list[str], other_options: list[str] = ()) -> str | None:
    """The option the user probably meant: the tool's flag spelled with dashes (`--min_count` ->
    `--min-count`), Beam's spelled with underscores (`--temp-location` -> `--temp_location`), else
    the closest by spelling."""
    if name.replace("_", "-") in tool_options:
        return name.replace("_", "-")
    if name.replace("-", "_") in other_options:
        return name.replace("-", "_")
    close = difflib.get_close_matches(name, list(tool_options) + list(other_options), n=1, cutoff=0.75)
    return close[0] if close else None


def unknown_option_error(name: str, tool_options: list[str], other_options: list[str] = (),
                         what: str = "neither tokenbeam's nor Beam's") -> UserError:
    hint = closest_option(name, tool_options, other_options)
    return UserError(f"unknown option {name}" + (f": did you mean {hint}?" if hint else f" ({what}; see --help)"))


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


def add_dropout_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dropout", default=None, metavar="P",
                        help="BPE-dropout for training data: skip each merge with probability P (0 to 1; 1 gives "
                             "bytes only); each record's randomness comes from (--seed, its id), so reruns match")
    parser.add_argument("--seed", default=None, metavar="S",
                        help="--dropout: the seed (a non-negative integer; default 0)")
