"""The BPE merge loop: learn merges from a count table `{pretoken bytes: count}`.

Training repeatedly merges the most frequent adjacent pair of symbols, counting each pair once per
occurrence weighted by its word's count, until the vocabulary is full or the best pair is rarer
than `min_frequency`. The loop is incremental, as in Hugging Face's BpeTrainer and rustbpe:

- a word is a `str` whose characters are symbol ids (`chr(id)`), so that finding a pair, testing
  for it and merging it left to right without overlap (`str.replace`) run in C: `a a a` merging
  `(a, a)` gives `aa a`, as in Hugging Face and the textbook. A pair is the 2-character string;
- `pair_counts` holds the live weighted count of each pair, `where` the words in which each pair
  was ever created (members that lost the pair since are skipped when visited);
- a heap of `(-count, tie_key, pair)` with lazy invalidation: whenever a pair's count changes a new
  entry is pushed, and a popped entry whose count is no longer the live one is dropped;
- a merge rewrites only the words that contain the merged pair and applies the net change of each
  neighbouring pair once.

Cost: O(N) to build (N = symbols of the distinct words), then per merge the length of the visited
words plus O(log H) per changed pair; nothing scans the vocabulary or all pairs per merge.

Ties between pairs of equal count are settled by content, never by arrival order, so the result
does not depend on how the counts were gathered (see `TIE_BREAKS`).

`_merge_loop_python` below is the loop's specification. `bpe_ops/_merge_loop.c` is its compiled
twin (the same steps on int32 arrays), built by setup.py when a compiler is there; `learn_merges`
uses it when it imports, unless asked for `Implementation(compiled=False)`. The tests run both.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import compress, repeat
from operator import mul

from . import pretokenize
from .encoder import Tokenizer
from .load import _collector_paused
from .text_rules import text_rules
from .implementation import DEFAULT, Implementation

try:
    from . import _merge_loop          # the compiled twin of _merge_loop_python (optional)
except ImportError:
    _merge_loop = None

# "largest": among the most frequent pairs, the greatest (left_bytes, right_bytes) wins (the default,
#            content based); "smallest": the least such pair;
# "hf":      Hugging Face BpeTrainer's order, the smallest pair of HF ids (special tokens, then the
#            base alphabet sorted by each byte's GPT-2 unicode character, then new tokens in order;
#            classic mode: our sorted alphabet, then new tokens).
TIE_BREAKS = ("largest", "smallest", "hf")
MODES = ("byte", "classic")
MAX_IDS = 0x110000   # a symbol id is one code point of a word string
INT64_MAX = 2**63 - 1  # the compiled loop counts in int64

ProgressFn = Callable[[int, tuple[bytes, bytes], int], None]


@dataclass
class TrainResult:
    """What the merge loop did.

    The compression curve: tokens after merge i = initial_tokens - sum(tokens_saved[:i+1]).
    `merge_counts` (what ranks pairs, as in Hugging Face) can be larger than `tokens_saved`: in a
    run `a a a` the pair (a, a) counts twice but only one merge fits.
    """
    merges: list[tuple[bytes, bytes]]   # in rank order (classic mode: UTF-8 of the symbol strings)
    merge_counts: list[int]             # the pair count of each merge when it was made
    tied_merges: int                    # merges whose count was shared by another pair
    duplicate_merges: int               # merges whose result was already a token (no new id)
    stop_reason: str                    # "vocab_size" | "min_frequency" | "no_pairs"
    initial_tokens: int                 # sum(count * symbols) before any merge
    tokens_saved: list[int]             # weighted occurrences each merge replaced
    # SuperBPE (`learn_superword_merges`): merges[:phase_one_merges] were learned on pre-tokens, the
    # rest on superword units, which held superword_initial_tokens tokens when phase two began.
    phase_one_merges: int | None = None
    superword_initial_tokens: int | None = None


def base_alphabet(counts: Iterable[bytes], mode: str = "byte") -> list[bytes]:
    """The base symbols, in id order.

    Byte mode: the 256 single bytes in byte order. Classic mode: the sorted characters seen in the
    words (as UTF-8), then the end-of-word marker `</w>`.
    """
    if mode == "byte":
        return [bytes([b]) for b in range(256)]
    chars = sorted({ch for word in counts for ch in word.decode("utf-8")})
    return [ch.encode("utf-8") for ch in chars] + [pretokenize.END_OF_WORD.encode("utf-8")]


def vocab_from_merges(alphabet: list[bytes], merges: Iterable[tuple[bytes, bytes]]) -> dict[int, bytes]:
    """`{id: token bytes}`: the alphabet, then each merge's result unless it is already a token."""
    vocab = dict(enumerate(alphabet))
    seen = set(alphabet)
    for left, right in merges:
        token = left + right
        if token not in seen:
            seen.add(token)
            vocab[len(vocab)] = token
    return vocab


