"""Which command a folder belongs to, and whether its run completed: the one policy every command
applies to its `--output` and to the tokenbeam outputs it reads.

    claim_output(args.output, "pack")          # before any work: refuses another command's folder
    ...                                         # the command's own checks of the folder
    mark_output(args.output, "pack")            # before it removes or writes anything there
    check_finished(url, "--input", "pack")      # an input folder of tokenize's must have its _SUCCESS

Each pipeline command writes `OUTPUT/.tokenbeam.json` (`{"command": NAME}`) before it removes or
writes anything there, and `_SUCCESS` last. A command refuses (exit 2, one line) an `--output` that another command
owns, so that no run deletes or overwrites another's files (a `train` clearing a token folder's
`rejected/`, a `tokenize` removing a tokenizer's `_SUCCESS`), and refuses to read a tokenize folder
without `_SUCCESS` (a run that failed, was interrupted, or is still going: its Parquet and stats
describe part of the inputs). A folder written before the marker existed is recognised by the
files only its command writes. The marker's name is hidden, so the globs that read outputs skip it.
"""
from __future__ import annotations

import json
import posixpath

from pipelines.core.errors import IncompleteRun, UserError, os_error_reason
from pipelines.core.files import check_output_folder, exists, filesystem, join, read_json, write_text_atomic

MARKER = ".tokenbeam.json"
SUCCESS = "_SUCCESS"
# Files (or folders) that only one command writes, for folders made before the marker existed
# (tokenize's stats.json counts only beside token Parquet: `tokenbeam stats` writes one anywhere).
SIGNATURES = (("train", ("train_report.json", "tokenizer.json", "counts")), ("pack", ("pack.json",)),
              ("evaluate", ("evaluate.json",)))


def owner(url: str) -> tuple[str, str] | None:
    """The command whose output `url` holds and the file that says so, or None for a folder no
    tokenbeam command wrote (or no folder)."""
    fs, path = filesystem(url)
    if not fs.isdir(path):
        return None
    marker = posixpath.join(path, MARKER)
    if fs.isfile(marker):
        try:
            return read_json(join(url, MARKER))["command"], MARKER
        except (ValueError, KeyError, TypeError):
            pass        # unreadable: judge by the files, as for an older folder
    for command, names in SIGNATURES:
        for name in names:
            if fs.exists(posixpath.join(path, name)):
                return command, name
    if fs.isfile(posixpath.join(path, "stats.json")) and fs.glob(posixpath.join(path, "*.parquet")):
        return "tokenize", "stats.json"
    return None


def claim_output(url: str, command: str, flag: str = "--output") -> None:
    """Refuse `url` as this command's output folder when another command's output is there; create
    it if needed (`check_output_folder`)."""
    check_output_folder(url, flag)
    found = owner(url)
    if found is not None and found[0] != command:
        raise UserError(f"{flag} {url} holds the output of `tokenbeam {found[0]}` ({found[1]}); `{command}` "
                        f"would delete or overwrite its files: give another folder")


def mark_output(url: str, command: str) -> None:
    """Mark a claimed folder as this command's, once the command's own checks of it have passed."""
    found = owner(url)
    if found is None or found[1] != MARKER:
        marker = join(url, MARKER)
        try:
            write_text_atomic(marker, json.dumps({"command": command}) + "\n")
        except OSError as exc:        # the folder is there but cannot be written (read-only, full)
            raise IncompleteRun(f"cannot write {marker}: {os_error_reason(exc)}") from exc


def check_finished(url: str, flag: str, reader: str, wanted: str = "tokenize") -> None:
    """For a command reading tokenbeam output: `url` (a folder, or a file in one) must not be another
    command's output than `wanted`'s, and, when it is `wanted`'s, the run that wrote it must have
    finished (`_SUCCESS`)."""
    fs, path = filesystem(url)
    folder = url if fs.isdir(path) else posixpath.dirname(url.rstrip("/")) or "."
    found = owner(folder)
    if found is None:
        return
    command, why = found
    if command != wanted:
        raise UserError(f"{flag} {url} is the output of `tokenbeam {command}` ({why}); {reader} reads the output "
                        f"of `tokenbeam {wanted}`")
    if not exists(join(folder, SUCCESS)):
        raise UserError(f"{flag} {url}: the `tokenbeam {wanted}` run that wrote {folder} did not finish (no "
                        f"{SUCCESS}: it failed, was interrupted or is still running), so it holds part of its "
                        f"inputs at most; rerun it to the end first")
