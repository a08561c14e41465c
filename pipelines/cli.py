"""The `tokenbeam` command: train, tokenize, pack, evaluate, drift, stats, estimate, encode.

One argparse parser with a subcommand each, built from the `COMMAND` each command's module declares
(pipelines/core/command.py: its texts, its flags, its body), so `tokenbeam NAME` is `python -m
pipelines.MODULE`. The body runs under `errors.run_command`, which turns every user error into one
line `tokenbeam: error: ...` and the exit code of `pipelines.core.errors` (never a traceback).
No module imports this one.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from pipelines.core import command, heap, hidden_packages
from pipelines.core.command import Parser, refuse_leftovers
from pipelines.core.errors import EXIT_USAGE, UserError, run_command

# Each command's module, imported only when the command runs (or `tokenbeam --help` lists them all):
# tokenize, pack and evaluate import Beam, and train's launcher must not (its counting process does).
COMMAND_MODULES = {"train": "pipelines.train", "tokenize": "pipelines.tokenize", "pack": "pipelines.pack",
                   "evaluate": "pipelines.evaluate", "drift": "pipelines.drift", "stats": "pipelines.stats_cmd",
                   "estimate": "pipelines.estimate", "encode": "pipelines.encode_cmd"}

DESCRIPTION = "Train BPE tokenizers and tokenize sharded corpora into Parquet, on Apache Beam."
EPILOG = """exit codes: 0 done; 1 drift found (drift, tokenize --baseline); 2 usage or configuration error;
3 the run's output is incomplete (shards unreadable, nothing written, --fail-fast); 130 interrupted.
`tokenbeam COMMAND --help` describes each command."""


def version() -> str:
    """tokenbeam's version: the installed package's, else (running from a source tree) setup.py's."""
    from importlib import metadata

    try:
        return metadata.version("tokenbeam")
    except metadata.PackageNotFoundError:
        import os
        import re

        from pipelines.core.files import exists, read_text

        setup_py = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")
        found = re.search(r"""version\s*=\s*["']([^"']+)["']""", read_text(setup_py)) if exists(setup_py) else None
        return found.group(1) if found else "unknown"


def load_command(name: str) -> command.Command:
    return importlib.import_module(COMMAND_MODULES[name]).COMMAND


def commands_described(argv: list[str]) -> list[str]:
    """The commands whose modules this command line needs: the one it names, or all of them for the
    overview of `tokenbeam --help` (or no argument at all), else none."""
    if argv and argv[0] in COMMAND_MODULES:
        return [argv[0]]
    if not argv or "-h" in argv or "--help" in argv:
        return list(COMMAND_MODULES)
    return []


def build_parser(described: list[str]) -> tuple[Parser, dict[str, command.Command], dict[str, Parser]]:
    """The `tokenbeam` parser; every command is a choice, and the `described` ones have their texts
    and flags (from their modules' COMMAND) and their subparser."""
    parser = Parser(prog="tokenbeam", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    choices = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands, subparsers = {}, {}
    for name in COMMAND_MODULES:
        if name not in described:
            choices.add_parser(name)          # a valid choice, not listed (its module is not imported)
            continue
        commands[name] = load_command(name)
        subparsers[name] = choices.add_parser(name, help=commands[name].help, **commands[name].parser_texts())
        command.add_command_arguments(subparsers[name], commands[name])
    parser.add_argument("--version", action="version", version=f"tokenbeam {version()}")
    return parser, commands, subparsers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, commands, subparsers = build_parser(commands_described(argv))
    heap.modules_imported()
    if not argv:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    def run():
        args, rest = parser.parse_known_args(argv)
        if args.command is None:
            refuse_leftovers(rest, parser, "give a command first")
            raise UserError(f"unknown command {rest[0]!r} (see `tokenbeam --help`)" if rest
                            else "no command given (see `tokenbeam --help`)")
        return command.run_parsed(commands[args.command], args, rest, subparsers[args.command])

    return run_command(run)


def console() -> int:
    """The `tokenbeam` console script: `main`, then the process ends at once with its exit code.

    Every output is written and closed when `main` returns. What is left is the interpreter's
    teardown, and there native threads that Beam's and Arrow's libraries leave behind can meet
    their libraries' static destructors: "terminate called without an active exception", exit 134
    after a run that succeeded (most runs of `tokenize --group-field` on two cores). Nothing of the
    run needs the teardown, so it is skipped, and the garbage collection over Beam's objects with it.

    The packages no command uses (`hidden_packages.UNUSED`) are hidden from the process first, and
    Beam's connectors for other places where the command line names none (`REMOTE_ONLY`)."""
    hidden_packages.hide(hidden_packages.UNUSED)
    heap.own_process()                  # it ends with the command: a long job may freeze its heap
    if hidden_packages.local_only(sys.argv[1:]):
        hidden_packages.hide(hidden_packages.REMOTE_ONLY)
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):       # a closed pipe (`tokenbeam ... | head`): nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(console())
