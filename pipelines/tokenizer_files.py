"""Loading a tokenizer file from any fsspec URL, once in the launcher and once per worker."""
from __future__ import annotations

import gc
import hashlib
import os
import tempfile
from dataclasses import dataclass

from bpe_ops.implementation import DEFAULT, Implementation

from pipelines.errors import UserError, os_error_reason
from pipelines.files import filesystem, is_local


@dataclass(frozen=True)
class TokenizerRef:
    """A tokenizer as the launcher identified it: where it is, its `sha256` (of the canonical
    tokenizer.json text, which is costly to build for a large vocabulary: the launcher computes it
    once and the workers take it from here) and the SHA-256 of the file's raw bytes (milliseconds),
    by which each worker checks that it loaded the very file the launcher hashed; and the bpe_ops
    implementation the workers encode with."""
    url: str
    sha256: str
    file_sha256: str
    implementation: Implementation = DEFAULT


def identify_tokenizer(url: str, implementation: Implementation = DEFAULT):
    """Load the tokenizer at `url` (launcher side): `(Tokenizer, TokenizerRef)`; UserError when unusable."""
    tok = load_tokenizer(url, implementation)
    return tok, TokenizerRef(url, tok.sha256, tokenizer_file_sha256(url), implementation)


def load_identified_tokenizer(ref: TokenizerRef):
    """Load the tokenizer `ref` names (worker side); UserError when unusable or no longer the file the
    launcher identified (the sha256 that goes into every output would be false)."""
    tok = load_tokenizer(ref.url, ref.implementation)
    # Hashed after loading: a file replaced before the load still differs from the launcher's.
    if tokenizer_file_sha256(ref.url) != ref.file_sha256:
        raise UserError(f"tokenizer {ref.url} changed since the run started; rerun the command")
    return tok


def _tokenizer_path(fs, path: str) -> str:
    return path.rstrip("/") + "/tokenizer.json" if fs.isdir(path) else path


def tokenizer_file_sha256(url: str) -> str:
    """Hex SHA-256 of the raw bytes of the tokenizer.json at `url` (or in the folder `url`)."""
    fs, path = filesystem(url)
    try:
        with fs.open(_tokenizer_path(fs, path), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as exc:
        raise UserError(f"cannot use tokenizer {url}: {os_error_reason(exc)}") from None


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def load_tokenizer(url: str, implementation: Implementation = DEFAULT):
    """Load a tokenizer.json (or a folder holding one) from any fsspec URL; UserError when unusable."""
    from bpe_ops import Tokenizer

    try:
        if is_local(url):
            local = url[len("file://"):] if url.startswith("file://") else url
            if os.path.isdir(local):
                local = os.path.join(local, "tokenizer.json")
            if not os.path.exists(local):
                raise UserError(f"cannot use tokenizer {url}: no such file")
            if os.path.isdir(local):
                raise UserError(f"cannot use tokenizer {url}: a folder without tokenizer.json")
            return Tokenizer.from_file(local, implementation=implementation)
        fs, path = filesystem(url)
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "tokenizer.json")
            fs.get(_tokenizer_path(fs, path), local)
            return Tokenizer.from_file(local, implementation=implementation)
    except UserError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot use tokenizer {url}: {_first_line(exc)}") from None
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        # A file of the right shape with a value of the wrong type (an id written as a string...).
        raise UserError(f"cannot use tokenizer {url}: malformed tokenizer.json "
                        f"({type(exc).__name__}: {_first_line(exc)})") from None


def settle_heap() -> None:
    """Collect garbage once, then freeze every object left (`gc.freeze`), for a process whose objects
    live to its end (a Beam worker process: Beam's modules, the loaded tokenizer): every later full
    collection and the interpreter's exit would walk them again. Not for a library caller's process:
    a frozen object dropped later in a reference cycle is never freed."""
    gc.collect()
    gc.freeze()
