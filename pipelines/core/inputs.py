"""Finding the files input arguments name, for every command: a file, a glob, or a folder (local
paths or any fsspec URL: `file://`, `s3://`, `gs://`...), matched once, at launch. An existing path
is taken literally; a pattern that matches no file is an error that names it, since a typo would
otherwise silently drop part of a corpus."""
from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass
from typing import Sequence

from pipelines.core.files import filesystem, join

GLOB_CHARS = "*?["


class InputError(Exception):
    """A problem with what the user asked for (a glob, an option), said in one line."""


@dataclass(frozen=True)
class Sought:
    """What an input argument may name, and how the messages name the argument.

    `in_folder`: what a folder names, a file name (`stats.json`) or a glob of file names (`*.parquet`:
    every such file under the folder, hidden files and `rejected/` aside); None: a folder is refused.
    `many`: whether the argument may be a glob naming several files.
    `as_written`: a file named directly, or the file a folder names, keeps the argument's spelling
    (a relative path stays relative: reports that print it show what the user typed)."""
    flag: str = "--input"           # "" for a positional argument
    in_folder: str | None = None
    many: bool = True
    as_written: bool = False

    def named(self, pattern: str) -> str:
        return f"{self.flag} {pattern!r}" if self.flag else pattern


@dataclass(frozen=True, order=True)
class Found:
    """A file found: its URL as the user will see it (with the protocol the pattern had, a plain path
    stays plain), its path in its filesystem, its size and version (`file_version`)."""
    url: str
    path: str
    size: int
    version: str


def find_files(patterns: Sequence[str], sought: Sought = Sought()) -> list[Found]:
    """Every file the patterns name, each once (by canonical URL), sorted by URL."""
    found: dict[str, Found] = {}
    for pattern in patterns:
        for canonical, match in match_pattern(pattern, sought).items():
            found.setdefault(canonical, match)
    return sorted(found.values())


def match_pattern(pattern: str, sought: Sought) -> dict[str, Found]:
    """The files one pattern names: canonical URL -> file. InputError when it names none."""
    fs, path = filesystem(pattern)
    named = sought.named(pattern)
    spelt = None                       # the one file's URL as the user wrote it (`Sought.as_written`)
    if fs.isdir(path):
        infos = folder_files(fs, path, pattern, sought)
        if len(infos) == 1 and not any(c in (sought.in_folder or "") for c in GLOB_CHARS):
            spelt = join(pattern, sought.in_folder)
    elif fs.isfile(path):
        infos = {path: fs.info(path)}
        spelt = pattern
    elif not any(c in pattern for c in GLOB_CHARS):
        raise InputError(f"{named}: no such file")
    elif not sought.many:
        raise InputError(f"{named} must name one file, not a glob")
    else:
        infos = {p: info for p, info in fs.glob(path, detail=True).items() if info.get("type") != "directory"}
        if not infos:
            raise InputError(f"{named} matched no files")
    with_protocol = "://" in pattern     # keep the protocol the user wrote; plain paths stay plain
    matches = {}
    for p, info in infos.items():
        canonical = fs.unstrip_protocol(p)
        url = spelt if sought.as_written and spelt is not None else canonical if with_protocol else p
        matches[canonical] = Found(url, p, info.get("size") or 0, file_version(info))
    return matches


def folder_files(fs, path: str, pattern: str, sought: Sought) -> dict[str, dict]:
    """The files a folder names (`Sought.in_folder`): path -> info."""
    named = sought.named(pattern)
    if sought.in_folder is None:
        raise InputError(f"{named} is a folder; pass a glob such as '{pattern.rstrip('/')}/*.jsonl'")
    root = path.rstrip("/")
    if not any(c in sought.in_folder for c in GLOB_CHARS):
        inside = posixpath.join(root, sought.in_folder)
        if not fs.isfile(inside):
            raise InputError(f"{named} is a folder without a {sought.in_folder}")
        return {inside: fs.info(inside)}
    found = {p: info for p, info in fs.find(root, detail=True).items()
             if fnmatch.fnmatch(posixpath.basename(p), sought.in_folder) and not hidden_or_rejected(p, root)}
    if not found:
        raise InputError(f"{named} is a folder without a {sought.in_folder} file")
    return found


def hidden_or_rejected(path: str, root: str) -> bool:
    """A file of a command's own bookkeeping: hidden (temporaries, markers) or under `rejected/`."""
    return posixpath.relpath(path, root).startswith("rejected/") or posixpath.basename(path).startswith(".")


# Keys under which fsspec filesystems report a file's version: content hashes first, then times.
_VERSION_KEYS = ("ETag", "etag", "md5Hash", "crc32c", "sha256", "mtime", "LastModified", "updated", "last_modified",
                 "created")


def file_version(info: dict) -> str:
    """What an fsspec `info()` says of a file's version ("" if nothing): batch matching and the
    watched source record it alike, so their outputs are the same bytes."""
    for key in _VERSION_KEYS:
        if info.get(key) not in (None, ""):
            return f"{key}={info[key]}"
    return ""
