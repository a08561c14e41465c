"""File I/O on any fsspec URL, written once: paths, atomic writes, the output folder's checks.

Local paths and URLs (`s3://`, `gs://`, `file://`...) go through the same functions. Every file a
pipeline writes goes through `open_atomic`, so a file under its final name is always complete.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import re
import tempfile
import uuid
from typing import TYPE_CHECKING, Iterator

from pipelines.core.errors import ShardFailure, UserError, os_error_reason

if TYPE_CHECKING:
    import fsspec


def join(base: str, *parts: str) -> str:
    """Join URL/path parts with '/', keeping the scheme of `base` (`s3://b/x` + `y` -> `s3://b/x/y`)."""
    return posixpath.join(base.rstrip("/") or "/", *parts) if "://" not in base else "/".join(
        [base.rstrip("/")] + [p.strip("/") for p in parts])


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of `url` and the path inside it. (fsspec is imported on first use:
    `tokenbeam train` starts its counting process before it needs a file.)"""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    if not is_local(url):
        # fsspec shares one filesystem instance per store in a process, with its listings cached: a file
        # that another process (a Beam worker) wrote or removed since would be missed, or seen.
        fs.invalidate_cache(path)
    return fs, path


@contextlib.contextmanager
def naming(url: str) -> Iterator[None]:
    """One form for every OSError of a file access: `strerror` and `filename` (the URL as the user gave
    it) set, so `os_error_reason` prints `No such file or directory (s3://b/x)` whatever the back-end
    (s3fs raises `FileNotFoundError('b/x')`, with neither)."""
    try:
        yield
    except OSError as exc:
        if exc.strerror and exc.filename:
            raise
        known = _ERRNO.get(type(exc))
        code = exc.errno or known or errno.EIO
        if exc.strerror:
            reason = exc.strerror
        elif known or not str(exc):        # its text is at most the path: say what the error means
            reason = os.strerror(code)
        else:
            reason = str(exc).splitlines()[0]
        raise OSError(code, reason, url) from exc     # OSError(ENOENT, ...) is a FileNotFoundError


_ERRNO = {FileNotFoundError: errno.ENOENT, IsADirectoryError: errno.EISDIR, NotADirectoryError: errno.ENOTDIR,
          PermissionError: errno.EACCES}


def makedirs(url: str) -> None:
    fs, path = filesystem(url)
    fs.makedirs(path, exist_ok=True)


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    with naming(url):
        return fs.exists(path)


def isdir(url: str) -> bool:
    fs, path = filesystem(url)
    with naming(url):
        return fs.isdir(path)


def isfile(url: str) -> bool:
    fs, path = filesystem(url)
    with naming(url):
        return fs.isfile(path)


def glob(pattern: str) -> list[str]:
    """The files matching a glob, sorted, named the way the pattern is (a URL stays a URL)."""
    fs, path = filesystem(pattern)
    with naming(pattern):
        found = sorted(p for p, info in fs.glob(path, detail=True).items() if info.get("type") != "directory")
    return [fs.unstrip_protocol(p) for p in found] if "://" in pattern else found


def canonical(url: str) -> str:
    """`url` in one spelling, to compare two names of a file: a local path resolved, a URL as given."""
    if not is_local(url):
        return url.rstrip("/")
    return os.path.realpath(url[len("file://"):] if url.startswith("file://") else url)


def inside(url: str, folder: str) -> bool:
    """Whether `url` lies under `folder`."""
    return canonical(url).startswith(canonical(folder) + "/")


def names_in(url: str) -> list[str]:
    """The names directly inside the folder `url`, none if it is not there (on an object store a
    folder exists only while it holds an object, whatever `makedirs` did)."""
    fs, path = filesystem(url)
    try:
        with naming(url):
            return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))
    except FileNotFoundError:
        return []


def sibling(url: str, name: str) -> str:
    """`name` in the folder of `url` (`s3://b/run/stats.json`, `groups/en.json` -> `s3://b/run/groups/en.json`)."""
    parent = posixpath.dirname(url)
    return join(parent, name) if parent else name


