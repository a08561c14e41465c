"""Tokenizer: encode text to ids by replaying BPE merges, decode ids back to text.

Encoding is the standard BPE replay: split the text on the special tokens the caller allows, split
each remaining segment into pre-tokens with the tokenizer's regex, then inside every pre-token
repeatedly merge the adjacent pair with the lowest merge rank (leftmost first on ties) until no
adjacent pair is a merge. Merges are keyed on token ids: `(id_a, id_b) -> rank`, `rank -> new_id`.

Real text repeats its pre-tokens, so a bounded cache from pre-token string to ids makes the hot path
a regex split plus dictionary lookups. Long pre-tokens (a base64 blob, a run of one character) are
merged rank by rank over a linked list, so their cost stays near-linear in their length.

Cache misses pay for that merge, so it runs compiled (`bpe_ops/_piece_merge.c`, built by setup.py)
where the extension is built, unless the tokenizer's `implementation` says `compiled=False`;
`_merge_python` is its specification, and the tests require the two to give identical ids.

Where the split runs on PCRE2 (see `pretokenize.Pcre2Pattern`), the whole of `_encode_ordinary`
runs compiled too (`bpe_ops/_pcre2.c`'s `TextEncoder`: split, a byte-keyed cache, the same merge
replay) for every text PCRE2 may split; the Python path below is its specification.
"""
from __future__ import annotations

import hashlib
import os
import threading
from array import array
from bisect import bisect_left, bisect_right
from concurrent.futures import ThreadPoolExecutor
from heapq import heappop, heappush
from itertools import chain, islice, repeat
from typing import Iterable, Mapping, Sequence

from . import formats
from .implementation import DEFAULT, Implementation
from .pretokenize import (END_OF_WORD, Pcre2Pattern, compile_pattern, pattern_name, resolve_pattern,
                          split_on_special, to_utf8)

try:
    from . import _piece_merge       # the compiled twin of Tokenizer._merge_python (optional)
except ImportError:
    _piece_merge = None
try:
    from ._pcre2 import Fallback as _Fallback, TextEncoder as _TextEncoder   # optional: PCRE2 and C
except ImportError:
    _Fallback = _TextEncoder = None

MODES = ("byte", "classic")
# Pieces up to this many symbols use the simple scan, longer ones the rank buckets: measured on
# English and base64 pieces with GPT-2's merges, the scan is faster below about 100 symbols.
SHORT_PIECE = 100
# The rank of "no merge": above every real rank.
NO_MERGE = 1 << 62
# Symbol ids that no merge involves: a merged-away position, and the ends of a long piece.
DEAD, OUTSIDE = -1, -2
# Pre-tokens longer than this are not cached: they rarely repeat and would pin memory.
MAX_CACHED_CHARS = 256
# Texts per task when encode_arrays shares a batch between threads.
THREAD_CHUNK = 16


