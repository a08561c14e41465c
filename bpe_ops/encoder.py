"""Tokenizer: encode text to ids by replaying BPE merges, decode ids back to text.

Encoding is the standard BPE replay: split the text on the special tokens the caller allows, split
each remaining segment into pre-tokens with the tokenizer's regex, then inside every pre-token
repeatedly merge the adjacent pair with the lowest merge rank (leftmost first on ties) until no
adjacent pair is a merge (bpe_ops/merging.py; bpe_ops/_educational.py is the textbook version the
tests compare against). Merges are keyed on token ids: `(id_a, id_b) -> rank`, `rank -> new_id`.

Real text repeats its pre-tokens, so a bounded cache from pre-token string to ids makes the hot path
a regex split plus dictionary lookups. Cache misses pay for the merge, so it runs compiled
(`bpe_ops/_piece_merge.c`, built by setup.py) where the extension is built, unless the tokenizer's
`implementation` says `compiled=False`; `merging.merge_python` is its specification, and the tests
require the two to give identical ids.

Where the split runs on PCRE2 (see `pretokenize.Pcre2Pattern`), the whole of `_encode_ordinary`
runs compiled too (`bpe_ops/_pcre2.c`'s `TextEncoder`: split, a byte-keyed cache, the same merge
replay) for every text PCRE2 may split; the Python path below is its specification.

Loading from files is bpe_ops/load.py; this class holds the options, the mode dispatch, encoding,
decoding, saving and pickling.
"""
from __future__ import annotations

import hashlib
import os
import threading
from array import array
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import chain, compress, repeat
from operator import is_
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from . import formats, hf_components, hf_decoders, load, sequence_split, table_cache
from .dropout import DROPOUT_MODES, MASK, DropoutStream, check_dropout
from .sentencepiece_bpe import compiled_encoder as compiled_piece_encoder
from .implementation import DEFAULT, Implementation
from .load import _collector_paused
from .merging import (build_merge_table, byte_pairs, classic_symbols, first_ranks, invert, merge_dropout_python,
                      merge_python, piece_merger, ranks_ascend)
from .pretokenize import (END_OF_WORD, Pcre2Pattern, compile_pattern, pattern_name, resolve_pattern,
                          split_on_special, to_utf8)
from .sentencepiece_bpe import UNCUT_CHARS, PieceModel, byte_of_piece

try:
    from ._pcre2 import Fallback as _Fallback, TextEncoder as _TextEncoder   # optional: PCRE2 and C
except ImportError:
    _Fallback = _TextEncoder = None

MODES = ("byte", "classic", "piece")
# Pre-tokens longer than this are not cached: they rarely repeat and would pin memory.
MAX_CACHED_CHARS = 256
# Texts per task when encode_arrays shares a batch between threads.
THREAD_CHUNK = 16
_UNBUILT = object()              # Tokenizer._text_encoder_slot before its first use
# Held while a member built on first use is built: threads that ask for it at once build it once.
# One for all tokenizers (no lock to leave out of pickles); builds are rare. Reentrant: a build may
# ask for another member.
_BUILDING = threading.RLock()
_POOLS = threading.Lock()        # held while encode_arrays picks its pool and hands it a batch
T = TypeVar("T")


