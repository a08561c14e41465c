"""Packed count tables (bpe_ops/count_table.py, the specification) and their compiled twins
(`_native.CountTable`, `_pcre2.PieceCounter.drain_packed`): the same sums, the same sorted columns
and the same Arrow arrays, on counts of real multilingual text; malformed tables are refused whole.
`_native` needs no PCRE2: it works where libpcre2-8 is missing."""
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops import count_table, pretokenize
from bpe_ops.count_table import CountTable, pack_counts, unpack_counts
from bpe_ops.implementation import Implementation
from tests.conftest import read_jsonl_texts

try:
    from bpe_ops import _native
except ImportError:
    _native = None
pcre2 = pretokenize._pcre2_module()
ROOT = Path(__file__).resolve().parents[2]



needs_compiled = pytest.mark.usefixtures("native")
counts_strategy = st.dictionaries(st.binary(max_size=12), st.integers(1, 2**40), max_size=40)


@pytest.fixture(scope="module")
def multi_counts(corpora) -> dict[bytes, int]:
    return dict(pretokenize.count_pretokens(read_jsonl_texts(corpora / "multi", limit=200), "gpt4"))


def implementations():
    tables = [CountTable]
    if _native is not None:
        tables.append(_native.CountTable)
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
    spec, compiled = CountTable(), _native.CountTable()
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
    spec, compiled = CountTable(), _native.CountTable()
    other_spec, other_compiled = CountTable(), _native.CountTable()
    for k, part in enumerate(parts):
        for table in ((spec, compiled) if k % 2 else (other_spec, other_compiled)):
            table.add_packed(pack_counts(part))
    spec.absorb(other_spec)
    compiled.absorb(other_compiled)
    assert len(other_compiled) == len(other_spec) == 0
    assert compiled.columns(min_count) == spec.columns(min_count)
    assert unpack_counts(compiled.packed()) == spec.counts


@pytest.mark.slow
@pytest.mark.parametrize("table_type", implementations())
def test_count_values_are_every_count_once(table_type, multi_counts):
    from array import array
    table = table_type(pack_counts(multi_counts))
    table.add_packed(pack_counts({key: 1 for key in list(multi_counts)[:50]}))
    expected = [n + (key in list(multi_counts)[:50]) for key, n in multi_counts.items()]
    assert sorted(array("q", table.count_values())) == sorted(expected)
    assert table_type().count_values() == b""


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
    if not pure and pcre2 is None:
        pytest.skip("bpe_ops._pcre2 not built")
    implementation = Implementation(engine="regex" if pure else "auto")
    # A lone surrogate sends its text down the `regex` path even with the compiled counter.
    texts = read_jsonl_texts(corpora / "multi", limit=60) + ["lone \ud800 surrogate text", "plain words"]
    one = pretokenize.PretokenCounter("gpt4", implementation=implementation)
    other = pretokenize.PretokenCounter("gpt4", implementation=implementation)
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
    monkeypatch.setenv("TOKENBEAM_PURE_PYTHON", "1")         # not read: the argument decides
    pure = count_table.new_count_table(pack_counts({b"a": 1}), implementation=Implementation(compiled=False))
    assert type(pure) is CountTable and pure.counts == {b"a": 1}
    expected = CountTable if _native is None else _native.CountTable
    table = count_table.new_count_table(pack_counts({b"a": 1}))
    assert type(table) is expected and unpack_counts(table.packed()) == {b"a": 1}


def test_native_crc32_is_zlibs(native):
    for data in (b"", b"abc", bytes(range(256)), "été 😀".encode()):
        assert native.crc32(data) == zlib.crc32(data)
    assert native.crc32(bytearray(b"abc")) == 0x352441C2


def test_the_native_helpers_work_without_pcre2(native):
    """What needs no PCRE2 keeps working where bpe_ops._pcre2 cannot load (libpcre2-8 missing): the
    compiled count table, the C count sums, UTF-8 lengths. Run in a process where the import fails."""
    script = "\n".join([
        "import sys",
        "sys.modules['bpe_ops._pcre2'] = None          # any import of it raises ImportError",
        "from bpe_ops import count_table, pretokenize, stats",
        "assert pretokenize._pcre2_module() is None and pretokenize._native is not None",
        "table = count_table.new_count_table(count_table.pack_counts({b'ab': 2}))",
        "table.add_packed(count_table.pack_counts({b'ab': 1, b'c': 4}))",
        "assert type(table).__module__ == 'bpe_ops._native', type(table)",
        "assert count_table.unpack_counts(table.packed()) == {b'ab': 3, b'c': 4}",
        "counts = pretokenize.count_pretokens(['it is 12 o\\'clock', 'it is'], 'gpt4')",
        "assert counts[b' is'] == 2, counts",
        "assert pretokenize.regex_engine('gpt4') == 'regex'",
        "print('ok')",
    ])
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