class Tokenizer:
    """A byte-level (or classic, whitespace/character) BPE tokenizer.

    Byte mode without `vocab`: ids 0..255 are the bytes, merge *i* creates id 256 + *i*, special
    tokens follow the last merge. With `vocab` (files written by others) any id assignment works, as
    long as all 256 single bytes are tokens. A merge whose concatenation is already a token reuses
    that token's id (as Hugging Face's trainer does), so merges may outnumber the new ids.

    Classic mode is the textbook algorithm: whitespace-separated words, characters as symbols and a
    separate end-of-word symbol `</w>` after each word; it needs `vocab` (its alphabet is not implied
    by the merges), and an unknown character is an error.

    `implementation` chooses the compiled twins or the Python code, and the regex engine (see
    bpe_ops/implementation.py); the ids are the same whichever it is.
    """

    def __init__(self, merges: list[tuple[bytes, bytes]], pattern: str = "gpt4",
                 special_tokens: Sequence[str] | Mapping[str, int] = (), *,
                 vocab: dict[int, bytes] | None = None, mode: str = "byte",
                 ignore_merges: bool = False, cache_size: int = 100_000,
                 implementation: Implementation = DEFAULT):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "classic" and resolve_pattern(pattern) not in (resolve_pattern("classic"),
                                                                  resolve_pattern("gpt4")):
            raise ValueError(f"classic mode always splits on whitespace; pattern {pattern!r} does not apply")
        if mode == "classic" and vocab is None:
            raise ValueError("classic mode needs a vocab: its alphabet is not implied by the merges")
        self.mode = mode
        self.implementation = implementation
        self.pattern = resolve_pattern("classic" if mode == "classic" else pattern)
        self.pattern_name = pattern_name(self.pattern)
        self._regex = compile_pattern(self.pattern, implementation)
        # Classic mode drops whitespace by design; the other named patterns match every character.
        self._matches_everything = self.pattern_name is not None
        self.ignore_merges = ignore_merges
        self.cache_size = cache_size
        self.training = None
        self._cache: dict[str, tuple[int, ...]] = {}
        self._sha256: str | None = None
        self._json: str | None = None

        self.merges = [(bytes(a), bytes(b)) for a, b in merges]
        tokens = dict(vocab) if vocab is not None else {b: bytes([b]) for b in range(256)}
        self._token_ids = _invert(tokens)
        self._tokens = tokens
        self._ranks, self._pairs, self._merged = self._build_merge_table(extend=vocab is None)
        self._ranks_ascend = _ranks_ascend(self._ranks, self._merged)
        self._merger = _piece_merger(self._pairs, self._merged, tokens) if implementation.compiled else None
        if mode == "byte":
            missing = [b for b in range(256) if bytes([b]) not in self._token_ids]
            if missing:
                raise ValueError(f"a byte-level vocab must hold all 256 single bytes; missing: "
                                 f"{', '.join(f'0x{b:02x}' for b in missing)}")
            self._byte_ids = [self._token_ids[bytes([b])] for b in range(256)]
            self._identity_bytes = self._byte_ids == list(range(256))
        else:
            if END_OF_WORD.encode() not in self._token_ids:
                raise ValueError(f"a classic vocab must hold the end-of-word symbol {END_OF_WORD!r}")
            self._eow_id = self._token_ids[END_OF_WORD.encode()]
        made = set(self._merged)
        self.special_tokens = self._assign_special_ids(special_tokens, made)
        # A special token listed in the vocab (as trainers and GPT-2's vocab.json do) is not an
        # ordinary token, unless the merges or the alphabet produce it.
        for i in self.special_tokens.values():
            if i in tokens and i not in made and not self._is_base(tokens[i]):
                del self._token_ids[tokens.pop(i)]
        self.vocab = {**tokens, **{i: s.encode("utf-8") for s, i in self.special_tokens.items()}}
        self.vocab_size = max(self.vocab) + 1
        self._text_encoder = self._compiled_text_encoder()
        self._pool: ThreadPoolExecutor | None = None     # encode_arrays' threads, made on first use
        self._pool_threads = 0
        self._thread_encoders = threading.local()         # ... and their own compiled encoders

    def _compiled_text_encoder(self):
        """The compiled whole-text encoder (`bpe_ops._pcre2.TextEncoder`) of this tokenizer, or None:
        classic mode, the split not on PCRE2, no compiled merger (see `_piece_merger`)."""
        if self.mode != "byte" or self._merger is None or not isinstance(self._regex, Pcre2Pattern):
            return None
        return _TextEncoder(self._regex.compiled, [a for a, _ in self._pairs], [b for _, b in self._pairs],
                            self._merged, self._byte_ids, self._token_ids if self.ignore_merges else None,
                            self.cache_size)

    def __getstate__(self):
        # The compiled encoder holds buffers, not a recipe, and threads do not pickle: pickled
        # without them, rebuilt on load.
        return {**self.__dict__, "_text_encoder": None, "_pool": None, "_pool_threads": 0, "_thread_encoders": None}

    def __setstate__(self, state):
        self.__dict__.update({"implementation": DEFAULT, **state})   # pickles made before it had one
        self._text_encoder = self._compiled_text_encoder()
        self._thread_encoders = threading.local()

    # ---- construction -------------------------------------------------------------------------

    def _build_merge_table(self, extend: bool):
        """`(id_a, id_b) -> rank`, `rank -> (id_a, id_b)` and `rank -> new_id`; new tokens get the
        next free id when `extend`."""
        tokens = self._tokens
        ranks: dict[tuple[int, int], int] = {}
        pairs: list[tuple[int, int]] = []
        merged: list[int] = []
        next_id = max(tokens) + 1
        for rank, (a, b) in enumerate(self.merges):
            ia, ib = self._token_ids.get(a), self._token_ids.get(b)
            if ia is None or ib is None:
                raise ValueError(f"merge {rank} ({a!r}, {b!r}) uses a token that is neither in the vocab "
                                 f"nor made by an earlier merge")
            new_id = self._token_ids.get(a + b)
            if new_id is None:
                if not extend:
                    raise ValueError(f"merge {rank} ({a!r}, {b!r}) makes {a + b!r}, which is not in the vocab")
                new_id, next_id = next_id, next_id + 1
                tokens[new_id] = a + b
                self._token_ids[a + b] = new_id
            # A repeated pair keeps its first (lowest) rank.
            ranks.setdefault((ia, ib), rank)
            pairs.append((ia, ib))
            merged.append(new_id)
        return ranks, pairs, merged

    def _is_base(self, token: bytes) -> bool:
        """A symbol of the alphabet: a single byte, or in classic mode a character or `</w>`."""
        if self.mode == "byte":
            return len(token) == 1
        return token == END_OF_WORD.encode() or len(token.decode("utf-8", "replace")) == 1

    def _assign_special_ids(self, special_tokens: Sequence[str] | Mapping[str, int],
                            made: set[int]) -> dict[str, int]:
        """Explicit ids from a Mapping. From a Sequence: the id of the same string when the vocab
        already holds it outside the alphabet and the merges; otherwise the next id after the last
        token, in the given order."""
        tokens = self._tokens
        if isinstance(special_tokens, Mapping):
            out = {}
            for s, i in special_tokens.items():
                if i < 0:
                    raise ValueError(f"special token {s!r} has a negative id {i}")
                if i in tokens and tokens[i] != s.encode("utf-8"):
                    raise ValueError(f"special token {s!r} id {i} is already the token {tokens[i]!r}")
                out[s] = int(i)
            if len(set(out.values())) < len(out):
                raise ValueError(f"two special tokens share an id: {out}")
            return out
        next_id = max(tokens) + 1
        out = {}
        for s in special_tokens:
            if s in out:
                continue
            i = self._token_ids.get(s.encode("utf-8"))
            if i is not None and i not in made and not self._is_base(tokens[i]):
                out[s] = i
            else:
                out[s] = next_id
                next_id += 1
        return out

    # ---- encoding -----------------------------------------------------------------------------

    def encode(self, text: str, allowed_special: Iterable[str] | str = ()) -> list[int]:
        """Token ids of `text`. Special-token strings are plain text unless listed in `allowed_special`
        (`"all"` allows every special token), so data can never inject a control token."""
        if not allowed_special:
            return self._encode_ordinary(text)
        allowed = self._allowed(allowed_special)
        out: list[int] = []
        for segment, is_special in split_on_special(text, allowed):
            if is_special:
                out.append(self.special_tokens[segment])
            else:
                out.extend(self._encode_ordinary(segment))
        return out

    def encode_batch(self, texts: Iterable[str], allowed_special: Iterable[str] | str = ()) -> list[list[int]]:
        """`encode` for each text."""
        return [self.encode(text, allowed_special) for text in texts]

    def encode_array(self, text: str, allowed_special: Iterable[str] | str = ()) -> array:
        """`encode` as an `array("I")`: from the compiled encoder, the ids arrive as one buffer with no
        Python int per id (what a Parquet writer wants). Ids must fit uint32."""
        return self._encode_array_with(self._text_encoder, text, allowed_special)

    def encode_arrays(self, texts: Sequence[str], num_threads: int = 1) -> list[array]:
        """`encode_array` of each text (no special tokens allowed), in order. With `num_threads` > 1 and
        the compiled encoder, threads share the work, each with an encoder of its own: the encoder
        drops the GIL while it works, so they run on as many cores."""
        if num_threads <= 1 or self._text_encoder is None or len(texts) < 2 * THREAD_CHUNK:
            return [self._encode_array_with(self._text_encoder, text) for text in texts]
        if self._pool_threads != num_threads:
            self._pool = ThreadPoolExecutor(num_threads, thread_name_prefix="tokenbeam-encode")
            self._pool_threads = num_threads
        chunks = [texts[i:i + THREAD_CHUNK] for i in range(0, len(texts), THREAD_CHUNK)]
        return list(chain.from_iterable(self._pool.map(self._encode_chunk, chunks)))

    def _encode_chunk(self, texts: Sequence[str]) -> list[array]:
        """`encode_array` of each text with this thread's own compiled encoder (made on first use)."""
        encoder = getattr(self._thread_encoders, "encoder", None)
        if encoder is None:
            encoder = self._thread_encoders.encoder = self._compiled_text_encoder()
        return [self._encode_array_with(encoder, text) for text in texts]

    def _encode_array_with(self, encoder, text: str, allowed_special: Iterable[str] | str = ()) -> array:
        out = array("I")
        if not allowed_special and encoder is not None and self._regex.pcre2_splits(text):
            try:
                out.frombytes(encoder.encode_bytes(text))
                return out
            except _Fallback:
                pass
        out.extend(self.encode(text, allowed_special))
        return out

    def _allowed(self, allowed_special: Iterable[str] | str) -> tuple[str, ...]:
        if allowed_special == "all":
            return tuple(sorted(self.special_tokens))
        if isinstance(allowed_special, str):
            allowed_special = (allowed_special,)
        allowed = tuple(sorted(set(allowed_special)))
        unknown = [s for s in allowed if s not in self.special_tokens]
        if unknown:
            raise ValueError(f"allowed_special names tokens that are not special tokens: {unknown}")
        return allowed

    def _encode_ordinary(self, text: str) -> list[int]:
        """Ids of text with no special tokens: split, look every piece up in the cache, merge misses.

        The compiled encoder takes every text PCRE2 may split. Otherwise every step over all pieces
        runs in C (map, set, chain); Python code runs once per distinct missing piece only."""
        if self._text_encoder is not None and self._regex.pcre2_splits(text):
            try:
                return self._text_encoder.encode(text)
            except _Fallback:           # a text only `regex` may split: below
                pass
        pieces = self._split(text)
        cache = self._cache
        hits = list(map(cache.get, pieces))
        if None in hits:
            fresh = {piece: self._encode_piece(piece) for piece in set(pieces).difference(cache)}
            hits = map(fresh.get, pieces, hits)
        return list(chain.from_iterable(hits))

    def _split(self, text: str) -> list[str]:
        """The pre-tokens of `text`. Byte mode keeps the text between regex matches as pieces too (as
        Hugging Face's `Split(behavior="Isolated")` does), so no byte is ever dropped. The named
        patterns match every character, so only a custom regex needs the check (and the slower
        path when it has capturing groups, which change what findall returns)."""
        if not self._regex.groups:
            pieces = self._regex.findall(text)
            if self._matches_everything or sum(map(len, pieces)) == len(text):
                return pieces
        pieces, pos = [], 0
        for m in self._regex.finditer(text):
            if m.start() > pos:
                pieces.append(text[pos:m.start()])
            if m.end() > m.start():
                pieces.append(m.group())
            pos = m.end()
        if pos < len(text):
            pieces.append(text[pos:])
        return pieces

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        """Ids of one pre-token (a cache miss); the result is cached when the piece is short."""
        if self.mode == "byte":
            data = to_utf8(piece)
            whole = self._token_ids.get(data) if self.ignore_merges else None
            if whole is not None:
                ids = (whole,)
            else:
                symbols = list(data) if self._identity_bytes else list(map(self._byte_ids.__getitem__, data))
                ids = tuple(self._merge(symbols))
        else:
            ids = tuple(self._merge(self._classic_symbols(piece)))
        if self.cache_size > 0 and len(piece) <= MAX_CACHED_CHARS:
            if len(self._cache) >= self.cache_size:
                self._evict()
            self._cache[piece] = ids
        return ids

    def _evict(self) -> None:
        """Drop the older half of the cache (dicts keep insertion order): amortised O(1) per insert."""
        for key in list(islice(self._cache, (len(self._cache) + 1) // 2)):
            del self._cache[key]

    def _classic_symbols(self, word: str) -> list[int]:
        """A word's characters as symbol ids, then the end-of-word symbol."""
        get = self._token_ids.get
        symbols = []
        for ch in word:
            i = get(ch.encode("utf-8", "surrogatepass"))
            if i is None:
                raise ValueError(f"character {ch!r} (U+{ord(ch):04X}) is not in the classic vocabulary")
            symbols.append(i)
        symbols.append(self._eow_id)
        return symbols

    def _merge(self, ids: list[int]) -> list[int]:
        """Apply merges to one pre-token's symbol ids: lowest rank first, leftmost on ties. Compiled
        (`bpe_ops._piece_merge`) when built; `_merge_python` is its specification."""
        if self._merger is not None:
            return self._merger.merge(ids)
        return self._merge_python(ids)

    def _merge_python(self, ids: list[int]) -> list[int]:
        """`_merge` in Python: apply merges to one pre-token's symbol ids, lowest rank first, leftmost
        on ties.

        Short pieces keep the rank of every adjacent pair in a list and update only the two pairs
        next to each merge; min/index then run in C. The quadratic worst case is also the exact
        fallback for a merge list that `_merge_long` cannot take (see `_ranks_ascend`).
        """
        if len(ids) > SHORT_PIECE and self._ranks_ascend:
            return self._merge_long(ids)
        get, merged, none = self._ranks.get, self._merged, NO_MERGE
        ranks = list(map(get, zip(ids, ids[1:]), repeat(none)))
        while ranks:
            rank = min(ranks)
            if rank == none:
                break
            i = ranks.index(rank)
            new_id = ids[i] = merged[rank]
            del ids[i + 1]
            if i + 1 < len(ids):
                ranks[i] = get((new_id, ids[i + 1]), none)
                del ranks[i + 1]
            else:
                del ranks[i]
            if i:
                ranks[i - 1] = get((ids[i - 1], new_id), none)
        return ids

    def _merge_long(self, ids: list[int]) -> list[int]:
        """The same replay for long pieces, near-linear: one bucket of positions per merge rank.

        When every merge ranks after the merges that make its two parts (true of any trained merge
        list), a merge at rank r only creates pairs of higher rank. So the ranks can be taken in
        increasing order, each once: pop the lowest rank that has a bucket, apply it at its
        positions left to right (skipping stale ones), and file the pairs it creates under their
        ranks. The symbols form a linked list over the original positions, so position order is
        text order and a merge is O(1).
        """
        get, merged, pairs = self._ranks.get, self._merged, self._pairs
        n = len(ids)
        # Initial buckets without a Python loop over positions: sort the positions by their pair's
        # rank (stable, so each bucket comes out in text order) and cut at each distinct rank.
        ranks = list(map(get, zip(ids, ids[1:]), repeat(NO_MERGE)))
        by_rank = sorted(range(n - 1), key=ranks.__getitem__)
        ranks = list(map(ranks.__getitem__, by_rank))
        order = sorted(set(ranks))
        if order[-1] == NO_MERGE:
            order.pop()
        buckets = {r: by_rank[bisect_left(ranks, r):bisect_right(ranks, r)] for r in order}
        ids.append(OUTSIDE)           # ids[n] (after the end) and ids[-1] (before the start)
        nxt = list(range(1, n + 2))
        prv = list(range(-1, n))
        while order:
            rank = heappop(order)
            positions = buckets.pop(rank)
            positions.sort()          # filed by several earlier ranks, so not necessarily in order
            a, b = pairs[rank]
            new_id = merged[rank]
            for i in positions:
                if ids[i] != a:
                    continue
                j = nxt[i]
                if ids[j] != b:
                    continue
                ids[i] = new_id
                ids[j] = DEAD
                k = nxt[i] = nxt[j]
                prv[k] = i
                # File the two pairs the merge created: (new, right) at i, (left, new) at p.
                r = get((new_id, ids[k]))
                if r is not None:
                    bucket = buckets.get(r)
                    if bucket is None:
                        buckets[r] = [i]
                        heappush(order, r)
                    else:
                        bucket.append(i)
                p = prv[i]
                r = get((ids[p], new_id))
                if r is not None:
                    bucket = buckets.get(r)
                    if bucket is None:
                        buckets[r] = [p]
                        heappush(order, r)
                    else:
                        bucket.append(p)
        del ids[n]
        return list(filter(DEAD.__ne__, ids))

    # ---- decoding -----------------------------------------------------------------------------

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The concatenated bytes of the tokens (in classic mode, including the `</w>` markers)."""
        vocab = self.vocab
        try:
            return b"".join([vocab[i] for i in ids])
        except KeyError as exc:
            raise ValueError(f"unknown token id {exc.args[0]!r} (vocab size {self.vocab_size})") from None

    def decode(self, ids: Iterable[int]) -> str:
        """Text of the ids; invalid UTF-8 (a token sequence cut mid-character) becomes U+FFFD.

        Classic mode turns each end-of-word marker into a space and drops the final one."""
        ids = list(ids)
        text = self.decode_bytes(ids).decode("utf-8", errors="replace")
        if self.mode == "byte":
            return text
        text = text.replace(END_OF_WORD, " ")
        if ids and self.vocab[ids[-1]].endswith(END_OF_WORD.encode()):
            text = text[:-1]
        return text

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token."""
        try:
            return self.vocab[token_id]
        except KeyError:
            raise ValueError(f"unknown token id {token_id!r} (vocab size {self.vocab_size})") from None

    # ---- files --------------------------------------------------------------------------------

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the canonical tokenizer.json text (`save` writes exactly this text)."""
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self._json_text().encode("utf-8")).hexdigest()
        return self._sha256

    def _json_text(self) -> str:
        """The canonical tokenizer.json text, built once (about 1 s for a 50k vocabulary): `sha256`
        and `save` both need it, and the train pipeline asks for both."""
        if self._json is None:
            self._json = formats.tokenizer_json_text(self)  # refuses classic mode
        return self._json

    def save(self, directory: str | os.PathLike) -> str:
        """Write `tokenizer.json` and `tokenizer.tiktoken` into `directory`; return the json path."""
        text = self._json_text()  # refuses classic mode before anything is written
        os.makedirs(directory, exist_ok=True)
        json_path = os.path.join(directory, "tokenizer.json")
        with open(json_path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        with open(os.path.join(directory, "tokenizer.tiktoken"), "w", encoding="ascii", newline="\n") as f:
            f.write(formats.tiktoken_text(self))
        return json_path

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, implementation: Implementation = DEFAULT) -> "Tokenizer":
        """Load a tokenizer.json (ours, or a byte-level BPE written by Hugging Face `tokenizers`);
        `path` may be the file or a directory holding one."""
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        return _named(path, cls, {**formats.read_tokenizer_json(path), "implementation": implementation})

    @classmethod
    def from_gpt2_files(cls, vocab_json: str | os.PathLike, merges_txt: str | os.PathLike,
                        pattern: str = "gpt2", *, implementation: Implementation = DEFAULT) -> "Tokenizer":
        """Load GPT-2's `vocab.json` + `merges.txt` layout."""
        return _named(merges_txt, cls, {**formats.read_gpt2_files(vocab_json, merges_txt), "pattern": pattern,
                                        "implementation": implementation})

    def __repr__(self) -> str:
        return (f"Tokenizer(mode={self.mode!r}, pattern={self.pattern_name or self.pattern!r}, "
                f"merges={len(self.merges)}, special_tokens={len(self.special_tokens)}, "
                f"vocab_size={self.vocab_size})")


def _named(path, cls, kwargs: dict) -> "Tokenizer":
    """Build a tokenizer from a file's contents; an inconsistency names the file."""
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _piece_merger(pairs: list[tuple[int, int]], merged: list[int], token_ids: Iterable[int]):
    """The compiled merger of this merge table, or None: not built, or a token id outside
    0..2**31 - 1 (the C merger packs two ids in 64 bits; Python takes any int)."""
    if _piece_merge is None:
        return None
    if not (0 <= min(token_ids, default=0) and max(token_ids, default=0) < 2**31):
        return None
    return _piece_merge.PieceMerger([a for a, _ in pairs], [b for _, b in pairs], merged)


def _ranks_ascend(ranks: dict[tuple[int, int], int], merged: list[int]) -> bool:
    """Whether every merge ranks after every merge that makes one of its two parts."""
    last_maker: dict[int, int] = {}
    for rank in sorted(ranks.values()):   # a repeated pair's later copies never apply
        last_maker[merged[rank]] = rank
    return all(last_maker.get(a, -1) < rank and last_maker.get(b, -1) < rank for (a, b), rank in ranks.items())


def _invert(tokens: dict[int, bytes]) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for i, t in tokens.items():
        if t in out:
            raise ValueError(f"the vocab holds {t!r} twice (ids {out[t]} and {i})")
        out[t] = i
    return out