class Tokenizer:
    """A byte-level (or classic, whitespace/character) BPE tokenizer.

    Byte mode without `vocab`: ids 0..255 are the bytes, merge *i* creates id 256 + *i*, special
    tokens follow the last merge. With `vocab` (files written by others) any id assignment works, as
    long as all 256 single bytes are tokens. A merge whose concatenation is already a token reuses
    that token's id (as Hugging Face's trainer does), so merges may outnumber the new ids.

    Classic mode is the textbook algorithm: whitespace-separated words, characters as symbols and a
    separate end-of-word symbol `</w>` after each word; it needs `vocab` (its alphabet is not implied
    by the merges), and an unknown character is an error.

    Piece mode is SentencePiece-style BPE (bpe_ops/sentencepiece_bpe.py): `vocab` holds pieces (their
    UTF-8), characters are the first symbols, with `byte_fallback` to `<0xNN>` pieces and/or
    `unk_token` (`fuse_unk`); the file's pre-tokenizer (Metaspace...) splits and its `decoder`
    decodes. Ids are Hugging Face `tokenizers`' ids for the file.

    `implementation` chooses the compiled twins or the Python code, and the regex engine (see
    bpe_ops/implementation.py); the ids are the same whichever it is.

    >>> tok = Tokenizer([(b"a", b"b"), (b"ab", b"c")], special_tokens=["<|end|>"])
    >>> tok.encode("abcab<|end|>", allowed_special="all")
    [257, 256, 258]
    >>> tok.decode([257, 256, 258])
    'abcab<|end|>'
    """

    def __init__(self, merges: list[tuple[bytes, bytes]], pattern: str = "gpt4",
                 special_tokens: Sequence[str] | Mapping[str, int] = (), *,
                 vocab: dict[int, bytes] | None = None, mode: str = "byte",
                 ignore_merges: bool = False, cache_size: int = 100_000,
                 normalizer: dict | None = None, pre_tokenizer: dict | None = None,
                 added_tokens: list[dict] | None = None, implementation: Implementation = DEFAULT,
                 decoder: dict | None = None, byte_fallback: bool = False, unk_token: str | None = None,
                 fuse_unk: bool = False):
        _check_mode_options(mode, pattern, vocab, bool(normalizer or pre_tokenizer or added_tokens),
                            bool(decoder or byte_fallback or unk_token or fuse_unk))
        self._merges = byte_pairs(merges)
        tokens = dict(vocab) if vocab is not None else {b: bytes([b]) for b in range(256)}
        self._token_ids = invert(tokens)
        self._tokens = tokens
        self.decoder_spec = _sorted_keys(decoder) if decoder else None
        self.unk_token = unk_token
        self._piece_model = (_piece_model_of(tokens, self._merges, unk_token, byte_fallback, fuse_unk)
                             if mode == "piece" else None)
        self._set_options(mode, pattern, ignore_merges, cache_size, implementation, normalizer, pre_tokenizer,
                          added_tokens)
        ranks, self._left, self._right, self._merged = build_merge_table(self._merges, tokens, self._token_ids,
                                                                         extend=vocab is None)
        self._ranks_table = ranks
        self._ranks_ascend = ranks_ascend(ranks, self._left, self._right, self._merged)
        if mode == "byte":
            self._checked_byte_ids()
        elif mode == "classic" and END_OF_WORD.encode() not in self._token_ids:
            raise ValueError(f"a classic vocab must hold the end-of-word symbol {END_OF_WORD!r}")
        made = set(self._merged)
        self.special_tokens = self._assign_special_ids(special_tokens, made)
        # A special token listed in the vocab (as trainers and GPT-2's vocab.json do) is not an
        # ordinary token, unless the merges or the alphabet produce it.
        for i in self.special_tokens.values():
            if i in tokens and i not in made and not self._is_base(tokens[i]):
                del self._token_ids[tokens.pop(i)]
        self._finish()

    def _set_options(self, mode: str, pattern: str, ignore_merges: bool, cache_size: int,
                     implementation: Implementation, normalizer: dict | None = None,
                     pre_tokenizer: dict | None = None, added_tokens: list[dict] | None = None) -> None:
        # A Hugging Face normalizer (any text -> text) and pre-tokenizer chain (text -> pieces, in
        # place of the one `pattern` split), as the JSON components of a tokenizer.json; see
        # bpe_ops/hf_components.py. Kept with sorted keys: they are part of the canonical file.
        self.normalizer_spec = _sorted_keys(normalizer) if normalizer else None
        self.pre_tokenizer_spec = _sorted_keys(pre_tokenizer) if pre_tokenizer else None
        self.mode = mode
        self._build_components()
        # HF's added tokens where their flags matter (a token that is not special, lstrip, rstrip,
        # single_word, normalized): found as HF finds them; their ids are in `special_tokens` too.
        self.added_tokens_spec = (sorted(map(_sorted_keys, added_tokens), key=lambda e: e["id"])
                                  if added_tokens else None)
        self._added = (hf_components.AddedVocabulary(self.added_tokens_spec, self._normalize)
                       if added_tokens else None)
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
        self._segment_cache: dict[str, tuple[int, ...]] = {}   # piece mode: cut pre-tokens (see _encode_word)
        self._sha256: str | None = None
        self._json: str | None = None
        self._tables: table_cache.Tables | None = None   # what it was loaded from, if a file
        self.source_sha256: str | None = None

    def _build_components(self) -> None:
        """The functions of the JSON components (closures: rebuilt after unpickling)."""
        self._normalize = hf_components.normalizer(self.normalizer_spec)
        self._start_kept = hf_components.start_kept(self.normalizer_spec)
        if self.pre_tokenizer_spec:
            self._pre_tokenize = hf_components.pre_tokenizer(self.pre_tokenizer_spec)
        elif self.mode == "piece":      # no pre-tokenizer: the whole text is one word
            self._pre_tokenize = lambda text, at_start=True: [text] if text else []
        else:
            self._pre_tokenize = None
        self._decode_pieces = hf_decoders.decoder(self.decoder_spec) if self.mode == "piece" else None

    def _finish(self) -> None:
        """The state that follows from the tables: byte ids, the whole vocab, the compiled twins."""
        tokens = self._tokens
        if self.mode == "byte":
            self._byte_ids = self._checked_byte_ids()
            self._identity_bytes = self._byte_ids == list(range(256))
        elif self.mode == "classic":
            self._eow_id = self._token_ids[END_OF_WORD.encode()]
        self.vocab = {**tokens, **{i: s.encode("utf-8") for s, i in self.special_tokens.items()}}
        self.vocab_size = max(self.vocab) + 1
        self._merger = (piece_merger(self._left, self._right, self._merged, tokens)
                        if self.implementation.compiled else None)
        self._text_encoder_slot = _UNBUILT
        self._pool: ThreadPoolExecutor | None = None     # encode_arrays' threads, made on first use
        self._pool_threads = 0
        self._thread_encoders = threading.local()         # ... and their own compiled encoders

    def _checked_byte_ids(self) -> list[int]:
        """The id of each byte 0..255; ValueError naming the missing ones."""
        byte_ids = list(map(self._token_ids.get, map(bytes, zip(range(256)))))
        if None in byte_ids:
            missing = [b for b in range(256) if byte_ids[b] is None]
            raise ValueError(f"a byte-level vocab must hold all 256 single bytes; missing: "
                             f"{', '.join(f'0x{b:02x}' for b in missing)}")
        return byte_ids

    @classmethod
    def _from_tables(cls, tables: table_cache.Tables, implementation: Implementation = DEFAULT,
                     cache_size: int = 100_000) -> Tokenizer:
        """The tokenizer `tables` describe (see `load.tokenizer_of_tables`)."""
        return load.tokenizer_of_tables(cls, tables, implementation, cache_size)

    def _as_tables(self) -> table_cache.Tables:
        """This byte-level or piece-mode tokenizer's tables (see `load.tables_of`)."""
        return load.tables_of(self)

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The merges in rank order, as (left bytes, right bytes)."""
        merges = self._merges
        if merges is None:
            get = self._tokens.__getitem__
            merges = self._build_once("_merges", None, lambda: list(zip(map(get, self._left), map(get, self._right))))
        return merges

    @property
    def _ranks(self) -> dict[tuple[int, int], int]:
        """`(id_a, id_b) -> rank`; a repeated pair keeps its first (lowest) rank."""
        ranks = self._ranks_table
        if ranks is None:
            ranks = self._build_once("_ranks_table", None, lambda: first_ranks(self._left, self._right))
        return ranks

    @property
    def _pairs(self) -> list[tuple[int, int]]:
        """`rank -> (id_a, id_b)`."""
        return list(zip(self._left, self._right))

    @property
    def _text_encoder(self):
        """The compiled whole-text encoder (see `_compiled_text_encoder`), built on first use: its
        tables cost 50 ms at 131k ids, which a launcher that only reads the file, or a worker's
        thread that never encodes, need not pay."""
        encoder = self._text_encoder_slot
        if encoder is _UNBUILT:
            encoder = self._build_once("_text_encoder_slot", _UNBUILT, self._compiled_text_encoder)
        return encoder

    @_text_encoder.setter
    def _text_encoder(self, encoder) -> None:
        self._text_encoder_slot = encoder

    def _build_once(self, name: str, unbuilt: object, build: Callable[[], T]) -> T:
        """Attribute `name`, set to `build()` if it is still `unbuilt`: under `_BUILDING`, so that
        threads asking at once build it once (the others wait, then take that one)."""
        with _BUILDING:
            value = getattr(self, name)
            if value is unbuilt:
                value = build()
                setattr(self, name, value)
        return value

    def _compiled_text_encoder(self):
        """The compiled whole-text encoder (`bpe_ops._pcre2.TextEncoder`) of this tokenizer, or None:
        classic mode, the split not on PCRE2, no compiled merger (see `merging.piece_merger`). Piece mode's
        is `sentencepiece_bpe.compiled_encoder` (bpe_ops/_spm.c), which takes pre-tokens."""
        if self.mode == "piece" and self._merger is not None:
            return compiled_piece_encoder(self._piece_model, self._left, self._right, self._merged,
                                          ignore_merges=self.ignore_merges, cache_size=self.cache_size)
        if self.mode != "byte" or self._merger is None or not isinstance(self._regex, Pcre2Pattern):
            return None
        # A pre-tokenizer chain runs compiled where it is all Splits PCRE2 may run (`sequence_split`).
        steps = (sequence_split.encoder_steps(self.pre_tokenizer_spec, self._regex.cache_dir)
                 if self._pre_tokenize is not None else {})
        if steps is None:
            return None
        return _TextEncoder(self._regex.compiled, self._left, self._right,
                            self._merged, self._byte_ids, self._token_ids if self.ignore_merges else None,
                            self.cache_size, **steps)

    def __getstate__(self):
        # The compiled encoder holds buffers, not a recipe, and threads do not pickle: pickled
        # without them, rebuilt on load.
        # The components are closures: rebuilt from their specs.
        return {**self.__dict__, "_text_encoder_slot": None, "_pool": None, "_pool_threads": 0, "_thread_encoders": None,
                "_normalize": None, "_pre_tokenize": None, "_added": None, "_decode_pieces": None,
                "_start_kept": None}

    def __setstate__(self, state):
        # Pickles made before they had an implementation or components.
        self.__dict__.update({"implementation": DEFAULT, "normalizer_spec": None, "pre_tokenizer_spec": None,
                              "added_tokens_spec": None, "decoder_spec": None, "unk_token": None, "_piece_model": None,
                              "_segment_cache": {}, **state})
        self._build_components()
        self._added = (hf_components.AddedVocabulary(self.added_tokens_spec, self._normalize)
                       if self.added_tokens_spec else None)
        self._text_encoder_slot = _UNBUILT
        self._thread_encoders = threading.local()

    def _is_base(self, token: bytes) -> bool:
        """A symbol of the alphabet: a single byte, in classic mode a character or `</w>`, in piece
        mode a character or a byte piece."""
        if self.mode == "byte":
            return len(token) == 1
        if self.mode == "piece":
            piece = token.decode("utf-8", "surrogatepass")
            return len(piece) == 1 or byte_of_piece(piece) is not None
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

    def encode(self, text: str, allowed_special: Iterable[str] | str = (), *, dropout: float | None = None,
               seed: int | None = None, record_id: str | int = "") -> list[int]:
        """Token ids of `text`. Special-token strings are plain text unless listed in `allowed_special`
        (`"all"` allows every special token), so data can never inject a control token.

        `dropout=p` is BPE-dropout (for training data): each merge is skipped with probability p
        (see `_merge_dropout`), drawn from the stream of (`seed`, `record_id`) (bpe_ops/dropout.py),
        so the same seed and record id give the same ids; `seed=None` draws fresh randomness.
        p = 0 is the deterministic encoding, p = 1 gives the bytes; decode gives `text` back.

        >>> tok = Tokenizer([(b"a", b"b"), (b"ab", b"c")])
        >>> tok.encode("abc"), tok.encode("abc", dropout=1.0, seed=0), tok.encode("abc", dropout=0.0, seed=0)
        ([257], [97, 98, 99], [257])
        """
        if dropout is not None or seed is not None:
            stream = self._dropout_stream(dropout, seed, record_id)
            if stream is not None:
                return self._encode_with(text, allowed_special, partial(self._encode_dropout, stream=stream))
        return self._encode_with(text, allowed_special, self._encode_normalized)

    def _dropout_stream(self, dropout: float | None, seed: int | None, record_id: str | int):
        """The record's `DropoutStream`, or None for p = 0 (the deterministic encoding)."""
        if dropout is None:
            raise ValueError("seed is the seed of BPE-dropout: pass dropout=p with it")
        if self.mode not in DROPOUT_MODES:
            raise ValueError(f"BPE-dropout supports byte-level and classic BPE, not {self.mode} mode")
        p = check_dropout(dropout)
        return DropoutStream(p, seed, record_id) if p else None

    def _encode_with(self, text: str, allowed_special, encode_normalized) -> list[int]:
        """`encode`, each stretch of normalized text between special tokens encoded by
        `encode_normalized(text, at_start)` (`at_start`: the stretch begins the record, see
        `hf_components.pre_tokenizer`)."""
        if self._added is not None:
            allowed = frozenset(self._allowed(allowed_special)) if allowed_special else frozenset()
            if self._added.active(allowed):
                out: list[int] = []
                for k, (segment, token) in enumerate(self._added.split(text, allowed)):
                    if token is not None:
                        out.append(token)
                    else:
                        out.extend(encode_normalized(segment, k == 0 and self._kept_start(text)))
                return out
        normalize = self._normalize or str
        if not allowed_special:
            return encode_normalized(normalize(text), self._kept_start(text))
        allowed = self._allowed(allowed_special)
        out: list[int] = []
        for k, (segment, is_special) in enumerate(split_on_special(text, allowed)):
            if is_special:
                out.append(self.special_tokens[segment])
            else:
                out.extend(encode_normalized(normalize(segment), k == 0 and self._kept_start(segment)))
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
        chunks = [texts[i:i + THREAD_CHUNK] for i in range(0, len(texts), THREAD_CHUNK)]
        # Every chunk is handed over before another caller may replace (and shut down) the pool.
        with _POOLS:
            encoded = self._pool_of(num_threads).map(self.encode_arrays_in_thread, chunks)
        return list(chain.from_iterable(encoded))

    def _pool_of(self, num_threads: int) -> ThreadPoolExecutor:
        """encode_arrays' pool (`_POOLS` held): made on first use, and again when another number of
        threads is asked for; the pool it replaces is shut down, its threads ending once the work
        already handed to them is done."""
        if self._pool_threads != num_threads:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._pool = ThreadPoolExecutor(num_threads, thread_name_prefix="tokenbeam-encode")
            self._pool_threads = num_threads
        return self._pool

    def encode_arrays_in_thread(self, texts: Sequence[str]) -> list[array]:
        """`encode_arrays(texts)` with the calling thread's own compiled encoder (a `fork()` of the
        shared one, made on first use: the merge tables are built once, each thread has its own
        cache): several threads may call it at once and encode side by side, where `encode_arrays`
        from two threads would find the one shared encoder busy and take the slow path."""
        encoder = getattr(self._thread_encoders, "encoder", None)
        if encoder is None and (shared := self._text_encoder) is not None:
            encoder = self._thread_encoders.encoder = shared.fork()
        return [self._encode_array_with(encoder, text) for text in texts]

    def _encode_array_with(self, encoder, text: str, allowed_special: Iterable[str] | str = ()) -> array:
        out = array("I")
        if not allowed_special and encoder is not None and (self._added is None or not self._added.always):
            if self.mode == "piece":        # pre-tokens in, native ids out (bpe_ops/_spm.c)
                out.frombytes(encoder.encode_words_bytes(self._pre_tokenize(
                    self._normalize(text) if self._normalize else text, self._kept_start(text))))
                return out
            if self._normalize is not None:
                text = self._normalize(text)
            if self._regex.pcre2_splits(text):
                try:
                    out.frombytes(encoder.encode_bytes(text))
                    return out
                except _Fallback:
                    pass
            out.extend(self._encode_normalized(text))
            return out
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
        """Ids of text with no special tokens: normalize (if the file says so), split, look every
        piece up in the cache, merge misses."""
        if self._normalize is None:
            return self._encode_normalized(text)
        return self._encode_normalized(self._normalize(text), self._kept_start(text))

    def _kept_start(self, text: str) -> bool:
        """Whether `text` still starts at its first character once normalized (see
        `hf_components.start_kept`)."""
        return self._start_kept is None or self._start_kept(text)

    def _encode_normalized(self, text: str, at_start: bool = True) -> list[int]:
        """`_encode_ordinary` of normalized text. The compiled encoder takes every text PCRE2 may
        split. Otherwise every step over all pieces runs in C (map, set, chain); Python code runs
        once per distinct missing piece only."""
        if self.mode == "piece" and self._text_encoder is not None:
            return self._text_encoder.encode_words(self._pre_tokenize(text, at_start))
        if self._text_encoder is not None and self._regex.pcre2_splits(text):
            try:
                return self._text_encoder.encode(text)
            except _Fallback:           # a text only `regex` may split: below
                pass
        pieces = self._pre_tokenize(text, at_start) if self._pre_tokenize is not None else self._split(text)
        cache = self._cache
        hits = list(map(cache.get, pieces))
        if None in hits:
            # The misses are the pieces this lookup missed, not the pieces the cache lacks now:
            # another thread may have cached one since, and it would be in neither.
            missed = set(compress(pieces, map(is_, hits, repeat(None))))
            fresh = {piece: self._encode_piece(piece) for piece in missed}
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

    def _encode_dropout(self, text: str, at_start: bool = True, *, stream: DropoutStream) -> list[int]:
        """`_encode_normalized` with BPE-dropout: every piece merged by `_merge_dropout`, in text
        order (the order the stream's draws are taken in). No cache (a piece's ids vary), and no
        whole-piece lookup under `ignore_merges` (as Hugging Face's BPE with dropout)."""
        pieces = self._pre_tokenize(text, at_start) if self._pre_tokenize is not None else self._split(text)
        if self.mode == "byte" and self._merger is not None:      # every piece in one compiled call
            out, stream.state = self._merger.merge_dropout_pieces(
                list(map(to_utf8, pieces)), self._byte_ids, stream.state, min(stream.limit, MASK), stream.limit > MASK)
            return out
        out: list[int] = []
        for piece in pieces:
            if self.mode == "byte":
                data = to_utf8(piece)
                symbols = list(data) if self._identity_bytes else list(map(self._byte_ids.__getitem__, data))
            else:
                symbols = classic_symbols(piece, self._token_ids, self._eow_id)
            out += self._merge_dropout(symbols, stream)
        return out

    def _merge_dropout(self, ids: list[int], stream: DropoutStream) -> list[int]:
        """BPE-dropout's replay of one pre-token (see `merging.merge_dropout_python`, its specification),
        compiled where `_merge` is; the stream goes on from where the compiled replay left it."""
        if self._merger is not None:
            ids, stream.state = self._merger.merge_dropout(ids, stream.state, min(stream.limit, MASK),
                                                           stream.limit > MASK)
            return ids
        return merge_dropout_python(ids, self._ranks, self._merged, stream)

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        """Ids of one pre-token (a cache miss); the result is cached when the piece is short."""
        if self.mode == "piece":
            ids = self._encode_word(piece)
        elif self.mode == "byte":
            data = to_utf8(piece)
            whole = self._token_ids.get(data) if self.ignore_merges else None
            if whole is not None:
                ids = (whole,)
            else:
                symbols = list(data) if self._identity_bytes else list(map(self._byte_ids.__getitem__, data))
                ids = tuple(self._merge(symbols))
        else:
            ids = tuple(self._merge(classic_symbols(piece, self._token_ids, self._eow_id)))
        if self.cache_size > 0 and len(piece) <= MAX_CACHED_CHARS:
            if len(self._cache) >= self.cache_size:
                self._evict()
            self._cache[piece] = ids
        return ids

    def _encode_word(self, word: str) -> tuple[int, ...]:
        """Piece mode: a whole word that is a piece, with `ignore_merges`; else its segments
        (`PieceModel.segments`: cut where no merge joins), each merged from its first symbols and
        cached apart (a segment is not a whole word for `ignore_merges`)."""
        model = self._piece_model
        if self.ignore_merges:
            whole = model.piece_ids.get(word)
            if whole is not None:
                return (whole,)
        if len(word) <= UNCUT_CHARS:
            return tuple(self._merge(model.symbols(word)))
        cache, out = self._segment_cache, []
        for segment in model.segments(word):
            ids = cache.get(segment)
            if ids is None:
                ids = tuple(self._merge(model.symbols(segment)))
                if self.cache_size > 0 and len(segment) <= MAX_CACHED_CHARS:
                    if len(cache) >= self.cache_size:
                        cache.clear()
                    cache[segment] = ids
            out.extend(ids)
        return tuple(out)

    def _evict(self) -> None:
        """Drop the older half of the cache (dicts keep insertion order): amortised O(1) per insert.
        Threads share the cache: its keys are copied in one call (an iterator made in one call and
        read in the next may meet the dict resized by another thread), and a key another thread
        evicted first is skipped."""
        cache = self._cache
        keys = list(cache)
        for key in keys[:(len(keys) + 1) // 2]:
            cache.pop(key, None)

    def _merge(self, ids: list[int]) -> list[int]:
        """Apply merges to one pre-token's symbol ids: lowest rank first, leftmost on ties. Compiled
        (`bpe_ops._piece_merge`) when built; `merging.merge_python` is its specification."""
        if self._merger is not None:
            return self._merger.merge(ids)
        return self._merge_python(ids)

    def _merge_python(self, ids: list[int]) -> list[int]:
        """`_merge` in Python (`merging.merge_python` over this tokenizer's tables): the compiled
        merger's specification."""
        return merge_python(ids, self._ranks, self._left, self._right, self._merged, self._ranks_ascend)

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
        if self.mode == "piece":
            vocab = self.vocab
            try:
                return self._decode_pieces([vocab[i].decode("utf-8", "surrogatepass") for i in ids])
            except KeyError as exc:
                raise ValueError(f"unknown token id {exc.args[0]!r} (vocab size {self.vocab_size})") from None
        text = self.decode_bytes(ids).decode("utf-8", errors="replace")
        if self.mode == "byte":
            return text
        text = text.replace(END_OF_WORD, " ")
        if ids and self.vocab[ids[-1]].endswith(END_OF_WORD.encode()):
            text = text[:-1]
        return text

    @property
    def raw_byte_ids(self) -> tuple[int, ...]:
        """The ids of the tokens that stand for one raw byte, sorted: the 256 single bytes of a
        byte-level vocabulary, the `<0xNN>` fallback pieces of a piece-mode one."""
        if self.mode == "piece":
            return tuple(sorted(i for p, i in self._piece_model.piece_ids.items() if byte_of_piece(p) is not None))
        from .stats import single_byte_ids     # numpy: only where statistics are wanted
        return single_byte_ids(self.vocab)

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
            with _collector_paused():
                self._sha256 = hashlib.sha256(self._json_text().encode("utf-8")).hexdigest()
            if self._tables is not None:        # shared with the next tokenizer of the same file
                self._tables.sha256 = self._sha256
        return self._sha256

    def _json_text(self) -> str:
        """The canonical tokenizer.json text, built once (about 1 s for a 50k vocabulary): `sha256`
        and `save` both need it, and the train pipeline asks for both."""
        if self._json is None:
            self._json = (formats.piece_tokenizer_json_text(self) if self.mode == "piece"
                          else formats.tokenizer_json_text(self))  # refuses classic mode
        return self._json

    def save(self, directory: str | os.PathLike) -> str:
        """Write `tokenizer.json` and `tokenizer.tiktoken` into `directory`; return the json path.

        No rank file when tiktoken cannot split the same way (a pre-tokenizer chain; see
        `formats.tiktoken_recipe`), and an older one there is removed: it would encode differently."""
        text = self._json_text()  # refuses classic mode before anything is written
        os.makedirs(directory, exist_ok=True)
        json_path = os.path.join(directory, "tokenizer.json")
        with open(json_path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        rank_path = os.path.join(directory, "tokenizer.tiktoken")
        if formats.tiktoken_recipe(self)["written"]:
            with open(rank_path, "w", encoding="ascii", newline="\n") as f:
                f.write(formats.tiktoken_text(self))
        elif os.path.exists(rank_path):
            os.remove(rank_path)
        return json_path

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, implementation: Implementation = DEFAULT) -> Tokenizer:
        """Load a tokenizer.json (ours, or a byte-level BPE written by Hugging Face `tokenizers`);
        `path` may be the file or a directory holding one.

        Its checked tables are kept by the SHA-256 of the file's bytes (`source_sha256`): in this
        process, and in `implementation.cache_dir` when set (see bpe_ops/table_cache.py), so that
        the next load of the same bytes skips the parse. `Tokenizer(**formats.read_tokenizer_json(path))`
        is what this returns in every case."""
        return load.from_file(cls, path, implementation)

    @classmethod
    def from_tiktoken(cls, path: str | os.PathLike, pattern: str, special_tokens: Mapping[str, int] | None = None,
                      *, implementation: Implementation = DEFAULT) -> Tokenizer:
        """Load a tiktoken rank file (`.tiktoken`, or a `tokenizer.model` in that format) with its split
        `pattern` (a name: `gpt2`, `gpt4`/`cl100k_base`, `o200k`/`o200k_base`, or a regex) and its
        special tokens `{token: id}`: the ids tiktoken's `Encoding(pat_str=..., mergeable_ranks=...,
        special_tokens=...)` gives. A whole pre-token that is a token is that token (tiktoken looks
        pieces up before merging: `ignore_merges`). Tables are cached as in `from_file`, keyed by the
        file's bytes, the pattern and the special tokens."""
        return load.from_tiktoken(cls, path, pattern, special_tokens, implementation)

    @classmethod
    def from_gpt2_files(cls, vocab_json: str | os.PathLike, merges_txt: str | os.PathLike,
                        pattern: str = "gpt2", *, implementation: Implementation = DEFAULT) -> Tokenizer:
        """Load GPT-2's `vocab.json` + `merges.txt` layout."""
        return load.from_gpt2_files(cls, vocab_json, merges_txt, pattern, implementation)

    def __repr__(self) -> str:
        return (f"Tokenizer(mode={self.mode!r}, pattern={self.pattern_name or self.pattern!r}, "
                f"merges={len(self._left)}, special_tokens={len(self.special_tokens)}, "
                f"vocab_size={self.vocab_size})")


def _check_mode_options(mode: str, pattern: str, vocab: dict[int, bytes] | None, hf_components: bool,
                        piece_options: bool) -> None:
    """ValueError for options the mode does not take (`hf_components`: a normalizer, pre-tokenizer
    or added tokens; `piece_options`: a decoder, byte_fallback, unk_token or fuse_unk)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "classic" and resolve_pattern(pattern) not in (resolve_pattern("classic"), resolve_pattern("gpt4")):
        raise ValueError(f"classic mode always splits on whitespace; pattern {pattern!r} does not apply")
    if mode == "classic" and vocab is None:
        raise ValueError("classic mode needs a vocab: its alphabet is not implied by the merges")
    if mode == "classic" and hf_components:
        raise ValueError("classic mode takes no Hugging Face normalizer, pre-tokenizer or added tokens")
    if mode == "piece" and vocab is None:
        raise ValueError("piece mode needs a vocab of pieces")
    if mode != "piece" and piece_options:
        raise ValueError("decoder, byte_fallback, unk_token and fuse_unk are piece-mode options")


def _piece_model_of(tokens: dict[int, bytes], merges: list[tuple[bytes, bytes]], unk_token: str | None,
                    byte_fallback: bool, fuse_unk: bool) -> PieceModel:
    """Piece mode's model of the vocab (pieces are their UTF-8) and merges."""
    pieces = {t.decode("utf-8", "surrogatepass"): i for i, t in tokens.items()}
    if unk_token is not None and unk_token not in pieces:
        raise ValueError(f"unk_token {unk_token!r} is not in the vocab")
    as_text = [(a.decode("utf-8", "surrogatepass"), b.decode("utf-8", "surrogatepass")) for a, b in merges]
    return PieceModel(pieces, as_text, byte_fallback=byte_fallback, unk_id=pieces.get(unk_token), fuse_unk=fuse_unk)


def _sorted_keys(value: Any) -> Any:
    """A JSON value with every object's keys in sorted order.

    >>> _sorted_keys({"b": [{"d": 1, "c": 2}], "a": 0})
    {'a': 0, 'b': [{'c': 2, 'd': 1}]}
    """
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value
