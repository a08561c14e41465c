"""The `tokenbeam` command: train, tokenize, pack, evaluate, drift, stats, estimate, encode.

One argparse parser with a subcommand each; each subcommand's flags are declared by its own module
(`add_arguments`), and its body runs under `errors.run_command`, which turns every user error into
one line `tokenbeam: error: ...` and the exit code of `pipelines.errors` (never a traceback).
No module imports this one.
"""
from __future__ import annotations

import argparse
import gc
import sys

from pipelines.command import Parser, add_dropout_arguments, option_strings, refuse_leftovers
from pipelines.errors import EXIT_USAGE, UserError, run_command

DESCRIPTION = "Train BPE tokenizers and tokenize sharded corpora into Parquet, on Apache Beam."
EPILOG = """exit codes: 0 done; 1 drift found (drift, tokenize --baseline); 2 usage or configuration error;
3 the run's output is incomplete (shards unreadable, nothing written, --fail-fast); 130 interrupted.
`tokenbeam COMMAND --help` describes each command."""


def add_encode_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json (or a folder holding one)")
    parser.add_argument("--allow-special", action="store_true", help="encode special-token strings as specials")
    parser.add_argument("--pattern", default=None, metavar="NAME_OR_REGEX",
                        help="with a tiktoken rank file as --tokenizer: its split pattern")
    parser.add_argument("--special-token", action="append", default=[], metavar="TOKEN=ID",
                        help="with a tiktoken rank file: a special token and its id (repeatable)")
    add_dropout_arguments(parser)
    parser.add_argument("text", nargs="+")


def encode(args: argparse.Namespace) -> None:
    """`tokenbeam encode --tokenizer T TEXT`: the ids and the pieces, one per line."""
    from pipelines.command import implementation_from_environment, parse_dropout
    from pipelines.tokenizer_files import load_tokenizer, parse_special_token

    dropout = parse_dropout(args.dropout, args.seed)
    specials = dict(parse_special_token(spec) for spec in args.special_token) if args.special_token else None
    tok = load_tokenizer(args.tokenizer, implementation_from_environment(), args.pattern, specials)
    text = " ".join(args.text)
    ids = tok.encode(text, allowed_special="all" if args.allow_special else (),
                     **({"dropout": dropout.p, "seed": dropout.seed} if dropout else {}))
    print(f"{len(ids)} tokens, {len(text.encode('utf-8', 'replace'))} bytes")
    for i in ids:
        print(f"{i}\t{tok.decode_bytes([i])!r}")


def version() -> str:
    """tokenbeam's version: the installed package's, else (running from a source tree) setup.py's."""
    from importlib import metadata

    try:
        return metadata.version("tokenbeam")
    except metadata.PackageNotFoundError:
        import pathlib
        import re

        setup_py = pathlib.Path(__file__).resolve().parent.parent / "setup.py"
        found = re.search(r"""version\s*=\s*["']([^"']+)["']""", setup_py.read_text(encoding="utf-8")) \
            if setup_py.exists() else None
        return found.group(1) if found else "unknown"


