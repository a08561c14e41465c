"""Loading a Tokenizer from files, and the checked tables remembered across loads.

`from_file` (tokenizer.json), `from_tiktoken` (a rank file) and `from_gpt2_files` (vocab.json +
merges.txt) are what `Tokenizer.from_file` & co. call. A file's checked tables (`table_cache.Tables`)
are kept by the SHA-256 of its bytes: the last few in this process (`_TABLES`: a Beam pipeline run in
one process loads its tokenizer in the launcher and again in the worker) and on disk in
`implementation.cache_dir` (bpe_ops/table_cache.py). `Tokenizer(**formats.read_tokenizer_json(path))`
is what a load returns in every case; `tokenizer_of_tables` rebuilds that tokenizer from its tables
without redoing its checks.
"""
from __future__ import annotations

import gc
import json
import os
import threading
from array import array
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, TypeVar

from . import formats, table_cache
from .implementation import DEFAULT, Implementation
from .pretokenize import resolve_pattern
from .sentencepiece_bpe import PieceModel

# The Tokenizer class the loaders are given (`Tokenizer.from_file` passes itself): the encoder imports
# this module, so this one names the class only through its callers.
T = TypeVar("T")

# The tables of the files this process loaded last, by the SHA-256 of their bytes.
_TABLES: dict[str, table_cache.Tables] = {}
_TABLES_KEPT = 2
_REMEMBERING = threading.Lock()    # threads may load tokenizers at once


def from_file(cls: type[T], path: str | os.PathLike, implementation: Implementation = DEFAULT) -> T:
    """`Tokenizer.from_file`: load a tokenizer.json (ours, or a byte-level BPE written by Hugging Face
    `tokenizers`); `path` may be the file or a directory holding one.

    Its checked tables are kept by the SHA-256 of the file's bytes (`source_sha256`): in this
    process, and in `implementation.cache_dir` when set (see bpe_ops/table_cache.py), so that
    the next load of the same bytes skips the parse. `Tokenizer(**formats.read_tokenizer_json(path))`
    is what this returns in every case."""
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    with open(path, "rb") as f:
        data = f.read()
    key = table_cache.file_sha256(data)

    def read() -> dict | table_cache.Tables:
        got = formats.read_tokenizer_data(data, path, as_tables=True)      # Tables for the common byte-level file
        return got if isinstance(got, table_cache.Tables) else {**got, "implementation": implementation}

    tok = _cached(cls, key, implementation, read, path)
    tok.source_sha256 = key
    return tok


def from_tiktoken(cls: type[T], path: str | os.PathLike, pattern: str,
                  special_tokens: Mapping[str, int] | None = None,
                  implementation: Implementation = DEFAULT) -> T:
    """`Tokenizer.from_tiktoken`: load a tiktoken rank file (`.tiktoken`, or a `tokenizer.model` in that
    format) with its split `pattern` (a name: `gpt2`, `gpt4`/`cl100k_base`, `o200k`/`o200k_base`, or a
    regex) and its special tokens `{token: id}`: the ids tiktoken's `Encoding(pat_str=...,
    mergeable_ranks=..., special_tokens=...)` gives. A whole pre-token that is a token is that token
    (tiktoken looks pieces up before merging: `ignore_merges`). Tables are cached as in `from_file`,
    keyed by the file's bytes, the pattern and the special tokens."""
    specials = dict(special_tokens or {})
    resolved = resolve_pattern(pattern)
    with open(path, "rb") as f:
        data = f.read()
    source = table_cache.file_sha256(data)
    key = table_cache.file_sha256("\0".join(["tiktoken", source, resolved, json.dumps(sorted(specials.items()))])
                                  .encode("utf-8", "surrogatepass"))
    tok = _cached(cls, key, implementation,
                  lambda: {**formats.read_tiktoken_data(data, path), "pattern": resolved, "special_tokens": specials,
                           "ignore_merges": True, "implementation": implementation}, path)
    tok.source_sha256 = source
    return tok


def from_gpt2_files(cls: type[T], vocab_json: str | os.PathLike, merges_txt: str | os.PathLike,
                    pattern: str = "gpt2", implementation: Implementation = DEFAULT) -> T:
    """See `Tokenizer.from_gpt2_files` (not cached: no pipeline loads this layout)."""
    return _named(merges_txt, cls, {**formats.read_gpt2_files(vocab_json, merges_txt), "pattern": pattern,
                                    "implementation": implementation})


