"""The `tokenbeam` command: train, tokenize, drift, stats, encode.

Each subcommand lives in its own module with a `main(argv) -> int`; this file only dispatches and
turns user errors into one clear line (never a traceback) with a non-zero exit code.
"""
from __future__ import annotations

import gc
import os
import sys
import traceback
from typing import Callable

USAGE = """usage: tokenbeam COMMAND [options]

commands:
  train      train a BPE tokenizer on sharded text (Beam)
  tokenize   tokenize sharded text into Parquet with statistics (Beam)
  drift      compare two stats.json files and say whether tokenization drifted
  stats      rebuild stats.json from existing token Parquet files
  encode     show how a tokenizer splits a text

`tokenbeam COMMAND --help` describes each command."""


def run_command(run: Callable[[list[str]], object], argv: list[str]) -> int:
    """Run a pipeline entry point; a UserError, or an OSError (a path that cannot be read or written),
    becomes one line and exit code 2. TOKENBEAM_DEBUG=1 prints the traceback before that line."""
    from pipelines.common import UserError, os_error_reason

    try:
        run(argv)
    except (UserError, OSError) as exc:
        if os.environ.get("TOKENBEAM_DEBUG") == "1":
            traceback.print_exception(exc.__cause__ or exc.__context__ or exc, file=sys.stderr)
        message = os_error_reason(exc) if isinstance(exc, OSError) else str(exc)
        print(f"tokenbeam: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tokenbeam: interrupted", file=sys.stderr)
        return 130
    return 0


def encode_main(argv: list[str]) -> int:
    """`tokenbeam encode --tokenizer T TEXT`: the ids and the pieces, one per line."""
    import argparse
    from bpe_ops import Tokenizer
    from pipelines.common import UserError

    parser = argparse.ArgumentParser(prog="tokenbeam encode", description=encode_main.__doc__)
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json (or a folder holding one)")
    parser.add_argument("--allow-special", action="store_true", help="encode special-token strings as specials")
    parser.add_argument("text", nargs="+")
    args = parser.parse_args(argv)

    def run(_):
        try:
            tok = Tokenizer.from_file(args.tokenizer)
        except (OSError, ValueError) as exc:
            raise UserError(str(exc).splitlines()[0]) from None
        text = " ".join(args.text)
        ids = tok.encode(text, allowed_special="all" if args.allow_special else ())
        print(f"{len(ids)} tokens, {len(text.encode('utf-8', 'replace'))} bytes")
        for i in ids:
            print(f"{i}\t{tok.decode_bytes([i])!r}")
    return run_command(run, [])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        from pipelines import train
        return train.main(rest)
    if command == "tokenize":
        from pipelines import tokenize
        return tokenize.main(rest)
    if command == "drift":
        from pipelines import drift
        return drift.main(rest)
    if command == "stats":
        from pipelines import stats_cmd
        return stats_cmd.main(rest)
    if command == "encode":
        return encode_main(rest)
    print(f"tokenbeam: error: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


def console() -> int:
    """The `tokenbeam` console script: `main`, then an exit that skips the interpreter's final garbage
    collection over Beam's objects (~1 s); every output is written and closed by then."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(console())
