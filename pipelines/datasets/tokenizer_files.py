"""Loading a tokenizer file from any fsspec URL, once in the launcher and once per worker.

bpe_ops keeps a loaded file's tables in the process and, with `Implementation.cache_dir`, on disk,
keyed by the SHA-256 of the file's bytes: the launcher's load pays the parse, the workers' loads
(threads, processes, later runs) read the tables and the canonical sha256 from there.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from bpe_ops.implementation import DEFAULT, Implementation

from pipelines.core.errors import UserError, os_error_reason, warn
from pipelines.core.files import exists, isdir, isfile, join, local_copy, read_bytes, read_head

MAX_TOKEN_ID = 2**32 - 1          # the widest id type of the token Parquet is uint32


@dataclass(frozen=True)
class TokenizerRef:
    """A tokenizer as the launcher identified it: where it is, its `sha256` (of the canonical
    tokenizer.json text, which is costly to build for a large vocabulary: the launcher computes it
    once and the workers take it from here) and the SHA-256 of the file's raw bytes, by which each
    worker checks that it loaded the very file the launcher hashed; the rank-file options (`pattern`,
    `special_tokens` as (token, id) pairs), and the bpe_ops implementation the workers encode with."""
    url: str
    sha256: str
    file_sha256: str
    implementation: Implementation = DEFAULT
    pattern: str | None = None
    special_tokens: tuple[tuple[str, int], ...] | None = None


def identify_tokenizer(url: str, implementation: Implementation = DEFAULT, pattern: str | None = None,
                       special_tokens: Mapping[str, int] | None = None):
    """Load the tokenizer at `url` (launcher side): `(Tokenizer, TokenizerRef)`; UserError when unusable.
    `pattern` and `special_tokens` are for tiktoken rank files (see `load_tokenizer`)."""
    tok = load_tokenizer(url, implementation, pattern, special_tokens)
    specials = tuple(sorted(special_tokens.items())) if special_tokens is not None else None
    ref = TokenizerRef(url, tok.sha256, tok.source_sha256, implementation, pattern, specials)
    _IDENTIFIED.clear()            # the run's own only: a long-lived process does not pile them up
    _IDENTIFIED[ref] = tok
    return tok, ref


def load_identified_tokenizer(ref: TokenizerRef):
    """Load the tokenizer `ref` names (worker side); UserError when unusable or no longer the file the
    launcher identified (the sha256 that goes into every output would be false). The check is on the
    very bytes this load parsed; in the launcher's own process, whose tokenizer is reused, on the
    bytes the file holds now."""
    identified = _IDENTIFIED.get(ref)
    if identified is not None and tokenizer_file_sha256(ref.url) == ref.file_sha256:
        # A worker in the launcher's process (the local runner's): the file still holds the bytes
        # the launcher loaded, so its tokenizer is this one; loading it again cost 0.2 s at 131k ids.
        return identified
    specials = dict(ref.special_tokens) if ref.special_tokens is not None else None
    tok = load_tokenizer(ref.url, ref.implementation, ref.pattern, specials, launcher=False)
    if tok.source_sha256 != ref.file_sha256:
        raise UserError(f"tokenizer {ref.url} changed since the run started; rerun the command")
    return tok


# The tokenizer the launcher identified, by its reference (in the launcher's process only).
_IDENTIFIED: dict[TokenizerRef, object] = {}
_TOKEN_BYTES: dict[TokenizerRef, Mapping[int, bytes]] = {}


def token_bytes_of(ref: TokenizerRef) -> Mapping[int, bytes]:
    """The token bytes by id of the tokenizer `ref` names: what `TokenizerFacts` reloads on a worker
    instead of carrying the vocabulary through Beam's pickler (use it as `partial(token_bytes_of, ref)`).
    Loaded once per process; in the launcher's (the local runner's writers run there), taken from
    the tokenizer it identified."""
    if ref not in _TOKEN_BYTES:
        identified = _IDENTIFIED.get(ref)         # the very tokenizer whose sha256 the outputs carry
        # A read-only view of the tokenizer's own vocabulary, not a copy of it held to the job's end.
        _TOKEN_BYTES[ref] = MappingProxyType(
            (identified if identified is not None else load_identified_tokenizer(ref)).vocab)
    return _TOKEN_BYTES[ref]


def _tokenizer_file(url: str) -> str:
    """The file a `--tokenizer` names: `url` itself, or the tokenizer.json of the folder it names.
    UserError when there is no such file, or the folder holds no tokenizer.json."""
    if isdir(url):
        inside = join(url, "tokenizer.json")
        if not isfile(inside):
            raise UserError(f"cannot use tokenizer {url}: the folder holds no tokenizer.json (give a "
                            f"tokenizer.json, a folder holding one, or a tiktoken rank file with --pattern)")
        return inside
    if not exists(url):
        raise UserError(f"cannot use tokenizer {url}: no such file")
    return url


def tokenizer_file_sha256(url: str) -> str:
    """Hex SHA-256 of the raw bytes of the tokenizer file at `url` (or the tokenizer.json in the folder `url`)."""
    try:
        return hashlib.sha256(read_bytes(_tokenizer_file(url))).hexdigest()
    except OSError as exc:
        raise UserError(f"cannot use tokenizer {url}: {os_error_reason(exc)}") from None


def _first_line(exc: Exception, local: str | None = None) -> str:
    """The first line of an error's message, without the `LOCAL: ` (or `LOCAL:LINE: `) a reader put
    before it: the caller names the tokenizer by the URL the user gave."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if local and line.startswith(local + ":"):
        rest = line[len(local) + 1:]
        line = rest[1:] if rest.startswith(" ") else "line " + rest
    return line


