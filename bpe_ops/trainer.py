"""The BPE merge loop: learn merges from a count table `{pretoken bytes: count}`.

Training repeatedly merges the most frequent adjacent pair of symbols, counting each pair once per
occurrence weighted by its word's count, until the vocabulary is full or the best pair is rarer
than `min_frequency`. The loop is incremental, as in Hugging Face's BpeTrainer and rustbpe:

- every word is a list of symbol ids; `pair_counts` holds the live weighted count of each pair and
  `where` the set of words in which each pair was ever created (stale members are skipped);
- a heap of `(-count, tie_key, pair)` with lazy invalidation: whenever a pair's count changes a new
  entry is pushed, and a popped entry whose count is no longer the live one is dropped;
- a merge rewrites only the words that contain the merged pair, left to right and without overlap
  (`a a a` merging `(a, a)` gives `aa a`), and records the net change of each neighbouring pair.

Cost: O(N) to build (N = symbols over the distinct words), then per merge the length of the touched
words plus O(log H) per changed pair; nothing scans the whole vocabulary or all pairs per merge.

Ties between pairs of equal count are settled by content, never by arrival order, so the result
does not depend on how the counts were gathered (see `TIE_BREAKS`).
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from . import pretokenize
from .encoder import Tokenizer

# "largest": among the most frequent pairs, the greatest (left_bytes, right_bytes) wins (the default,
#            content based); "smallest": the least such pair;
# "hf":      Hugging Face BpeTrainer's order, the smallest pair of HF ids (special tokens, then the
#            base alphabet sorted by each byte's GPT-2 unicode character, then new tokens in order).
TIE_BREAKS = ("largest", "smallest", "hf")
MODES = ("byte", "classic")

ProgressFn = Callable[[int, tuple[bytes, bytes], int], None]


@dataclass
class TrainResult:
    """What the merge loop did. Tokens after merge i = initial_tokens - sum(merge_counts[:i+1])."""
    merges: list[tuple[bytes, bytes]]   # in rank order (classic mode: UTF-8 of the symbol strings)
    merge_counts: list[int]             # the pair count of each merge when it was made
    tied_merges: int                    # merges whose count was shared by another pair
    duplicate_merges: int               # merges whose result was already a token (no new id)
    stop_reason: str                    # "vocab_size" | "min_frequency" | "no_pairs"
    initial_tokens: int                 # sum(count * symbols) before any merge


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
                 tie_break: str = "largest", mode: str = "byte",
                 progress: ProgressFn | None = None) -> TrainResult:
    """Learn merges until `num_merges` new distinct tokens exist (or no pair is frequent enough).

    `num_merges` counts new distinct tokens, as Hugging Face does: a merge whose concatenation
    already is a token (reached through another merge tree) is still made and recorded, but reuses
    that token's id and does not count (it is tallied in `duplicate_merges`).
    `progress(merges_done, pair, count)` is called after each merge.
    """
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, not {tie_break!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if num_merges < 0:
        raise ValueError(f"num_merges must be >= 0, not {num_merges}")
    alphabet = base_alphabet(counts, mode)
    words, weights, initial_tokens = _symbolize(counts, mode, alphabet)
    tokens = list(alphabet)                           # id -> bytes
    token_ids = {t: i for i, t in enumerate(tokens)}
    shift = (len(tokens) + num_merges).bit_length()   # pair key = left << shift | right
    mask = (1 << shift) - 1
    ties = _TieKeys(alphabet, tie_break, mode, shift)
    left_key, right_key = ties.left, ties.right      # grown in place by ties.add
    pair_counts, where = _count_pairs(words, weights, shift)
    get_count = pair_counts.get

    def fresh_heap() -> list:
        # Pairs below min_frequency can never win; they get an entry if their count rises.
        heap = [(-n, left_key[k >> shift] + right_key[k & mask], k)
                for k, n in pair_counts.items() if n >= min_frequency]
        heapq.heapify(heap)
        return heap

    heap = fresh_heap()
    heappush, heappop = heapq.heappush, heapq.heappop
    merges: list[tuple[bytes, bytes]] = []
    merge_counts: list[int] = []
    tied = duplicates = new_tokens = 0
    stop_reason = "vocab_size"
    while new_tokens < num_merges:
        # The best live pair: skip entries whose count is stale (lazy invalidation).
        while heap:
            neg, _, pair = heappop(heap)
            if get_count(pair) == -neg:
                break
        else:
            # Every pair at or above min_frequency has a live entry, so what is left is rarer.
            stop_reason = "min_frequency" if pair_counts else "no_pairs"
            break
        count = -neg
        # A tie: once stale entries (and copies of the winner) are dropped, the next live entry
        # has the same count.
        while heap:
            top = heap[0]
            if top[2] != pair and get_count(top[2]) == -top[0]:
                break
            heappop(heap)
        if heap and heap[0][0] == neg:
            tied += 1

        left, right = pair >> shift, pair & mask
        merged = tokens[left] + tokens[right]
        new = token_ids.get(merged)
        if new is None:
            new = len(tokens)
            tokens.append(merged)
            token_ids[merged] = new
            ties.add(new, merged)
            new_tokens += 1
        else:
            duplicates += 1
        merges.append((tokens[left], tokens[right]))
        merge_counts.append(count)

        delta = _merge_pair(words, weights, where, left, right, new, shift)
        del pair_counts[pair]
        for key, change in delta.items():
            if change and key != pair:
                n = get_count(key, 0) + change
                if n:
                    pair_counts[key] = n
                    if n >= min_frequency:
                        heappush(heap, (-n, left_key[key >> shift] + right_key[key & mask], key))
                else:
                    del pair_counts[key]
                    where.pop(key, None)
        if len(heap) > 3 * len(pair_counts) + 65536:
            heap = fresh_heap()   # mostly stale entries; amortised O(1) per push
        if progress is not None:
            progress(len(merges), merges[-1], count)

    return TrainResult(merges=merges, merge_counts=merge_counts, tied_merges=tied,
                       duplicate_merges=duplicates, stop_reason=stop_reason,
                       initial_tokens=initial_tokens)


class _TieKeys:
    """Per-token keys such that `left[a] + right[b]` orders pairs (a, b) by the tie rule, smallest
    first (the heap is a min-heap): one comparison of plain bytes or ints, not of tuples.

    "smallest": byte b becomes the 16-bit big-endian unit 0x100 + b and each token ends with the
    unit 0, so `left[a] + right[b]` compares like the tuple `(bytes_a, bytes_b)` (a proper prefix
    sorts first). "largest": units 255 - b ending with 0x100 reverse that order, prefixes included.
    "hf": left[a] = rank(a) << shift, right[b] = rank(b), ranks in Hugging Face's id order.
    """

    _COMPLEMENT = bytes(range(255, -1, -1))

    def __init__(self, alphabet: list[bytes], tie_break: str, mode: str, shift: int):
        self.tie_break, self.shift = tie_break, shift
        if tie_break == "hf":
            if mode == "classic":        # no GPT-2 alphabet: HF ids follow our sorted alphabet
                ranks = list(range(len(alphabet)))
            else:
                to_char = pretokenize.bytes_to_unicode()
                order = sorted(range(256), key=lambda b: to_char[b])
                ranks = [order.index(b) for b in range(256)]
            self.right = ranks
            self.left = [r << shift for r in ranks]
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
            self.left.append(token_id << self.shift)
        else:
            self.right.append(self._key(token))


def _symbolize(counts: Mapping[bytes, int], mode: str,
               alphabet: list[bytes]) -> tuple[list[list[int]], list[int], int]:
    """Words as symbol-id lists with their counts (only words that have a pair), and the total
    number of symbols (weighted) before any merge."""
    if mode == "classic":
        ids = {t.decode("utf-8"): i for i, t in enumerate(alphabet)}
        end = len(alphabet) - 1
    words, weights = [], []
    total = 0
    for word, n in counts.items():
        if n < 0:
            raise ValueError(f"negative count {n} for pre-token {word!r}")
        if n == 0:
            continue
        symbols = list(word) if mode == "byte" else [ids[ch] for ch in word.decode("utf-8")] + [end]
        total += n * len(symbols)
        if len(symbols) > 1:
            words.append(symbols)
            weights.append(n)
    return words, weights, total


def _count_pairs(words: list[list[int]], weights: list[int],
                 shift: int) -> tuple[dict[int, int], defaultdict[int, set[int]]]:
    """Weighted count of every adjacent pair, and the words each pair occurs in."""
    pair_counts: dict[int, int] = {}
    where: defaultdict[int, set[int]] = defaultdict(set)
    get = pair_counts.get
    for i, (word, n) in enumerate(zip(words, weights)):
        prev = word[0]
        for sym in word[1:]:
            key = prev << shift | sym
            pair_counts[key] = get(key, 0) + n
            where[key].add(i)
            prev = sym
    return pair_counts, where


def _merge_pair(words: list[list[int]], weights: list[int], where: defaultdict[int, set[int]],
                left: int, right: int, new: int, shift: int) -> dict[int, int]:
    """Replace `left right` by `new` in every word containing it (left to right, no overlap).

    Returns the net change of each neighbouring pair's count; registers the words in which a pair
    with `new` appears. The merged pair itself ends at zero (the caller drops it).
    """
    delta: dict[int, int] = {}
    get = delta.get
    for i in where.pop(left << shift | right):
        word = words[i]
        last = len(word) - 1
        # Occurrences of `left`, found by list.index (C speed) rather than a Python scan.
        j = -1
        while True:
            try:
                j = word.index(left, j + 1, last)
            except ValueError:
                break
            if word[j + 1] != right:
                continue
            n = weights[i]
            if j:
                prev = word[j - 1]   # already rewritten when it was the previous occurrence
                key = prev << shift | left
                delta[key] = get(key, 0) - n
                key = prev << shift | new
                delta[key] = get(key, 0) + n
                where[key].add(i)
            word[j] = new
            del word[j + 1]
            last -= 1
            if j < last:
                nxt = word[j + 1]
                key = right << shift | nxt
                delta[key] = get(key, 0) - n
                key = new << shift | nxt
                delta[key] = get(key, 0) + n
                where[key].add(i)
    return delta


def train_bpe(counts_or_texts: Mapping[bytes, int] | Iterable[str] | str, vocab_size: int,
              pattern: str = "gpt4", special_tokens: Iterable[str] = (), min_frequency: int = 2,
              tie_break: str = "largest", progress: ProgressFn | None = None) -> Tokenizer:
    """Train a tokenizer of `vocab_size` ids (alphabet + new tokens + special tokens).

    `counts_or_texts` is a count table `{pretoken bytes: count}` (any Mapping) or texts to count
    with `pattern` (a single str is one text). Pattern `classic` trains the textbook way (characters
    and `</w>`). Special tokens take the ids after the last token, in the order given. The
    returned Tokenizer carries the TrainResult as `tok.training`.
    """
    specials = list(dict.fromkeys(special_tokens))
    if isinstance(counts_or_texts, str):
        counts_or_texts = [counts_or_texts]
    if isinstance(counts_or_texts, Mapping):
        counts = counts_or_texts
    else:
        counts = pretokenize.count_pretokens(counts_or_texts, pattern, specials)
    mode = "classic" if pattern == "classic" else "byte"
    alphabet = base_alphabet(counts, mode)
    num_merges = vocab_size - len(alphabet) - len(specials)
    if num_merges < 0:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the {len(alphabet)} base symbols "
                         f"plus {len(specials)} special tokens")
    result = learn_merges(counts, num_merges, min_frequency=min_frequency, tie_break=tie_break,
                          mode=mode, progress=progress)
    vocab = vocab_from_merges(alphabet, result.merges)
    for special in specials:
        vocab[len(vocab)] = special.encode("utf-8")
    tok = Tokenizer(result.merges, pattern=pattern, special_tokens=specials, mode=mode, vocab=vocab)
    tok.training = result
    return tok
