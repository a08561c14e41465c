"""A tokenizer file's checked tables, kept on disk by the SHA-256 of the file's bytes.

Reading a large tokenizer.json is mostly work that gives the same answer every time: decoding the
JSON, spelling every token and merge half back into bytes, resolving each merge to token ids,
checking the file, and building the canonical text whose SHA-256 identifies the tokenizer. The
result is a few flat integer arrays and one byte string (`Tables`); saved, they load in a few
milliseconds. A run loads its tokenizer in the launcher and again in every worker, so the second
and later loads, in any process, take them from here.

The cache is a convenience, never a source of truth:
  - the key is the SHA-256 of the very bytes the loader read, so an edited file is a new key;
  - a cache file states its format, the key it belongs to and a SHA-256 of its whole content; one
    that is truncated, corrupt, of another format or for another file is ignored (and replaced);
  - it holds only integers, bytes and a small JSON header: nothing is unpickled or evaluated;
  - a folder that cannot be written (read-only, full, not a folder) costs the saving, not the load.
`Tokenizer(**formats.read_tokenizer_json(path))` is the specification; the tests require a tokenizer
rebuilt from its tables to equal it in every table and give the same ids.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tempfile
from array import array
from dataclasses import dataclass, field
from itertools import accumulate

# Raise when the tables, their layout or what a reader puts in them change: older files are ignored.
FORMAT = 5          # 5: tokenizer.json regexes read as Hugging Face reads them; readers' stricter checks
MAGIC = b"tokenbeam-tables\n"
SUBFOLDER = "tokenizers"
_DIGEST = 32
_HEADER_LENGTH = struct.Struct("<Q")


@dataclass
class Tables:
    """What a byte-level or SentencePiece-style (piece mode) Tokenizer is made of once its file is
    read and checked.

    `token_ids[k]` is the id of the ordinary token `token_blob[offset_k : offset_k + token_lengths[k]]`
    (special tokens are in `special_tokens`); merge rank r joins `left[r]` and `right[r]` into
    `merged[r]`. `ranks_ascend` is `merging.ranks_ascend` of the merges; `sha256` the canonical
    tokenizer.json text's (None until someone asked for it: a cold load does not build that text).
    `piece` holds a piece-mode file's model options (decoder, byte_fallback, unk_token, fuse_unk,
    and `vocab_specials`: the special tokens its vocab lists, [piece, id] pairs); None for byte
    level."""
    pattern: str
    ignore_merges: bool
    special_tokens: dict
    token_ids: array
    token_lengths: array
    token_blob: bytes
    left: array
    right: array
    merged: array
    ranks_ascend: bool
    sha256: str | None = None
    normalizer: dict | None = None
    pre_tokenizer: dict | None = None
    added_tokens: list | None = None
    piece: dict | None = None
    _tokens: list | None = field(default=None, repr=False, compare=False)
    # (cache folder, key) these tables were saved under while their sha256 was unknown: where
    # `saving.sha256` writes them again once it is known. Not saved.
    saved_in: tuple | None = field(default=None, repr=False, compare=False)

    def tokens(self) -> list[bytes]:
        """The ordinary tokens' bytes, in `token_ids` order (cut once: bytes are immutable, so every
        tokenizer of these tables may share them)."""
        if self._tokens is None:
            ends = list(accumulate(self.token_lengths))
            self._tokens = list(map(self.token_blob.__getitem__, map(slice, [0, *ends[:-1]], ends)))
        return self._tokens


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_path(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, SUBFOLDER, f"{key}.v{FORMAT}.tables")


def dumps(tables: Tables, key: str) -> bytes:
    """The cache file's bytes: MAGIC, header length, JSON header, the arrays, SHA-256 of all before."""
    return b"".join(_file_parts(tables, key))


def _file_parts(tables: Tables, key: str):
    """The cache file's parts in order (`dumps` joined): the body's, then its SHA-256."""
    digest = hashlib.sha256()
    for part in _body(tables, key):
        digest.update(part)
        yield part
    yield digest.digest()


