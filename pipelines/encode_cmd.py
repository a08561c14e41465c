"""`tokenbeam encode --tokenizer T TEXT`: how a tokenizer splits a text, the ids and the pieces."""
from __future__ import annotations

import argparse
import sys

from pipelines.core import command
from pipelines.core.command import Command, add_dropout_arguments, implementation_from_environment, parse_dropout
from pipelines.datasets.tokenizer_files import load_tokenizer, parse_special_token


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json (or a folder holding one)")
    parser.add_argument("--allow-special", action="store_true", help="encode special-token strings as specials")
    parser.add_argument("--pattern", default=None, metavar="NAME_OR_REGEX",
                        help="with a tiktoken rank file as --tokenizer: its split pattern")
    parser.add_argument("--special-token", action="append", default=[], metavar="TOKEN=ID",
                        help="with a tiktoken rank file: a special token and its id (repeatable)")
    add_dropout_arguments(parser)
    parser.add_argument("text", nargs="+")


def encode(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> None:
    """The ids and the pieces of the text, one per line."""
    dropout = parse_dropout(args.dropout, args.seed)
    specials = dict(parse_special_token(spec) for spec in args.special_token) if args.special_token else None
    tok = load_tokenizer(args.tokenizer, implementation_from_environment(), args.pattern, specials)
    text = " ".join(args.text)
    ids = tok.encode(text, allowed_special="all" if args.allow_special else (),
                     **({"dropout": dropout.p, "seed": dropout.seed} if dropout else {}))
    print(f"{len(ids)} tokens, {len(text.encode('utf-8', 'replace'))} bytes")
    for i in ids:
        print(f"{i}\t{tok.decode_bytes([i])!r}")


COMMAND = Command(name="encode", help="show how a tokenizer splits a text", usage=None, description=None,
                  add_arguments=add_arguments, run=encode, leftovers="encode takes the text after its options")


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.encode_cmd ARGV` (the same as `tokenbeam encode ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())