def build_parser() -> tuple[Parser, dict[str, argparse.ArgumentParser]]:
    """The `tokenbeam` parser and its subcommands' parsers. The pipeline modules are imported only
    for the subcommand that runs (importing tokenize imports Beam)."""
    parser = Parser(prog="tokenbeam", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    subparsers = {
        "train": commands.add_parser("train", help="train a BPE tokenizer on sharded text (Beam)",
                                     usage="tokenbeam train --output DIR --vocab-size N --input GLOB [options] [INPUT ...]",
                                     epilog="Any other --flag must be one of Beam's (--runner, ...)."),
        "tokenize": commands.add_parser("tokenize", help="tokenize sharded text into Parquet with statistics (Beam)",
                                        usage="tokenbeam tokenize --tokenizer T --output DIR --input GLOB [options] "
                                              "[INPUT ...]",
                                        epilog="Any other --flag must be one of Beam's (--runner, ...)."),
        "pack": commands.add_parser("pack", help="pack token Parquet into shuffled fixed-length sequences (Beam)",
                                    usage="tokenbeam pack --input TOKENS_DIR --output DIR --seq-len N [options] [INPUT ...]",
                                    epilog="Any other --flag must be one of Beam's (--runner, ...)."),
        "evaluate": commands.add_parser("evaluate", help="tokenizers side by side on a dataset: compression, "
                                                         "fertility, words kept whole, raw bytes (Beam)",
                                        usage="tokenbeam evaluate --tokenizer A [--tokenizer B ...] --output DIR "
                                              "--input GLOB [options] [INPUT ...]",
                                        epilog="Any other --flag must be one of Beam's (--runner, ...)."),
        "drift": commands.add_parser("drift", help="compare stats.json files (two, or a baseline and windows over "
                                                   "time): did tokenization drift?",
                                     usage="tokenbeam drift BASELINE CURRENT [CURRENT ...] [options]"),
        "stats": commands.add_parser("stats", help="rebuild stats.json from existing token Parquet files",
                                     usage="tokenbeam stats GLOB [GLOB ...] --tokenizer T [options]"),
        "estimate": commands.add_parser("estimate", help="count a dataset's tokens from a sample of its records, "
                                                         "with 95%% intervals, before you run",
                                        usage="tokenbeam estimate --tokenizer T --input GLOB [--sample 0.5%%] [options] "
                                              "[INPUT ...]"),
        "encode": commands.add_parser("encode", help="show how a tokenizer splits a text"),
    }
    parser.add_argument("--version", action="version", version=f"tokenbeam {version()}")
    add_encode_arguments(subparsers["encode"])
    return parser, subparsers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, subparsers = build_parser()
    if not argv:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    command = argv[0]
    # Each command's module is imported only when it runs: tokenize and pack import Beam, and train's
    # launcher must not (its counting process does).
    module = None
    if command == "train":
        from pipelines import train as module
    elif command == "tokenize":
        from pipelines import tokenize as module
    elif command == "pack":
        from pipelines import pack as module
    elif command == "evaluate":
        from pipelines import evaluate as module
    elif command == "drift":
        from pipelines import drift as module
    elif command == "stats":
        from pipelines import stats_cmd as module
    elif command == "estimate":
        from pipelines import estimate as module
    if module is not None:
        module.add_arguments(subparsers[command])
    if command in ("train", "tokenize", "pack", "evaluate"):     # they hand other flags on to Beam
        subparsers[command].other_options = module.beam_option_names

    def run():
        args, rest = parser.parse_known_args(argv)
        if args.command == "train":
            return module.run_parsed(args, rest, subparsers["train"]) and None
        if args.command in ("tokenize", "pack", "evaluate"):
            return module.run_parsed(args, rest, option_strings(subparsers[args.command])) and None
        if args.command == "drift":
            return module.run_parsed(args, rest)
        if args.command is None:
            refuse_leftovers(rest, parser, "give a command first")
            raise UserError(f"unknown command {rest[0]!r} (see `tokenbeam --help`)" if rest
                            else "no command given (see `tokenbeam --help`)")
        if args.command == "estimate":
            refuse_leftovers(rest, subparsers["estimate"], "estimate runs no Beam pipeline")
            return module.run(args)
        if args.command == "stats":
            refuse_leftovers(rest, subparsers["stats"], "stats takes token Parquet files and its own options")
            return module.rebuild_parsed(args)
        refuse_leftovers(rest, subparsers["encode"], "encode takes the text after its options")
        return encode(args)

    return run_command(run)


def console() -> int:
    """The `tokenbeam` console script: `main`, then an exit that skips the interpreter's final garbage
    collection over Beam's objects; every output is written and closed by then."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(console())
