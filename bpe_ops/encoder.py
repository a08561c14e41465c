"""Tokenizer: encode text to ids by replaying BPE merges, decode ids back to text.

Encoding is the standard BPE replay: split the text on the special tokens the caller allows, split
each remaining segment into pre-tokens with the tokenizer's regex, then inside every pre-token
repeatedly merge the adjacent pair with the lowest merge rank (leftmost first on ties) until no
adjacent pair is a merge (bpe_ops/merging.py; bpe_ops/_educational.py is the textbook version the
tests compare against). Merges are keyed on token ids: `(id_a, id_b) -> rank`, `rank -> new_id`.

Real text repeats its pre-tokens, so a bounded cache from pre-token string to ids
(bpe_ops/piece_cache.py) makes the hot path a regex split plus dictionary lookups. Cache misses pay
for the merge, so it runs compiled (`bpe_ops/_piece_merge.c`, built by setup.py) where the extension
is built, unless the tokenizer's `implementation` says `compiled=False`; `merging.merge_python` is
its specification, and the tests require the two to give identical ids.

Where the split runs on PCRE2 (see `pretokenize.Pcre2Pattern`), the whole of `_encode_ordinary`
runs compiled too (bpe_ops/text_encoder.py: split, a byte-keyed cache, the same merge replay) for
every text PCRE2 may split; the Python path below is its specification.

This class is the facade: the options and the mode dispatch. The rest is in modules of their own:
loading (load.py), the mode checks (modes.py), special tokens (specials.py), BPE-dropout
(dropout_encode.py), the threads of `encode_arrays` (threads.py), the files (saving.py).
"""
from __future__ import annotations

import os
from array import array
from functools import partial
from itertools import chain, compress, repeat
from operator import is_
from typing import Iterable, Mapping, Sequence

import numpy as np

from . import (dropout_encode, hf_components, hf_decoders, lazy, load, modes, saving, specials, table_cache,
               text_encoder)
from .dropout import DropoutStream
from .flat_ids import FlatIds
from .implementation import DEFAULT, Implementation
from .merging import (build_merge_table, byte_ids_of, byte_pairs, byte_symbols, classic_symbols, first_ranks,
                      invert, merge_dropout_python, merge_python, piece_merger, ranks_ascend)
from .piece_cache import PieceCache
from .pretokenize import (END_OF_WORD, Pcre2Pattern, compile_pattern, pattern_name, resolve_pattern, split_with_gaps,
                         to_utf8)
from .sentencepiece_bpe import byte_of_piece
from .text_encoder import Fallback as _Fallback      # None where bpe_ops._pcre2 is not built
from .threads import THREAD_CHUNK, EncoderThreads
from .utf8_texts import Utf8Texts