def check_id_range(tok, url: str) -> None:
    """Refuse a tokenizer whose ids do not fit uint32, or leave most of their range unused: stats
    count every id of the range densely, so one stray id of 3,000,000,000 would cost gigabytes."""
    if tok.vocab_size - 1 > MAX_TOKEN_ID:
        raise UserError(f"cannot use tokenizer {url}: its largest id is {tok.vocab_size - 1:,}, too large for "
                        f"uint32, the widest token id type; supported: ids 0 to {MAX_TOKEN_ID:,}")
    if len(tok.vocab) < tok.vocab_size // 2:
        raise UserError(f"cannot use tokenizer {url}: {len(tok.vocab):,} tokens spread over ids 0 to "
                        f"{tok.vocab_size - 1:,}; supported: ids numbered from 0 with few gaps")


def parse_special_token(spec: str) -> tuple[str, int]:
    """`TOKEN=ID` (the value of `--special-token`) -> (TOKEN, ID); the last `=` separates them, so a
    token may contain `=`. UserError when malformed."""
    from bpe_ops.formats import MAX_ID

    from pipelines.core.command import check_special_token

    token, sep, number = spec.rpartition("=")
    if not sep or not number.isascii() or not number.isdigit():
        raise UserError(f"--special-token {spec!r}: expected TOKEN=ID with a non-negative integer ID, "
                        f"e.g. --special-token '<|endoftext|>=100257'")
    if int(number) > MAX_ID:
        raise UserError(f"--special-token {spec!r}: the ID does not fit uint32 (0 to {MAX_ID:,})")
    return check_special_token(token, spec), int(number)


def load_tokenizer(url: str, implementation: Implementation = DEFAULT, pattern: str | None = None,
                   special_tokens: Mapping[str, int] | None = None, launcher: bool = True):
    """Load a tokenizer from any fsspec URL; UserError when unusable. Either a tokenizer.json (or a
    folder holding one), which records its own split pattern and special tokens, or a tiktoken rank
    file (`.tiktoken`, or a `tokenizer.model` in that format; told apart by content), which needs
    `pattern` (a name or a regex) and may take `special_tokens` {token: id}. The `launcher`'s load
    (not a worker's) warns once where the file's regexes read otherwise in tiktoken than in Hugging
    Face: a tokenizer.json encodes as Hugging Face reads it."""
    from bpe_ops import Tokenizer
    from bpe_ops.formats import is_rank_file
    from bpe_ops.regex_dialect import regexes_read_differently

    def load(local: str):
        head = read_head(local, 4096)
        if is_rank_file(head):
            if pattern is None:
                raise UserError(f"cannot use tokenizer {url}: a tiktoken rank file does not record its split "
                                f"pattern; give --pattern NAME_OR_REGEX (gpt2, gpt4 = cl100k_base, o200k = "
                                f"o200k_base, or a regex)")
            return Tokenizer.from_tiktoken(local, pattern, special_tokens, implementation=implementation)
        if pattern is not None or special_tokens:
            raise UserError(f"cannot use tokenizer {url}: --pattern and --special-token apply to tiktoken rank "
                            f"files only; a tokenizer.json records its own split pattern and special tokens")
        tok = Tokenizer.from_file(local, implementation=implementation)
        if launcher:
            for regex_text in regexes_read_differently(read_bytes(local)):
                warn(f"tokenizer {url}: its regex {regex_text!r} reads otherwise in tiktoken than in Hugging "
                     f"Face (Oniguruma: an interval followed by + repeats, ^ and $ match at lines); it is "
                     f"encoded as Hugging Face encodes it")
        return tok

    local = None
    try:
        found = _tokenizer_file(url)
        with local_copy(found, "tokenizer") as local:   # named in errors as `url`
            return load(local)
    except UserError:
        raise
    except OSError as exc:
        raise UserError(f"cannot use tokenizer {url}: {exc.strerror or _first_line(exc, local)}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot use tokenizer {url}: {_first_line(exc, local)}") from None
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        # A safety net: the readers check every value's type and range, and say which one is wrong.
        raise UserError(f"cannot use tokenizer {url}: malformed tokenizer file "
                        f"({type(exc).__name__}: {_first_line(exc, local)})") from None