def learn_merges(counts: Mapping[bytes, int], num_merges: int, *, min_frequency: int = 2,
                 tie_break: str = "largest", mode: str = "byte", max_token_length: int | None = None,
                 progress: ProgressFn | None = None, implementation: Implementation = DEFAULT) -> TrainResult:
    """Learn merges until `num_merges` new distinct tokens exist (or no pair is frequent enough).

    `num_merges` counts new distinct tokens, as Hugging Face does: a merge whose concatenation
    already is a token (reached through another merge tree) is still made and recorded, but reuses
    that token's id and does not count (it is tallied in `duplicate_merges`).
    `progress(merges_done, pair, count)` is called after each merge.

    `max_token_length` L is Hugging Face BpeTrainer's rule, kept exactly (tests hold the merges
    equal): a pair that a merge creates is counted only when its two tokens together are shorter
    than L symbols (bytes; classic mode: characters, `</w>` not counted), while the pairs of two base
    symbols are always counted. No token is then longer than max(2, L - 1):

    >>> [a + b for a, b in learn_merges({b"abcabcabc": 10}, 5).merges]
    [b'bc', b'abc', b'abcabc', b'abcabcabc']
    >>> [a + b for a, b in learn_merges({b"abcabcabc": 10}, 5, max_token_length=4).merges]
    [b'bc', b'abc']

    The loop runs compiled when `bpe_ops._merge_loop` is built, unless `implementation.compiled` is
    False or the counts do not fit in 64 bits; both loops give the same result.
    """
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, not {tie_break!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    alphabet = base_alphabet(counts, mode)
    if not 0 <= num_merges <= MAX_IDS - len(alphabet):
        raise ValueError(f"num_merges must be between 0 and {MAX_IDS - len(alphabet)}, "
                         f"not {num_merges}")
    if max_token_length is not None and max_token_length < 1:
        raise ValueError(f"max_token_length must be at least 1, not {max_token_length}")
    hf_ranks = _hf_ranks(alphabet, mode) if tie_break == "hf" else None
    # Symbols per base token, for max_token_length (the end-of-word marker counts none, as in HF,
    # whose end_of_word_suffix is glued to the last character).
    symbol_lengths = [1] * len(alphabet) if mode == "byte" else [1] * (len(alphabet) - 1) + [0]
    if mode == "byte":
        # Both loops take byte-mode pre-tokens as they are (byte b is symbol b; they skip what
        # `_symbolize_bytes` would drop): the compiled one then builds no str per pre-token.
        weights = list(counts.values())
        initial_tokens = _initial_tokens(counts, weights)
        words = list(counts)
    else:
        words, weights, initial_tokens = _symbolize(counts, mode, alphabet)
    merges, merge_counts, tokens_saved, tied, duplicates, stop_reason = _run_loop(
        implementation, initial_tokens, words, weights, alphabet, num_merges, min_frequency, tie_break, hf_ranks,
        progress, max_token_length or 0, symbol_lengths)
    return TrainResult(merges=merges, merge_counts=merge_counts, tied_merges=tied,
                       duplicate_merges=duplicates, stop_reason=stop_reason,
                       initial_tokens=initial_tokens, tokens_saved=tokens_saved)


def learn_superword_merges(units: Mapping[bytes, int], merges: list[tuple[bytes, bytes]], num_merges: int, *,
                           min_frequency: int = 2, tie_break: str = "largest",
                           progress: ProgressFn | None = None,
                           implementation: Implementation = DEFAULT) -> TrainResult:
    """Phase two of SuperBPE: continue byte-mode training from `merges` (phase one's, learned on
    pre-tokens) over the superword units `{unit bytes: count}` (`pretokenize.superword_pattern`),
    until `num_merges` more new tokens exist. Returns phase two's merges only.

    The loop starts from each unit as the final tokenizer will see it: one piece, phase one's merges
    applied by rank over the whole of it (`Tokenizer._merge`), which may differ from its pre-tokens
    merged apart (where `x y` is a pre-token elsewhere, the unit `ax y` can become `a|x y` rather
    than `ax| y`). From there the loop goes on as
    in phase one, with phase one's tokens as its alphabet; a merge it makes has a higher rank than
    every phase-one merge, so the encoder replays phase one first, then phase two, as training did.

    >>> units = {b"of the": 5, b" of the": 4, b"the": 1}
    >>> [a + b for a, b in learn_superword_merges(units, [(b"t", b"h"), (b"th", b"e")], 3).merges]
    [b'of', b'of ', b'of the']
    """
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, not {tie_break!r}")
    alphabet = base_alphabet((), "byte")
    vocab = vocab_from_merges(alphabet, merges)
    tokens = [vocab[i] for i in range(len(vocab))]
    if not 0 <= num_merges <= MAX_IDS - len(tokens):
        raise ValueError(f"num_merges must be between 0 and {MAX_IDS - len(tokens)}, not {num_merges}")
    words, weights, initial_tokens = superword_start(units, merges, implementation)
    hf_ranks = _hf_ranks(alphabet, "byte") + list(range(len(alphabet), len(tokens))) if tie_break == "hf" else None
    new, merge_counts, tokens_saved, tied, duplicates, stop_reason = _run_loop(
        implementation, initial_tokens, words, weights, tokens, num_merges, min_frequency, tie_break, hf_ranks,
        progress, 0, None)
    return TrainResult(merges=new, merge_counts=merge_counts, tied_merges=tied, duplicate_merges=duplicates,
                       stop_reason=stop_reason, initial_tokens=initial_tokens, tokens_saved=tokens_saved)


def superword_start(units: Mapping[bytes, int], merges: list[tuple[bytes, bytes]],
                    implementation: Implementation = DEFAULT) -> tuple[list[str], list[int], int]:
    """Phase two's words: each unit with a pair left after phase one's merges (replayed by rank, as
    the encoder does), as a str of token ids (`chr(id)`), with its count; and the weighted number of
    tokens of all units."""
    phase_one = Tokenizer(merges, implementation=implementation)
    # A column at a time (C loops over 10^5-10^6 units): byte b is id b before any merge.
    ns = list(units.values())
    if ns and min(ns) < 0:
        unit, n = next((u, n) for u, n in units.items() if n < 0)
        raise ValueError(f"negative count {n} for superword unit {unit!r}")
    with _collector_paused():          # a million lists, none of them garbage
        merged = list(map(phase_one._merge, map(list, units)))
        total = sum(map(mul, map(len, merged), ns))
        keep = [len(ids) > 1 and n > 0 for ids, n in zip(merged, ns)]
        words = list(map("".join, map(map, repeat(chr), compress(merged, keep))))
    weights = list(compress(ns, keep))
    return words, weights, total


def _run_loop(implementation: Implementation, initial_tokens: int, words, weights, alphabet, num_merges: int,
              min_frequency: int, *rest):
    """The merge loop on these words: compiled when `bpe_ops._merge_loop` is built, unless
    `implementation.compiled` is False or the counts do not fit in 64 bits."""
    # Every count the loop computes is at most initial_tokens: if that fits, int64 is exact.
    if _merge_loop is not None and implementation.compiled and initial_tokens <= INT64_MAX:
        # Pair counts are >= 1 and < 2**63, so clamping min_frequency changes no comparison. The
        # loop's results (a tuple and two ints per merge) are no garbage, yet their allocation
        # would start collections that walk the words and the counts.
        with _collector_paused():
            return _merge_loop.merge_loop(words, weights, alphabet, num_merges,
                                          min(max(min_frequency, 0), INT64_MAX), *rest)
    return _merge_loop_python(words, weights, alphabet, num_merges, min_frequency, *rest)


def _merge_loop_python(words: list[str], weights: list[int], alphabet: list[bytes],
                       num_merges: int, min_frequency: int, tie_break: str,
                       hf_ranks: list[int] | None, progress: ProgressFn | None,
                       max_token_length: int = 0, symbol_lengths: list[int] | None = None
                       ) -> tuple[list[tuple[bytes, bytes]], list[int], list[int], int, int, str]:
    """The merge loop on symbolized words (rewritten in place): the specification of
    `_merge_loop.merge_loop`, which takes the same arguments and returns the same
    `(merges, merge_counts, tokens_saved, tied_merges, duplicate_merges, stop_reason)`.

    `max_token_length` > 0 (0: no limit): only pairs shorter than it, in `symbol_lengths` of the base
    tokens, or of two base tokens, are counted (see `learn_merges`)."""
    if any(isinstance(word, bytes) for word in words):
        # Byte-mode pre-tokens as they are (what the compiled loop also takes): byte b is symbol b;
        # single bytes and zero counts hold no pair.
        kept = [(word.decode("latin-1"), n) for word, n in zip(words, weights) if len(word) > 1 and n != 0]
        words, weights = [word for word, _ in kept], [n for _, n in kept]
    tokens = list(alphabet)                           # id -> bytes
    token_ids = {t: i for i, t in enumerate(tokens)}
    ties = _TieKeys(alphabet, tie_break, hf_ranks)
    left_key, right_key = ties.left, ties.right       # grown in place by ties.add
    pair_counts, where = _count_pairs(words, weights)
    get_count = pair_counts.get
    # Symbols per token, and whether a pair is counted (every pair, without a limit).
    lengths = list(symbol_lengths) if symbol_lengths is not None else [1] * len(alphabet)
    n_base = len(alphabet)

    def counted(key: str) -> bool:
        a, b = ord(key[0]), ord(key[1])
        return (a < n_base and b < n_base) or lengths[a] + lengths[b] < max_token_length

    def fresh_heap() -> list:
        # Pairs below min_frequency can never win; they get an entry if their count rises.
        heap = [(-n, left_key[ord(k[0])] + right_key[ord(k[1])], k)
                for k, n in pair_counts.items() if n >= min_frequency]
        heapq.heapify(heap)
        return heap

    heap = fresh_heap()
    heappush, heappop = heapq.heappush, heapq.heappop
    merges: list[tuple[bytes, bytes]] = []
    merge_counts: list[int] = []
    tokens_saved: list[int] = []
    tied = duplicates = new_tokens = 0
    stop_reason = "vocab_size"
    def settle(entry) -> bool:
        # A popped entry against its pair's live count: True when exact. An entry above the count
        # (the pair fell since, which pushes nothing) goes back in with the live count if it can
        # still win; a dead pair's entry, or one below the count (a higher one was pushed), is
        # dropped. Every live pair keeps an entry at or above its count.
        neg, tie_key, key = entry
        n = get_count(key)
        if n == -neg:
            return True
        if n is not None and n < -neg and n >= min_frequency:
            heappush(heap, (-n, tie_key, key))
        return False

    while new_tokens < num_merges:
        # The best live pair: settle entries whose count is stale (lazy invalidation).
        while heap:
            neg, _, pair = entry = heappop(heap)
            if settle(entry):
                break
        else:
            # Every pair at or above min_frequency has an entry at or above its count, so what is
            # left is rarer.
            stop_reason = "min_frequency" if pair_counts else "no_pairs"
            break
        count = -neg
        # A tie: once stale entries are settled (and copies of the winner dropped), the next live
        # entry has the same count.
        while heap:
            top = heap[0]
            if top[2] != pair and get_count(top[2]) == -top[0]:
                break
            heappop(heap)
            if top[2] != pair:
                settle(top)
        if heap and heap[0][0] == neg:
            tied += 1

        left, right = ord(pair[0]), ord(pair[1])
        merged = tokens[left] + tokens[right]
        new = token_ids.get(merged)
        reused = new is not None
        if reused:
            duplicates += 1
        else:
            new = len(tokens)
            tokens.append(merged)
            token_ids[merged] = new
            ties.add(new, merged)
            lengths.append(lengths[left] + lengths[right])
            new_tokens += 1
        merges.append((tokens[left], tokens[right]))
        merge_counts.append(count)

        delta, saved = _merge_pair(words, weights, where, pair, chr(new), reused)
        tokens_saved.append(saved)
        del pair_counts[pair]
        for key, change in delta.items():
            if max_token_length and not counted(key):
                where.pop(key, None)     # never counted: it can never win
                continue
            if change and key != pair:
                n = get_count(key, 0) + change
                if n:
                    pair_counts[key] = n
                    if change > 0 and n >= min_frequency:     # a fall: see settle
                        heappush(heap, (-n, left_key[ord(key[0])] + right_key[ord(key[1])], key))
                else:
                    del pair_counts[key]
                    where.pop(key, None)
        if len(heap) > 3 * len(pair_counts) + 65536:
            heap = fresh_heap()   # mostly stale entries; amortised O(1) per push
        if progress is not None:
            progress(len(merges), merges[-1], count)
    return merges, merge_counts, tokens_saved, tied, duplicates, stop_reason


def _hf_ranks(alphabet: list[bytes], mode: str) -> list[int]:
    """Hugging Face's id order of the alphabet: byte mode sorts the bytes by their GPT-2 unicode
    character; classic mode has no GPT-2 alphabet, so HF ids follow our sorted alphabet."""
    if mode == "classic":
        return list(range(len(alphabet)))
    to_char = pretokenize.bytes_to_unicode()
    order = sorted(range(256), key=lambda b: to_char[b])
    return [order.index(b) for b in range(256)]


class _TieKeys:
    """Per-token keys such that `left[a] + right[b]` orders pairs (a, b) by the tie rule, smallest
    first (the heap is a min-heap): one comparison of plain bytes or ints, not of tuples.

    "smallest": byte b becomes the 16-bit big-endian unit 0x100 + b and each token ends with the
    unit 0, so `left[a] + right[b]` compares like the tuple `(bytes_a, bytes_b)` (a proper prefix
    sorts first). "largest": units 255 - b ending with 0x100 reverse that order, prefixes included.
    "hf": left[a] = rank(a) * MAX_IDS, right[b] = rank(b), ranks in Hugging Face's id order.
    """

    _COMPLEMENT = bytes(range(255, -1, -1))

    def __init__(self, alphabet: list[bytes], tie_break: str, hf_ranks: list[int] | None):
        self.tie_break = tie_break
        if tie_break == "hf":
            self.right = list(hf_ranks)
            self.left = [r * MAX_IDS for r in hf_ranks]
        else:
            self.right = [self._key(t) for t in alphabet]
            self.left = self.right

    def _key(self, token: bytes) -> bytes:
        key = bytearray(2 * len(token) + 2)
        if self.tie_break == "smallest":
            key[0:-2:2] = b"\x01" * len(token)
            key[1:-2:2] = token
        else:
            key[1:-2:2] = token.translate(self._COMPLEMENT)
            key[-2] = 1
        return bytes(key)

    def add(self, token_id: int, token: bytes) -> None:
        """Keys for a new token (HF ranks new tokens by id, after the alphabet)."""
        if self.tie_break == "hf":
            self.right.append(token_id)
            self.left.append(token_id * MAX_IDS)
        else:
            self.right.append(self._key(token))


def _symbolize(counts: Mapping[bytes, int], mode: str,
               alphabet: list[bytes]) -> tuple[list[str], list[int], int]:
    """Words as symbol strings with their counts (only words that have a pair), and the total
    number of symbols (weighted) before any merge."""
    if mode == "byte":
        return _symbolize_bytes(counts)
    to_symbol = {ord(t.decode("utf-8")): chr(i) for i, t in enumerate(alphabet[:-1])}
    end = chr(len(alphabet) - 1)
    words, weights = [], []
    total = 0
    for word, n in counts.items():
        if n < 0:
            raise ValueError(f"negative count {n} for pre-token {word!r}")
        if n == 0:
            continue
        symbols = word.decode("utf-8").translate(to_symbol) + end
        total += n * len(symbols)
        if len(symbols) > 1:
            words.append(symbols)
            weights.append(n)
    return words, weights, total


def _initial_tokens(counts: Mapping[bytes, int], ns: list[int]) -> int:
    """The weighted number of bytes of a byte-mode count table (`ns` its counts, in order); a
    negative count is a ValueError."""
    if ns and min(ns) < 0:
        word, n = next((w, n) for w, n in counts.items() if n < 0)
        raise ValueError(f"negative count {n} for pre-token {word!r}")
    return sum(map(mul, map(len, counts), ns))


def _symbolize_bytes(counts: Mapping[bytes, int]) -> tuple[list[str], list[int], int]:
    """`_symbolize` in byte mode, a column at a time (C loops, not a Python one, over 10^5-10^6
    pre-tokens): byte b is the character chr(b), which is symbol id b."""
    ns = list(counts.values())
    total = _initial_tokens(counts, ns)
    symbols = list(map(bytes.decode, counts, repeat("latin-1")))
    lengths = list(map(len, symbols))
    keep = [length > 1 and n > 0 for length, n in zip(lengths, ns)]
    return list(compress(symbols, keep)), list(compress(ns, keep)), total


def _count_pairs(words: list[str],
                 weights: list[int]) -> tuple[dict[str, int], defaultdict[str, set[int]]]:
    """Weighted count of every adjacent pair, and the words each pair occurs in."""
    pair_counts: dict[str, int] = {}
    where: defaultdict[str, set[int]] = defaultdict(set)
    get = pair_counts.get
    for i, (word, n) in enumerate(zip(words, weights)):
        for j in range(len(word) - 1):
            key = word[j:j + 2]
            pair_counts[key] = get(key, 0) + n
            where[key].add(i)
    return pair_counts, where


def _merge_pair(words: list[str], weights: list[int], where: defaultdict[str, set[int]],
                pair: str, new: str, reused: bool) -> tuple[defaultdict[str, int], int]:
    """Replace `pair` by the symbol `new` in every word containing it (left to right, no overlap).

    Returns the net change of each neighbouring pair's count and the weighted number of merged
    occurrences, and registers the words in which a pair with `new` appears. The merged pair
    itself ends at zero (the caller drops it).
    `reused`: `new` is an existing token (a duplicate merge), so it may already be in a word.
    """
    left, right = pair
    new_new = new + new
    right_left = right + left
    delta: defaultdict[str, int] = defaultdict(int)
    saved = 0
    for i in where.pop(pair):
        word = words[i]
        if pair not in word:
            continue          # an earlier merge took the pair away from this word
        merged = word.replace(pair, new)
        words[i] = merged
        n = weights[i]
        saved += n * (len(word) - len(merged))
        if len(merged) == 1:
            continue          # the whole word became one token: no neighbours
        if reused and new in word:
            # The occurrences of `new` are not all from this merge: diff all pairs of the word.
            for j in range(len(word) - 1):
                delta[word[j:j + 2]] -= n
            for j in range(len(merged) - 1):
                key = merged[j:j + 2]
                delta[key] += n
                where[key].add(i)
            continue
        last = len(merged) - 1
        p = merged.find(new)
        while p >= 0:
            if p:
                before = merged[p - 1]
                if before == new:     # two merges side by side: `right left` became `new new`
                    delta[right_left] -= n
                    delta[new_new] += n
                    where[new_new].add(i)
                else:
                    delta[before + left] -= n
                    key = before + new
                    delta[key] += n
                    where[key].add(i)
            if p < last:
                after = merged[p + 1]
                if after != new:      # (a following merge is handled as its `before`)
                    delta[right + after] -= n
                    key = new + after
                    delta[key] += n
                    where[key].add(i)
            p = merged.find(new, p + 1)
    return delta, saved


def train_bpe(counts_or_texts: Mapping[bytes, int] | Iterable[str] | str, vocab_size: int,
              pattern: str = "gpt4", special_tokens: Iterable[str] = (), min_frequency: int = 2,
              tie_break: str = "largest", progress: ProgressFn | None = None, *,
              max_token_length: int | None = None, normalize: str | None = None, lowercase: bool = False,
              split_digits: bool = False, digit_group: int | None = None,
              superword_transition: int | None = None,
              superword_max_words: int = pretokenize.SUPERWORD_MAX_WORDS,
              superword_counts: Mapping[bytes, int] | None = None,
              implementation: Implementation = DEFAULT) -> Tokenizer:
    """Train a tokenizer of `vocab_size` ids (alphabet + new tokens + special tokens).

    `counts_or_texts` is a count table `{pretoken bytes: count}` (any Mapping) or texts to count
    with `pattern` (a single str is one text). Pattern `classic` trains the textbook way (characters
    and `</w>`). Special tokens take the ids after the last token, in the order given. The
    returned Tokenizer carries the TrainResult as `tok.training`. `max_token_length` is Hugging
    Face's (see `learn_merges`). `implementation` (counting, the
    merge loop, the tokenizer) changes the speed, not the result.

    `normalize` ("NFC", "NFKC", "NFD", "NFKD"), `lowercase`, `split_digits` and `digit_group` K
    change the text the way bpe_ops/text_rules.py describes, when counting and in the Tokenizer
    (and so in its tokenizer.json); a count table given instead of texts must have been counted
    under the same rules (`pretokenize.count_pretokens(..., normalizer=, pre_tokenizer=)`).

    >>> tok = train_bpe(["2024-12-01 and 1999"] * 5, 256 + 20, split_digits=True)
    >>> [tok.decode([i]) for i in tok.encode("12345")]
    ['1', '2', '3', '4', '5']

    SuperBPE (Liu et al., 2025) with `superword_transition=T` (fewer than `vocab_size` ids, counted
    the same way): phase one learns merges on pre-tokens until the vocabulary holds T ids, phase two
    (`learn_superword_merges`) goes on over the units of `pretokenize.superword_pattern(pattern,
    superword_max_words)`, whose merges may bridge words. The tokenizer then splits text into those
    units (its `pattern`). From a count table, `superword_counts` is the table of those units. The
    digit rules apply inside the units (a named pattern's digit alternative); a custom regex with a
    digit rule (two split steps) and `max_token_length` (phase two's first pairs are whole phase-one
    tokens, which HF's rule never limits) are refused with it.
    """
    specials = list(dict.fromkeys(special_tokens))
    if isinstance(counts_or_texts, str):
        counts_or_texts = [counts_or_texts]
    rules = text_rules(pattern, normalize=normalize, lowercase=lowercase, split_digits=split_digits,
                       digit_group=digit_group)
    units_pattern = None
    if superword_transition is not None:
        if rules.pre_tokenizer is not None or max_token_length is not None:
            raise ValueError("superword_transition takes neither max_token_length nor a digit rule on a custom "
                             "regex (its units must be one split regex)")
        units_pattern = pretokenize.superword_pattern(rules.pattern, superword_max_words)
    if isinstance(counts_or_texts, Mapping):
        counts = counts_or_texts
        if units_pattern is not None and superword_counts is None:
            raise ValueError("superword_transition from a count table needs superword_counts, the counts of "
                             "pretokenize.superword_pattern(pattern, superword_max_words)")
    else:
        texts = counts_or_texts if units_pattern is None else list(counts_or_texts)
        counts = pretokenize.count_pretokens(texts, rules.pattern, specials, normalizer=rules.normalizer,
                                             pre_tokenizer=rules.pre_tokenizer, implementation=implementation)
        if units_pattern is not None:
            superword_counts = pretokenize.count_pretokens(texts, units_pattern, specials,
                                                           normalizer=rules.normalizer, implementation=implementation)
    mode = "classic" if pattern.lower() == "classic" else "byte"
    alphabet = base_alphabet(counts, mode)
    num_merges = vocab_size - len(alphabet) - len(specials)
    if num_merges < 0:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the {len(alphabet)} base symbols "
                         f"plus {len(specials)} special tokens")
    if units_pattern is None:
        result = learn_merges(counts, num_merges, min_frequency=min_frequency, tie_break=tie_break,
                              mode=mode, max_token_length=max_token_length, progress=progress,
                              implementation=implementation)
    else:
        first = superword_transition - len(alphabet) - len(specials)
        if not 0 <= first < num_merges:
            raise ValueError(f"superword_transition must be at least the {len(alphabet)} base symbols plus "
                             f"{len(specials)} special tokens and below vocab_size {vocab_size}, "
                             f"not {superword_transition}")
        result = learn_merges(counts, first, min_frequency=min_frequency, tie_break=tie_break, mode=mode,
                              progress=progress, implementation=implementation)
        result = _continued(result, learn_superword_merges(
            superword_counts, result.merges, num_merges - (len(result.merges) - result.duplicate_merges),
            min_frequency=min_frequency, tie_break=tie_break, implementation=implementation,
            progress=_offset(progress, len(result.merges))))
    # The Tokenizer gives the special tokens the ids after the last token, in order.
    vocab = vocab_from_merges(alphabet, result.merges)
    tok = Tokenizer(result.merges, pattern=units_pattern or rules.pattern, special_tokens=specials, mode=mode,
                    vocab=vocab, normalizer=rules.normalizer, pre_tokenizer=rules.pre_tokenizer,
                    implementation=implementation)
    tok.training = result
    return tok


def _continued(phase_one: TrainResult, phase_two: TrainResult) -> TrainResult:
    """Both phases of SuperBPE as one TrainResult (the stop reason is phase two's)."""
    return TrainResult(merges=phase_one.merges + phase_two.merges,
                       merge_counts=phase_one.merge_counts + phase_two.merge_counts,
                       tied_merges=phase_one.tied_merges + phase_two.tied_merges,
                       duplicate_merges=phase_one.duplicate_merges + phase_two.duplicate_merges,
                       stop_reason=phase_two.stop_reason, initial_tokens=phase_one.initial_tokens,
                       tokens_saved=phase_one.tokens_saved + phase_two.tokens_saved,
                       phase_one_merges=len(phase_one.merges),
                       superword_initial_tokens=phase_two.initial_tokens)


def _offset(progress: ProgressFn | None, done: int) -> ProgressFn | None:
    """`progress` counting the merges of phase two after phase one's `done`."""
    if progress is None:
        return None
    return lambda merges, pair, count: progress(done + merges, pair, count)