@contextlib.contextmanager
def open_read(url: str, compression: str | None = None) -> Iterator:
    """`url` opened for reading in binary (decompressed by extension with compression="infer")."""
    fs, path = filesystem(url)
    with naming(url):          # the opening only: the reader's own errors (a corrupt .gz) stay as they are
        f = fs.open(path, "rb", compression=compression)
    with f:
        yield f


def read_bytes(url: str) -> bytes:
    with open_read(url) as f:
        return f.read()


def read_text(url: str) -> str:
    return read_bytes(url).decode("utf-8")


def read_head(url: str, size: int) -> bytes:
    """The first `size` bytes of a file (fewer if it is shorter)."""
    with open_read(url) as f:
        return f.read(size)


def append_text(url: str, text: str) -> None:
    """Append to a local file (an object store has no appendable file); a short text lands whole."""
    fs, path = filesystem(url)
    with naming(url), fs.open(path, "ab") as f:
        f.write(text.encode("utf-8"))


def remove(url: str) -> None:
    """Remove one file if it is there."""
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path)


def remove_tree(url: str) -> None:
    """Remove a folder and everything under it, if it is there."""
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


@contextlib.contextmanager
def local_copy(url: str, name: str = "file") -> Iterator[str]:
    """A local path holding the file at `url` for the block: the file itself when it is local, else
    a copy named `name` in a temporary folder removed afterwards (for readers that take paths)."""
    if is_local(url):
        yield filesystem(url)[1]
        return
    fs, path = filesystem(url)
    with tempfile.TemporaryDirectory() as folder:
        local = os.path.join(folder, name)
        fs.get(path, local)
        yield local


@contextlib.contextmanager
def open_atomic(url: str, mode: str = "wb") -> Iterator:
    """Open `url` for writing under a temporary name and rename it into place when the block succeeds.

    A crash mid-write leaves only a hidden `.NAME.tmp-*` file, never a file that looks complete under
    its final name. On object stores the rename is a copy + delete, so a worker killed in between (a
    retried bundle on Dataflow) can leave the temporary next to the final file: its name ends in
    `.tmp-*`, not in the final extension, so the globs that read outputs (`counts/*.parquet`) skip it.
    """
    fs, path = filesystem(url)
    parent, name = posixpath.split(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    tmp = posixpath.join(parent, f".{name}.tmp-{uuid.uuid4().hex}")
    try:
        with fs.open(tmp, mode) as f:
            yield f
        fs.mv(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(tmp)
        raise


_TEMPORARY = re.compile(r"\..+\.tmp-[0-9a-f]{32}")     # open_atomic's temporary names


def remove_stale_temporaries(output: str) -> int:
    """Remove the temporaries that a killed worker left under `output` (open_atomic cleans up after
    itself otherwise). Called by the launcher before a run starts, when no worker of this run can be
    writing one; returns how many were removed."""
    fs, path = filesystem(output)
    if not fs.exists(path):
        return 0
    stale = [f for f in fs.find(path) if _TEMPORARY.fullmatch(posixpath.basename(f))]
    for f in stale:
        fs.rm(f)
    return len(stale)


def write_text_atomic(url: str, text: str) -> None:
    with open_atomic(url, "wb") as f:
        f.write(text.encode("utf-8"))


def read_json(url: str) -> dict:
    return json.loads(read_text(url))


@contextlib.contextmanager
def writing(url: str) -> Iterator[None]:
    """Inside a worker: an OSError while writing `url` (a read-only or full filesystem, a file where a
    folder should be) becomes a ShardFailure naming it."""
    try:
        yield
    except OSError as exc:
        raise ShardFailure(f"cannot write {url}: {os_error_reason(exc)}") from exc


def check_output_folder(url: str, flag: str = "--output") -> None:
    """Refuse an output the run could not use, before any work: a `memory://` URL (it lives inside
    one process, and the pipelines write from worker processes: the output would be lost), or an
    existing file where a folder is wanted. Creates the folder otherwise."""
    if url.startswith("memory://"):
        raise UserError(f"{flag} {url}: memory:// lives inside one process and the output would be lost "
                        f"with it; use a local folder or an object store URL")
    fs, path = filesystem(url)
    if fs.isfile(path):
        raise UserError(f"{flag} {url} is a file; it must be a folder (new or from an earlier run)")
    try:
        fs.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {flag} {url}: {os_error_reason(exc)}") from None
