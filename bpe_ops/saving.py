"""A tokenizer's files: the canonical tokenizer.json text, its SHA-256, and `save`.

The text is built once per tokenizer (about 1 s for a 50k vocabulary; `sha256` and `save` both need
it, and the train pipeline asks for both) by bpe_ops/formats.py, which refuses classic mode. A
tokenizer loaded from a file shares its SHA-256 with the file's remembered tables
(bpe_ops/load.py), so the next tokenizer of the same file need not build the text; a cold load
with a cache folder saves its tables before anyone asks for the SHA-256, and `sha256` saves them
again with it, so that later processes' loads (a run's next launcher) find it there.

>>> import tempfile
>>> from bpe_ops import Tokenizer
>>> tok = Tokenizer([(b"a", b"b")])
>>> json_text(tok) is json_text(tok), len(sha256(tok))
(True, 64)
>>> with tempfile.TemporaryDirectory() as folder:
...     sorted(os.listdir(os.path.dirname(save(tok, folder))))
['tokenizer.json', 'tokenizer.tiktoken']
"""
from __future__ import annotations

import hashlib
import os
from typing import Any

from . import formats, table_cache
from .load import _collector_paused


def json_text(tok: Any) -> str:
    """The canonical tokenizer.json text of `tok`, built on first use and kept."""
    if tok._json is None:
        tok._json = (formats.piece_tokenizer_json_text(tok) if tok.mode == "piece"
                     else formats.tokenizer_json_text(tok))  # refuses classic mode
    return tok._json


def sha256(tok: Any) -> str:
    """Hex SHA-256 of `json_text(tok)`, kept, and given to the tables `tok` was loaded from."""
    if tok._sha256 is None:
        with _collector_paused():
            tok._sha256 = hashlib.sha256(json_text(tok).encode("utf-8")).hexdigest()
        tables = tok._tables
        if tables is not None:             # shared with the next tokenizer of the same file
            tables.sha256 = tok._sha256
            if tables.saved_in is not None:     # cached without it by a cold load: now with it
                table_cache.save(*tables.saved_in, tables)
                tables.saved_in = None
    return tok._sha256


def save(tok: Any, directory: str | os.PathLike) -> str:
    """Write `tokenizer.json` and `tokenizer.tiktoken` into `directory`; return the json path.

    No rank file when tiktoken cannot split the same way (a pre-tokenizer chain; see
    `formats.tiktoken_recipe`), and an older one there is removed: it would encode differently."""
    text = json_text(tok)  # refuses classic mode before anything is written
    os.makedirs(directory, exist_ok=True)
    json_path = os.path.join(directory, "tokenizer.json")
    with open(json_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    rank_path = os.path.join(directory, "tokenizer.tiktoken")
    if formats.tiktoken_recipe(tok)["written"]:
        with open(rank_path, "w", encoding="ascii", newline="\n") as f:
            f.write(formats.tiktoken_text(tok))
    elif os.path.exists(rank_path):
        os.remove(rank_path)
    return json_path