def _body(tables: Tables, key: str):
    """The parts of a cache file before its digest, as buffers (the arrays' own memory where they are
    already little-endian int64: `save` writes them without a copy)."""
    header = json.dumps({
        "format": FORMAT, "key": key, "pattern": tables.pattern, "ignore_merges": tables.ignore_merges,
        "special_tokens": sorted(tables.special_tokens.items(), key=lambda kv: kv[1]),
        "ranks_ascend": tables.ranks_ascend, "sha256": tables.sha256,
        "normalizer": tables.normalizer, "pre_tokenizer": tables.pre_tokenizer,
        "added_tokens": tables.added_tokens, "piece": tables.piece,
        "tokens": len(tables.token_ids), "blob": len(tables.token_blob), "merges": len(tables.left),
    }, ensure_ascii=True).encode("ascii")
    yield MAGIC
    yield _HEADER_LENGTH.pack(len(header))
    yield header
    for name in ("token_ids", "token_lengths"):
        yield _little_endian(getattr(tables, name))
    yield tables.token_blob
    for name in ("left", "right", "merged"):
        yield _little_endian(getattr(tables, name))


def loads(data: bytes, key: str) -> Tables | None:
    """The tables in a cache file's bytes, or None for anything but an intact file of this format
    made for `key`."""
    try:
        body, digest = data[:-_DIGEST], data[-_DIGEST:]
        if not data.startswith(MAGIC) or hashlib.sha256(body).digest() != digest:
            return None
        at = len(MAGIC)
        (header_length,) = _HEADER_LENGTH.unpack_from(body, at)
        at += _HEADER_LENGTH.size
        header = json.loads(body[at:at + header_length].decode("ascii"))
        at += header_length
        if header.get("format") != FORMAT or header.get("key") != key:
            return None
        sections = {}
        for name, count in (("token_ids", header["tokens"]), ("token_lengths", header["tokens"])):
            sections[name], at = _read_array(body, at, count)
        sections["token_blob"], at = body[at:at + header["blob"]], at + header["blob"]
        for name in ("left", "right", "merged"):
            sections[name], at = _read_array(body, at, header["merges"])
        if at != len(body) or sum(sections["token_lengths"]) != header["blob"]:
            return None
        return Tables(pattern=header["pattern"], ignore_merges=bool(header["ignore_merges"]),
                      special_tokens={s: int(i) for s, i in header["special_tokens"]},
                      ranks_ascend=bool(header["ranks_ascend"]), sha256=header["sha256"],
                      normalizer=header["normalizer"], pre_tokenizer=header["pre_tokenizer"],
                      added_tokens=header["added_tokens"], piece=header["piece"], **sections)
    except (ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError):
        return None


def load(cache_dir: str | None, key: str) -> Tables | None:
    """The cached tables of the file whose bytes hash to `key`, or None (no cache, none saved, or
    unusable)."""
    if not cache_dir:
        return None
    try:
        with open(cache_path(cache_dir, key), "rb") as f:
            data = f.read()
    except OSError:
        return None
    return loads(data, key)


def save(cache_dir: str | None, key: str, tables: Tables) -> bool:
    """Write the tables (to a temporary name, then renamed, so readers never see half a file);
    False when the folder cannot take it."""
    if not cache_dir:
        return False
    path = cache_path(cache_dir, key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "wb") as f:
                for part in _file_parts(tables, key):      # no joined copy of the arrays
                    f.write(part)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return True
    except OSError:
        return False


def _little_endian(values: array):
    """`values` as little-endian int64: the array itself when it already is one."""
    if not (isinstance(values, array) and values.typecode == "q" and sys.byteorder == "little"):
        values = array("q", values)
        if sys.byteorder != "little":
            values.byteswap()
    return values


def _read_array(body: bytes, at: int, count: int) -> tuple[array, int]:
    end = at + 8 * count
    if count < 0 or end > len(body):
        raise ValueError("truncated section")
    values = array("q")
    values.frombytes(body[at:end])
    if sys.byteorder != "little":
        values.byteswap()
    return values, end