def _cached(cls: type[T], key: str, implementation: Implementation,
            read: Callable[[], dict | table_cache.Tables], path: str | os.PathLike) -> T:
    """The tokenizer of the file whose tables hash to `key`: from the remembered or the cached
    tables when there are some, else built from what `read()` gives, the constructor's arguments
    or tables read straight from the file (and its tables kept)."""
    tables = _TABLES.get(key)
    if tables is None:
        tables = table_cache.load(implementation.cache_dir, key)
        if tables is not None and tables.sha256 is None:      # saved by a cold load: see `saving.sha256`
            tables.saved_in = (implementation.cache_dir, key)
    if tables is not None:
        tok = tokenizer_of_tables(cls, tables, implementation)
    else:
        with _collector_paused():
            got = read()
            fresh = isinstance(got, table_cache.Tables)
            tok = tokenizer_of_tables(cls, got, implementation) if fresh else _named(path, cls, got)
        # Tables read straight from the file are `tables_of` the tokenizer built from them but its
        # sha256 (tests/bpe_ops/test_fresh_tables.py): kept, not rebuilt from the tokenizer's dicts.
        # The sha256 (the canonical text's: as long to build as the whole load) is left to whoever
        # asks for it (a pipeline's launcher): `saving.sha256` then writes the tables again with it.
        tables = tok._tables = replace(got, sha256=tok._sha256) if fresh else tables_of(tok)
        if table_cache.save(implementation.cache_dir, key, tables):
            tables.saved_in = (implementation.cache_dir, key)
    _remember(key, tables)
    return tok


def _remember(key: str, tables: table_cache.Tables) -> None:
    with _REMEMBERING:
        _TABLES.pop(key, None)
        _TABLES[key] = tables
        while len(_TABLES) > _TABLES_KEPT:
            del _TABLES[next(iter(_TABLES))]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: reading a large vocabulary allocates millions of
    containers and none of them is garbage, yet each allocation burst would start a collection
    that walks them all (most of a large file's load time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _named(path: str | os.PathLike, cls: type[T], kwargs: dict) -> T:
    """Build a tokenizer from a file's contents; an inconsistency names the file."""
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


# ---- tables <-> tokenizer -----------------------------------------------------------------------

def tokenizer_of_tables(cls: type[T], tables: table_cache.Tables, implementation: Implementation = DEFAULT,
                        cache_size: int = 100_000) -> T:
    """The byte-level or piece-mode tokenizer `tables` describe, as `Tokenizer(...)` of the file
    they were read from builds it (the tests hold every table equal), without redoing its checks:
    the tables were made from a checked Tokenizer. The merge list as byte pairs and the pair -> rank
    dict are built on first use: the compiled encoder needs neither."""
    self = cls.__new__(cls)
    piece = tables.piece
    self.decoder_spec = self.unk_token = self._piece_model = None     # the attributes in __init__'s order
    if piece is not None:
        self.decoder_spec, self.unk_token = piece["decoder"], piece["unk_token"]
    self._set_options("byte" if piece is None else "piece", tables.pattern, tables.ignore_merges, cache_size,
                      implementation, tables.normalizer, tables.pre_tokenizer, tables.added_tokens)
    ids, tokens = tables.token_ids.tolist(), tables.tokens()
    self._tokens = dict(zip(ids, tokens))
    self._token_ids = dict(zip(tokens, ids))
    if len(self._tokens) != len(ids) or len(self._token_ids) != len(ids):
        raise ValueError("the tables repeat a token or an id")
    self._merges = self._ranks_table = None
    self._left, self._right, self._merged = tables.left.tolist(), tables.right.tolist(), tables.merged.tolist()
    self._piece_model = _piece_model(piece, ids, tokens, self._left, self._right) if piece else None
    self._ranks_ascend = tables.ranks_ascend
    self.special_tokens = dict(tables.special_tokens)
    self._sha256 = tables.sha256
    self._tables = tables
    self._finish()
    return self


def _piece_model(piece: dict, ids: list[int], tokens: list[bytes], left: list[int], right: list[int]) -> PieceModel:
    """The `PieceModel` of a piece-mode file's tables (its vocab's special tokens included)."""
    text = [t.decode("utf-8", "surrogatepass") for t in tokens]
    pieces = dict(zip(text, ids))
    pieces.update((p, i) for p, i in piece["vocab_specials"])
    of_id = dict(zip(ids, text))
    of_id.update((i, p) for p, i in piece["vocab_specials"])
    return PieceModel(pieces, zip(map(of_id.__getitem__, left), map(of_id.__getitem__, right)),
                      byte_fallback=piece["byte_fallback"], unk_id=pieces.get(piece["unk_token"]),
                      fuse_unk=piece["fuse_unk"])


def tables_of(tok: Any) -> table_cache.Tables:
    """A byte-level or piece-mode tokenizer's tables (see `tokenizer_of_tables`)."""
    tokens = list(tok._tokens.values())
    piece = None
    if tok.mode == "piece":
        model = tok._piece_model
        piece = {"decoder": tok.decoder_spec, "unk_token": tok.unk_token, "byte_fallback": model.byte_fallback,
                 "fuse_unk": model.fuse_unk,
                 "vocab_specials": sorted([p, i] for p, i in model.piece_ids.items() if i not in tok._tokens)}
    return table_cache.Tables(
        piece=piece, pattern=tok.pattern, ignore_merges=tok.ignore_merges, special_tokens=dict(tok.special_tokens),
        token_ids=array("q", tok._tokens), token_lengths=array("q", map(len, tokens)), token_blob=b"".join(tokens),
        left=array("q", tok._left), right=array("q", tok._right), merged=array("q", tok._merged),
        ranks_ascend=tok._ranks_ascend, sha256=tok._sha256, normalizer=tok.normalizer_spec,
        pre_tokenizer=tok.pre_tokenizer_spec, added_tokens=tok.added_tokens_spec)
