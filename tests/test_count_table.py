"""Packed count tables (bpe_ops/count_table.py, the specification) and their compiled twins
(`_pcre2.CountTable`, `PieceCounter.drain_packed`): the same sums, the same sorted columns and the
same Arrow arrays, on counts of real multilingual text; malformed tables are refused whole."""
import os
import pickle
import zlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops import count_table, pretokenize
from bpe_ops.count_table import CountTable, pack_counts, unpack_counts
from tests.conftest import read_jsonl_texts

pcre2 = pretokenize._pcre2_module()
needs_compiled = pytest.mark.skipif(pcre2 is None and os.environ.get("TOKENBEAM_REQUIRE_PCRE2") != "1",
                                    reason="bpe_ops._pcre2 not built or libpcre2-8 missing (optional accelerator)")
counts_strategy = st.dictionaries(st.binary(max_size=12), st.integers(1, 2**40), max_size=40)


@pytest.fixture(scope="module")
def multi_counts(corpora) -> dict[bytes, int]:
    return dict(pretokenize.count_pretokens(read_jsonl_texts(corpora / "multi", limit=200), "gpt4"))


def implementations():
    tables = [CountTable]
    if pcre2 is not None:
        tables.append(pcre2.CountTable)
    return tables


def test_a_packed_table_holds_its_counts_and_concatenated_tables_add_up():
    a, b = {b"the": 3, b" cat": 1, b"": 2}, {b"the": 4, b"\xff\x00": 9}
    assert unpack_counts(pack_counts(a)) == a
    assert unpack_counts(pack_counts(a) + pack_counts(b)) == {b"the": 7, b" cat": 1, b"": 2, b"\xff\x00": 9}
    # uint32 length, key, int64 count, both little-endian
    assert pack_counts({b"ab": 258}) == b"\x02\x00\x00\x00ab\x02\x01\x00\x00\x00\x00\x00\x00"


@pytest.mark.parametrize("table_type", implementations())
@pytest.mark.parametrize("packed", [b"\x01", b"\x05\x00\x00\x00ab\x01\x00\x00\x00\x00\x00\x00\x00",
                                    pack_counts({b"a": 1})[:-1]])
def test_a_malformed_table_is_refused_and_nothing_of_it_is_added(table_type, packed):
    table = table_type(pack_counts({b"x": 1}))
    with pytest.raises(ValueError, match="not a packed count table"):
        table.add_packed(pack_counts({b"y": 5}) + packed)
    assert unpack_counts(table.packed()) == {b"x": 1}


@needs_compiled
def test_compiled_table_equals_the_specification_on_real_counts(multi_counts):
    items = list(multi_counts.items())
    parts = [dict(items[k::3]) for k in range(3)] + [dict(items[:500])]      # overlapping keys add up
    spec, compiled = CountTable(), pcre2.CountTable()
    for part in parts:
        spec.add_packed(pack_counts(part))
        compiled.add_packed(pack_counts(part))
    assert len(compiled) == len(spec) == len(multi_counts)
    assert unpack_counts(compiled.packed()) == spec.counts
    for min_count in (1, 2, 10):
        for large in (False, True):
            assert compiled.columns(min_count, large) == spec.columns(min_count, large)


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(counts_strategy, max_size=4), st.integers(1, 3))
def test_compiled_table_equals_the_specification_on_random_tables(parts, min_count):
    spec, compiled = CountTable(), pcre2.CountTable()
    other_spec, other_compiled = CountTable(), pcre2.CountTable()
    for k, part in enumerate(parts):
        for table in ((spec, compiled) if k % 2 else (other_spec, other_compiled)):
            table.add_packed(pack_counts(part))
    spec.absorb(other_spec)
    compiled.absorb(other_compiled)
    assert len(other_compiled) == len(other_spec) == 0
    assert compiled.columns(min_count) == spec.columns(min_count)
    assert unpack_counts(compiled.packed()) == spec.counts


@pytest.mark.parametrize("table_type", implementations())
@pytest.mark.parametrize("large", [False, True])
def test_columns_wrap_as_arrow_arrays_in_byte_order(table_type, large, multi_counts):
    table = table_type(pack_counts(multi_counts))
    rows, offsets, data, counts = table.columns(2, large)
    keys = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), rows,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    values = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(counts)])
    keys.validate(full=True)
    expected = sorted(k for k, n in multi_counts.items() if n >= 2)
    assert keys.to_pylist() == expected
    assert values.to_pylist() == [multi_counts[k] for k in expected]
    assert 0 < rows < len(multi_counts)
    assert table.columns(10**9, large) == (0, bytes(8 if large else 4), b"", b"")


@pytest.mark.parametrize("table_type", implementations())
def test_a_table_pickles_as_its_counts(table_type, multi_counts):
    table = table_type(pack_counts(multi_counts))
    copy = pickle.loads(pickle.dumps(table))
    assert type(copy) is table_type and unpack_counts(copy.packed()) == multi_counts
    with pytest.raises(ValueError):
        table.absorb(table)


@pytest.mark.parametrize("pure", [False, True])
def test_drain_packed_equals_drain_buckets_on_both_counting_paths(pure, corpora, monkeypatch):
    if pure:
        monkeypatch.setenv(pretokenize.ENGINE_VARIABLE, "regex")
    elif pcre2 is None:
        pytest.skip("bpe_ops._pcre2 not built")
    # A lone surrogate sends its text down the `regex` path even with the compiled counter.
    texts = read_jsonl_texts(corpora / "multi", limit=60) + ["lone \ud800 surrogate text", "plain words"]
    one, other = pretokenize.PretokenCounter("gpt4"), pretokenize.PretokenCounter("gpt4")
    assert (one._fast is None) == pure
    for text in texts:
        one.add(text)
        other.add(text)
    pieces = one.pieces
    tables = one.drain_packed(16)
    buckets = other.drain_buckets(16)
    assert [unpack_counts(t) for t in tables] == buckets
    assert pieces == sum(sum(b.values()) for b in buckets)
    assert all(zlib.crc32(key) % 16 == k for k, bucket in enumerate(buckets) for key in bucket)
    assert one.pieces == 0 and len(one) == 0 and one.drain_packed(16) == [b""] * 16


def test_new_count_table_is_the_specification_when_pure_python_is_asked(monkeypatch):
    monkeypatch.setenv("TOKENBEAM_PURE_PYTHON", "1")
    assert type(count_table.new_count_table()) is CountTable
    monkeypatch.delenv("TOKENBEAM_PURE_PYTHON")
    expected = CountTable if pcre2 is None else pcre2.CountTable
    assert type(count_table.new_count_table(pack_counts({b"a": 1}))) is expected
