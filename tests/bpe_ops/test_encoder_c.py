"""The compiled per-piece merge (`bpe_ops._piece_merge`) against its specification, the Python
`merging.merge_python`, over the same explicit tables: random merge tables (merges ranked before the merges that make their parts,
repeated pairs), random pieces of 1 to 5,000 symbols, GPT-2's merges on every piece of real
documents and on megabyte pieces, whole encodes with and without the compiled merger, and the
dispatch, pickling and error paths."""
import base64
import pickle
import random
import shutil
import sysconfig
from dataclasses import dataclass
from functools import cached_property

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops import Tokenizer, _educational, merging, text_encoder
from bpe_ops.implementation import Implementation
from tests.conftest import read_jsonl_texts

LETTERS = b"abcd"


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Fail where a C compiler exists but the extension is not built; skip where there is none (the
    Python merge is then the product)."""
    if merging._piece_merge is None:
        msg = "bpe_ops._piece_merge is not built (python setup.py build_ext --inplace)"
        if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]):
            pytest.fail(msg)
        pytest.skip(msg + " and there is no C compiler")


@dataclass
class Table:
    """A merge table over a vocabulary, as the tokenizer builds it, with its compiled merger."""
    tokens: dict[int, bytes]
    token_ids: dict[bytes, int]
    ranks: dict
    left: list[int]
    right: list[int]
    merged: list[int]

    @classmethod
    def of(cls, merges: list[tuple[bytes, bytes]], vocab: dict[int, bytes]) -> "Table":
        tokens = dict(vocab)
        token_ids = merging.invert(tokens)
        return cls(tokens, token_ids, *merging.build_merge_table(merges, tokens, token_ids, extend=False))

    @cached_property
    def ascend(self) -> bool:
        return merging.ranks_ascend(self.ranks, self.left, self.right, self.merged)

    @cached_property
    def merger(self):
        return merging.piece_merger(self.left, self.right, self.merged, self.tokens)

    def merge_python(self, ids: list[int]) -> list[int]:
        return merging.merge_python(ids, self.ranks, self.left, self.right, self.merged, self.ascend)


def assert_same_merge(table: Table, ids: list[int]) -> list[int]:
    """The compiled merge of `ids` equals the Python one, and leaves `ids` as it was."""
    before = list(ids)
    out = table.merger.merge(ids)
    assert ids == before
    assert out == table.merge_python(list(ids))
    return out


@pytest.fixture(scope="module")
def gpt2(gpt2_files) -> Tokenizer:
    return Tokenizer.from_gpt2_files(*gpt2_files)


@pytest.fixture(scope="module")
def gpt2_table(gpt2) -> Table:
    return Table.of(gpt2.merges, gpt2.vocab)


def symbols(table: Table, text: str) -> list[int]:
    return [table.token_ids[bytes([b])] for b in text.encode("utf-8", "surrogatepass")]


# ---- random merge tables ------------------------------------------------------------------------

@st.composite
def merge_tables(draw) -> Table:
    """A byte-level merge table over 1-4 letters: each merge joins two tokens
    made so far, so pairs repeat (a repeat keeps its first rank) and the same bytes come by two
    routes; half the time the ranks are shuffled, so merges rank before the merges of their parts."""
    letters = [bytes([c]) for c in LETTERS[:draw(st.integers(1, 4))]]
    tokens = list(letters)
    merges = []
    for _ in range(draw(st.integers(0, 40))):
        a, b = draw(st.sampled_from(tokens)), draw(st.sampled_from(tokens))
        merges.append((a, b))
        if a + b not in tokens:
            tokens.append(a + b)
    if draw(st.booleans()):
        merges = draw(st.permutations(merges))
    vocab = {b: bytes([b]) for b in range(256)}
    vocab.update({256 + i: t for i, t in enumerate(tokens[len(letters):])})
    return Table.of(merges, vocab)


@settings(max_examples=400, deadline=None)
@given(table=merge_tables(), length=st.one_of(st.integers(1, 80), st.integers(1, 5_000)),
       seed=st.integers(0, 2**32 - 1), any_token=st.booleans())
def test_random_tables_and_pieces(table, length, seed, any_token):
    # Pieces of letters (what encode passes), or of any token ids (merge takes any symbols).
    rng = random.Random(seed)
    pool = sorted(table.tokens) if any_token else list(LETTERS)
    assert_same_merge(table, [rng.choice(pool) for _ in range(length)])


def test_merges_that_rank_before_their_parts():
    # ("ab", "a") and ("ab", "c") rank before ("a", "b"), which makes their left part; the Python
    # long-piece path cannot take this table, so the quadratic scan is the specification throughout.
    merges = [(b"ab", b"a"), (b"ab", b"c"), (b"a", b"b"), (b"b", b"c"), (b"c", b"a"), (b"ca", b"b")]
    vocab = {b: bytes([b]) for b in range(256)}
    vocab.update({256: b"aba", 257: b"abc", 258: b"ab", 259: b"bc", 260: b"ca", 261: b"cab"})
    table = Table.of(merges, vocab)
    assert not table.ascend
    rng = random.Random(5)
    for length in (2, 5, 64, 65, 500, 5_000):
        assert_same_merge(table, [rng.choice(b"abc") for _ in range(length)])
    # By hand: "abab" -> (ab a)(b), as lowest-rank-first demands, not (ab)(ab).
    assert table.merger.merge(list(b"abab")) == [256, ord("b")]
    tok = Tokenizer(merges, pattern=r"[\s\S]+", vocab=vocab)
    assert tok.encode("abab") == [256, ord("b")] == _educational.encode_ordinary("abab", merges, r"[\s\S]+", vocab)


def test_a_repeated_pair_keeps_its_first_rank():
    # (a, b) at rank 0 and again at rank 2, with a different result id there: "abc" merges (a, b)
    # before (b, c) and makes the id of rank 0.
    merger = merging._piece_merge.PieceMerger([97, 98, 97], [98, 99, 98], [256, 257, 258])
    assert merger.merge([97, 98, 99]) == [256, 99]
    assert merger.merge([98, 99, 97, 98]) == [257, 256]


# ---- GPT-2 on real text and on megabyte pieces --------------------------------------------------

@pytest.mark.parametrize("corpus,docs", [("multi", 60), ("code", 15)])
def test_gpt2_on_every_piece_of_real_documents(gpt2, gpt2_table, corpora, corpus, docs):
    texts = read_jsonl_texts(corpora / corpus, limit=docs)
    pieces = {piece for text in texts for piece in _educational.split(text, gpt2.pattern)}
    assert len(pieces) > 1_000
    merged = 0
    for piece in pieces:
        ids = symbols(gpt2_table, piece)
        merged += len(ids) - len(assert_same_merge(gpt2_table, ids))
    assert merged > 0


@pytest.mark.parametrize("piece", ["-" * 1_000_000,
                                   base64.b64encode(random.Random(3).randbytes(750_000)).decode()],
                         ids=["one letter", "base64"])
def test_gpt2_on_a_megabyte_piece(gpt2, gpt2_table, piece):
    assert len(piece) == 1_000_000
    ids = symbols(gpt2_table, piece)
    out = assert_same_merge(gpt2_table, ids)
    assert gpt2.decode(out) == piece and len(out) < len(ids)


def test_encode_with_and_without_the_compiled_merger(gpt2_files, corpora, monkeypatch):
    texts = read_jsonl_texts(corpora / "multi", limit=120)
    monkeypatch.setenv("TOKENBEAM_PURE_PYTHON", "1")         # not read: the argument decides
    fast = Tokenizer.from_gpt2_files(*gpt2_files)
    pure = Tokenizer.from_gpt2_files(*gpt2_files, implementation=Implementation(compiled=False))
    assert fast._merger is not None and pure._merger is None
    assert pure._text_encoder is None and (fast._text_encoder is None) == (text_encoder.TextEncoder is None)
    assert pure.implementation == Implementation(compiled=False)
    ids = fast.encode_batch(texts)
    assert ids == pure.encode_batch(texts)
    assert [fast.decode(i) for i in ids] == texts


# ---- dispatch, pickling, errors -----------------------------------------------------------------

def test_merge_dispatches_to_the_compiled_merger(gpt2, gpt2_table, monkeypatch):
    calls = []

    class Spy:
        def merge(self, ids):
            calls.append(list(ids))
            return gpt2_table.merge_python(ids)

    tok = pickle.loads(pickle.dumps(gpt2))     # a copy with its own merger
    monkeypatch.setattr(tok, "_merger", Spy())
    monkeypatch.setattr(tok, "_text_encoder", None)   # the per-piece path (test_pcre2_c.py: whole texts)
    assert tok.encode(" dispatched") == gpt2.encode(" dispatched")
    assert calls == [symbols(gpt2_table, " dispatched")]


def test_python_path_without_the_extension_or_for_ids_beyond_31_bits(monkeypatch):
    merges = [(b"a", b"b"), (b"ab", b"c")]
    default = Tokenizer(merges)
    assert default._merger is not None
    monkeypatch.setattr(merging, "_piece_merge", None)          # no compiler: the extension is absent
    absent = Tokenizer(merges)
    assert absent._merger is None                           # built on first use: here, without it
    monkeypatch.undo()
    wide = Tokenizer(merges, vocab={**{b: bytes([b]) for b in range(256)},
                                    2**31: b"ab", 2**31 + 1: b"abc"})
    assert absent._merger is None and wide._merger is None
    assert absent.encode("abcab") == default.encode("abcab") == [257, 256]
    assert wide.encode("abcab") == [2**31 + 1, 2**31]


def test_pickled_tokenizer_keeps_an_equal_merger(gpt2, corpora):
    back = pickle.loads(pickle.dumps(gpt2))
    assert back._merger is not None and back._merger is not gpt2._merger
    texts = read_jsonl_texts(corpora / "code", limit=5)
    assert back.encode_batch(texts) == gpt2.encode_batch(texts)


def test_errors_raise_python_exceptions():
    PieceMerger = merging._piece_merge.PieceMerger
    merger = PieceMerger([97], [98], [256])
    with pytest.raises(TypeError):
        merger.merge([97, "b"])
    with pytest.raises(TypeError):
        merger.merge(None)
    with pytest.raises(OverflowError):
        merger.merge([97, -1])
    with pytest.raises(OverflowError):
        merger.merge([97, 2**31])
    with pytest.raises(ValueError, match="length"):
        PieceMerger([97, 98], [98], [256, 257])
    with pytest.raises(OverflowError):
        PieceMerger([97], [2**40], [256])
    with pytest.raises(TypeError, match="not initialised"):
        PieceMerger.__new__(PieceMerger).merge([97])
    assert merger.merge([]) == [] and merger.merge((97, 98)) == [256]