_UNBUILT = object()              # Tokenizer._text_encoder_slot before its first use


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
        modes.check_options(mode, pattern, vocab, hf_components=bool(normalizer or pre_tokenizer or added_tokens),
                            piece_options=bool(decoder or byte_fallback or unk_token or fuse_unk))
        self._merges = byte_pairs(merges)
        tokens = dict(vocab) if vocab is not None else {b: bytes([b]) for b in range(256)}
        self._token_ids = invert(tokens)
        self._tokens = tokens
        self.decoder_spec = modes.sorted_keys(decoder) if decoder else None
        self.unk_token = unk_token
        self._piece_model = (modes.piece_model_of(tokens, self._merges, unk_token, byte_fallback, fuse_unk)
                             if mode == "piece" else None)
        self._set_options(mode, pattern, ignore_merges, cache_size, implementation, normalizer, pre_tokenizer,
                          added_tokens)
        ranks, self._left, self._right, self._merged = build_merge_table(self._merges, tokens, self._token_ids,
                                                                         extend=vocab is None)
        self._ranks_table = ranks
        self._ranks_ascend = ranks_ascend(ranks, self._left, self._right, self._merged)
        if mode == "byte":
            byte_ids_of(self._token_ids)
        elif mode == "classic" and END_OF_WORD.encode() not in self._token_ids:
            raise ValueError(f"a classic vocab must hold the end-of-word symbol {END_OF_WORD!r}")
        made = set(self._merged)
        self.special_tokens = specials.assign_ids(special_tokens, tokens, self._token_ids, made, mode)
        # A special token listed in the vocab (as trainers and GPT-2's vocab.json do) is not an
        # ordinary token, unless the merges or the alphabet produce it.
        for i in self.special_tokens.values():
            if i in tokens and i not in made and not specials.is_base(mode, tokens[i]):
                del self._token_ids[tokens.pop(i)]
        self._finish()

    def _set_options(self, mode: str, pattern: str, ignore_merges: bool, cache_size: int,
                     implementation: Implementation, normalizer: dict | None = None,
                     pre_tokenizer: dict | None = None, added_tokens: list[dict] | None = None) -> None:
        # A Hugging Face normalizer (any text -> text) and pre-tokenizer chain (text -> pieces, in
        # place of the one `pattern` split), as the JSON components of a tokenizer.json; see
        # bpe_ops/hf_components.py. Kept with sorted keys: they are part of the canonical file.
        self.normalizer_spec = modes.sorted_keys(normalizer) if normalizer else None
        self.pre_tokenizer_spec = modes.sorted_keys(pre_tokenizer) if pre_tokenizer else None
        self.mode = mode
        self._build_components()
        # HF's added tokens where their flags matter (a token that is not special, lstrip, rstrip,
        # single_word, normalized): found as HF finds them; their ids are in `special_tokens` too.
        self.added_tokens_spec = (sorted(map(modes.sorted_keys, added_tokens), key=lambda e: e["id"])
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
        self._cache = PieceCache(cache_size)                        # pre-token -> ids
        self._segment_cache = PieceCache(cache_size, halve=False)   # piece mode: cut pre-tokens (PieceModel.word_ids)
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
        # One Metaspace that does not split: (replacement, prepend scheme); the compiled encoder then
        # takes the whole text (its encode_text) where its `space` is set (text_encoder.piece_text_space).
        self._metaspace = hf_components.metaspace_alone(self.pre_tokenizer_spec) if self.mode == "piece" else None
        self._decode_pieces = hf_decoders.decoder(self.decoder_spec) if self.mode == "piece" else None

    def _finish(self) -> None:
        """The state that follows from the tables: byte ids, the whole vocab, the compiled twins."""
        tokens = self._tokens
        if self.mode == "byte":
            self._byte_ids = byte_ids_of(self._token_ids)
            self._identity_bytes = self._byte_ids == list(range(256))
        elif self.mode == "classic":
            self._eow_id = self._token_ids[END_OF_WORD.encode()]
        self.vocab = {**tokens, **{i: s.encode("utf-8") for s, i in self.special_tokens.items()}}
        self.vocab_size = max(self.vocab) + 1
        self._raw_byte_ids: tuple[int, ...] | None = None       # `raw_byte_ids`, found on first use
        self._merger_slot = _UNBUILT
        self._text_encoder_slot = _UNBUILT
        self._threads = EncoderThreads()       # encode_arrays' pool and per-thread encoders

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The merges in rank order, as (left bytes, right bytes)."""
        merges = self._merges
        if merges is None:
            get = self._tokens.__getitem__
            merges = lazy.build_once(self, "_merges", None, lambda: list(zip(map(get, self._left), map(get, self._right))))
        return merges

    @property
    def _ranks(self) -> dict[tuple[int, int], int]:
        """`(id_a, id_b) -> rank`; a repeated pair keeps its first (lowest) rank."""
        ranks = self._ranks_table
        if ranks is None:
            ranks = lazy.build_once(self, "_ranks_table", None, lambda: first_ranks(self._left, self._right))
        return ranks

    @property
    def _pairs(self) -> list[tuple[int, int]]:
        """`rank -> (id_a, id_b)`."""
        return list(zip(self._left, self._right))

    @property
    def _merger(self):
        """The compiled merge replay (`merging.piece_merger`), or None (not compiled), built on first
        use: its table costs 70 ms at 128k ids, which a job whose whole-text encoder replays the
        merges itself pays only if a text takes the piece-by-piece path (and then on the thread
        that first needs it, as `text_encoder.build` does on a job's preparing thread)."""
        merger = self._merger_slot
        if merger is _UNBUILT:
            merger = lazy.build_once(self, "_merger_slot", _UNBUILT, lambda: piece_merger(
                self._left, self._right, self._merged, self._tokens) if self.implementation.compiled else None)
        return merger

    @_merger.setter
    def _merger(self, merger) -> None:
        self._merger_slot = merger

    @property
    def _text_encoder(self):
        """The compiled whole-text encoder (`text_encoder.build`), built on first use: its tables
        cost 50 ms at 131k ids, which a launcher that only reads the file, or a worker's thread that
        never encodes, need not pay."""
        encoder = self._text_encoder_slot
        if encoder is _UNBUILT:
            encoder = lazy.build_once(self, "_text_encoder_slot", _UNBUILT, lambda: text_encoder.build(self))
        return encoder

    @_text_encoder.setter
    def _text_encoder(self, encoder) -> None:
        self._text_encoder_slot = encoder

    def __getstate__(self):
        # The compiled encoder holds buffers, not a recipe, and threads do not pickle: pickled
        # without them, rebuilt on load. The components are closures: rebuilt from their specs.
        return {**self.__dict__, "_text_encoder_slot": None, "_merger_slot": None, "_threads": None, "_normalize": None,
                "_pre_tokenize": None, "_added": None, "_decode_pieces": None, "_start_kept": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._build_components()
        self._added = (hf_components.AddedVocabulary(self.added_tokens_spec, self._normalize)
                       if self.added_tokens_spec else None)
        self._text_encoder_slot = self._merger_slot = _UNBUILT
        self._threads = EncoderThreads()

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
        """The record's `DropoutStream`, or None for p = 0 (see `dropout_encode.stream_of`)."""
        return dropout_encode.stream_of(self.mode, dropout, seed, record_id)

    def _encode_with(self, text: str, allowed_special, encode_normalized) -> list[int]:
        """`encode`, each stretch of normalized text between special tokens encoded by
        `encode_normalized(text, at_start)` (see `specials.encode_with`; the plain text of most calls
        here, at the cost of one call fewer)."""
        if self._added is None and not allowed_special:
            return encode_normalized(self._normalize(text) if self._normalize else text, self._kept_start(text))
        return specials.encode_with(text, allowed_special, encode_normalized, special_tokens=self.special_tokens,
                                    added=self._added, normalize=self._normalize, kept_start=self._kept_start)

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
        drops the GIL while it works, so they run on as many cores (bpe_ops/threads.py)."""
        if num_threads <= 1 or self._text_encoder is None or len(texts) < 2 * THREAD_CHUNK:
            return [self._encode_array_with(self._text_encoder, text) for text in texts]
        return self._threads.map(num_threads, self.encode_arrays_in_thread, texts)

    def encode_arrays_in_thread(self, texts: Sequence[str]) -> list[array]:
        """`encode_arrays(texts)` with the calling thread's own compiled encoder (a `fork()` of the
        shared one, made on first use: the merge tables are built once, each thread has its own
        cache): several threads may call it at once and encode side by side, where `encode_arrays`
        from two threads would find the one shared encoder busy and take the slow path."""
        encoder = self._threads.thread_encoder(lambda: self._text_encoder)
        if encoder is not None and self._texts_in_one_call():
            return self._encode_arrays_together(encoder, texts)
        return [self._encode_array_with(encoder, text) for text in texts]

    def _texts_in_one_call(self) -> bool:
        """Whether the compiled encoder takes a list of texts as `_encode_array_with` takes each: one
        byte-level split on PCRE2 (whose guard the encoder holds), nothing before it (normalizer,
        pre-tokenizer chain, added tokens matched in every text)."""
        return (self.mode == "byte" and self._normalize is None and self._pre_tokenize is None
                and (self._added is None or not self._added.always) and isinstance(self._regex, Pcre2Pattern))

    def reads_utf8(self) -> bool:
        """Whether `encode_flat_measured_in_thread` reads `Utf8Texts` as they are, in one compiled call
        (else it makes a str of each text first): what a reader asks before it keeps texts as UTF-8."""
        return _Fallback is not None and self._texts_in_one_call()

    def encode_measured_in_thread(self, texts: Sequence[str], separators: bytes,
                                  wide: tuple[bytes, ...]) -> tuple[list[array], bytes | None]:
        """`encode_arrays_in_thread(texts)` and, where the texts are encoded in one compiled call,
        each text's measures taken in the same pass (`stats.measure_batch`'s `measured`: its UTF-8
        bytes, words and digit runs, by the word separators `separators` and `wide`), else None."""
        flat, measured = self.encode_flat_measured_in_thread(texts, separators, wide)
        return flat.arrays(), measured

    def prepare_threads(self, threads: int) -> None:
        """Build now, on the calling thread, the compiled encoders `threads` threads encoding with the
        `..._in_thread` methods take: the shared one and a fork for each other thread
        (`EncoderThreads.prepare`); nothing where there is no compiled encoder."""
        self._threads.prepare(lambda: self._text_encoder, threads)

    def encode_flat_measured_in_thread(self, texts: Sequence[str], separators: bytes,
                                       wide: tuple[bytes, ...]) -> tuple[FlatIds, bytes | None]:
        """`encode_measured_in_thread` with the ids as one `FlatIds` batch: where the texts are encoded
        in one compiled call, its ids and counts as they come (no array per text); `Utf8Texts` are
        read there as UTF-8, with no str made of any (`reads_utf8`)."""
        encoder = self._threads.thread_encoder(lambda: self._text_encoder)
        if encoder is None or not self._texts_in_one_call():
            return FlatIds.of(self.encode_arrays_in_thread(texts)), None
        if isinstance(texts, Utf8Texts):        # read as they are: no str made of any
            ids, counts, measured = encoder.encode_measure_utf8(texts.data, texts.offsets, separators, wide)
        else:
            ids, counts, measured = encoder.encode_measure_texts(list(texts), separators, wide)
        lengths = np.frombuffer(counts, dtype=np.int64)
        if len(lengths) and lengths.min() < 0:          # a text it handed back (-1): encoded alone
            return FlatIds.of(self._arrays_of(encoder, texts, ids, counts)), measured
        return FlatIds(np.frombuffer(ids, dtype=np.uint32), lengths), measured

    def _encode_arrays_together(self, encoder, texts: Sequence[str]) -> list[array]:
        """`_encode_array_with(encoder, text)` of each text, the texts encoded in one call that drops
        the GIL once (`encode_texts_bytes`); a text it hands back (a guarded character, a lone
        surrogate, a PCRE2 limit) is encoded alone, as `_encode_array_with` would."""
        return self._arrays_of(encoder, texts, *encoder.encode_texts_bytes(list(texts)))

    def _arrays_of(self, encoder, texts: Sequence[str], ids: bytes, counts: bytes) -> list[array]:
        """Each text's uint32 array out of one call's ids and counts (a count of -1: the text is
        encoded alone here)."""
        flat = memoryview(ids)
        out, at = [], 0
        for text, n in zip(texts, memoryview(counts).cast("q")):
            if n < 0:
                out.append(self._encode_array_with(encoder, text))
                continue
            ids_of = array("I")
            ids_of.frombytes(flat[at:at + 4 * n])
            at += 4 * n
            out.append(ids_of)
        return out

    def _encode_array_with(self, encoder, text: str, allowed_special: Iterable[str] | str = ()) -> array:
        out = array("I")
        if not allowed_special and encoder is not None and (self._added is None or not self._added.always):
            if self.mode == "piece":        # pre-tokens (or the text) in, native ids out (bpe_ops/_spm.c)
                normalized = self._normalize(text) if self._normalize else text
                if encoder.space is not None:
                    out.frombytes(encoder.encode_text_bytes(normalized, self._prepends(self._kept_start(text))))
                else:
                    out.frombytes(encoder.encode_words_bytes(self._pre_tokenize(normalized, self._kept_start(text))))
                return out
            if self._normalize is not None:
                text = self._normalize(text)
            try:            # the encoder judges the text itself (its split's guard, lone surrogates)
                out.frombytes(encoder.encode_bytes(text))
                return out
            except _Fallback:
                pass
            # Not the compiled encoder again: `encoder` was this thread's, and the shared one may be
            # another thread's (threads.thread_encoder), busy with its own text.
            out.extend(self._encode_pieces(text))
            return out
        out.extend(self.encode(text, allowed_special))
        return out

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
            encoder = self._text_encoder
            if encoder.space is not None:       # Metaspace and the ids in one call
                return encoder.encode_text(text, self._prepends(at_start))
            return encoder.encode_words(self._pre_tokenize(text, at_start))
        if self._text_encoder is not None:
            try:                        # the encoder judges the text itself, as in _encode_array_with
                return self._text_encoder.encode(text)
            except _Fallback:           # a text only `regex` may split: below
                pass
        return self._encode_pieces(text, at_start)

    def _encode_pieces(self, text: str, at_start: bool = True) -> list[int]:
        """The ids of normalized text piece by piece, without the compiled whole-text encoder: split
        (or the pre-tokenizer chain), every piece looked up in the cache, misses merged."""
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

    def _prepends(self, at_start: bool) -> bool:
        """Whether Metaspace prepends its replacement to this text (unless it starts with one):
        always, or only at the start of the original text (prepend_scheme "first"), or never."""
        scheme = self._metaspace[1]
        return scheme == "always" or (scheme == "first" and at_start)

    def _split(self, text: str) -> list[str]:
        """The pre-tokens of `text` (see `pretokenize.split_with_gaps`)."""
        return split_with_gaps(self._regex, text, self._matches_everything)

    def _encode_dropout(self, text: str, at_start: bool = True, *, stream: DropoutStream) -> list[int]:
        """`_encode_normalized` with BPE-dropout (see `dropout_encode.encode_pieces`)."""
        pieces = self._pre_tokenize(text, at_start) if self._pre_tokenize is not None else self._split(text)
        return dropout_encode.encode_pieces(pieces, stream, symbols=self._symbols, merge_one=self._merge_dropout,
                                            merger=self._merger, byte_ids=self._byte_ids if self.mode == "byte" else None)

    def _merge_dropout(self, ids: list[int], stream: DropoutStream) -> list[int]:
        """BPE-dropout's replay of one pre-token, compiled where `_merge` is (`merging.merge_dropout_python`
        is its specification)."""
        if self._merger is not None:
            return dropout_encode.merge_compiled(self._merger, ids, stream)
        return merge_dropout_python(ids, self._ranks, self._merged, stream)

    def _symbols(self, piece: str) -> list[int]:
        """The first symbol ids of a byte-mode or classic pre-token."""
        if self.mode == "byte":
            return byte_symbols(to_utf8(piece), self._byte_ids, self._identity_bytes)
        return classic_symbols(piece, self._token_ids, self._eow_id)

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        """Ids of one pre-token (a cache miss), kept in the cache (see `PieceCache.remember`)."""
        if self.mode == "piece":
            ids = self._piece_model.word_ids(piece, self._merge, ignore_merges=self.ignore_merges,
                                             segments=self._segment_cache)
        else:
            whole = self._token_ids.get(to_utf8(piece)) if self.ignore_merges and self.mode == "byte" else None
            ids = (whole,) if whole is not None else tuple(self._merge(self._symbols(piece)))
        return self._cache.remember(piece, ids)

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
        ids = self._raw_byte_ids
        if ids is None:         # kept: a pipeline's launcher and its workers each ask
            ids = self._raw_byte_ids = self._find_raw_byte_ids()
        return ids

    def _find_raw_byte_ids(self) -> tuple[int, ...]:
        if self.mode == "piece":
            return tuple(sorted(i for p, i in self._piece_model.piece_ids.items() if byte_of_piece(p) is not None))
        if self.mode == "byte":
            # A one-byte entry of the vocab is a byte's own token or a special token: 256 and a few
            # lengths read, not every token's (`single_byte_ids`).
            vocab = self.vocab
            return tuple(sorted(i for i in {*self._byte_ids, *self.special_tokens.values()} if len(vocab[i]) == 1))
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
        return saving.sha256(self)

    def save(self, directory: str | os.PathLike) -> str:
        """Write `tokenizer.json` and `tokenizer.tiktoken` into `directory`; return the json path.

        No rank file when tiktoken cannot split the same way (a pre-tokenizer chain; see
        `formats.tiktoken_recipe`), and an older one there is removed: it would encode differently."""
        return saving.save(self, directory)

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, implementation: Implementation = DEFAULT) -> Tokenizer:
        """Load a tokenizer.json (ours, or a byte-level BPE written by Hugging Face `tokenizers`), or the
        one in the directory `path`; its tables are cached (see `load.from_file`)."""
        return load.from_file(cls, path, implementation)

    @classmethod
    def from_tiktoken(cls, path: str | os.PathLike, pattern: str, special_tokens: Mapping[str, int] | None = None,
                      *, implementation: Implementation = DEFAULT) -> Tokenizer:
        """Load a tiktoken rank file with its split `pattern` (a name or a regex) and its special tokens
        `{token: id}`: the ids tiktoken's `Encoding` gives (see `load.from_tiktoken`)."""
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

