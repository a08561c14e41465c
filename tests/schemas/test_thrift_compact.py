"""schemas.thrift_compact: the compact protocol read and written back byte for byte (Arrow's own
footers are the oracle), known encodings, and bytes that are not a struct refused."""
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas.thrift_compact import (BINARY, BOOL, I16, I32, I64, LIST, STRUCT, Struct, ThriftError)


def arrow_footer(table: pa.Table, **options) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, **options)
    data = out.getvalue()
    n = int.from_bytes(data[-8:-4], "little")
    return data[-8 - n:-8]


@pytest.mark.parametrize("options", [{}, {"compression": "zstd", "use_dictionary": False, "write_statistics": False},
                                     {"row_group_size": 3, "write_page_index": True}])
def test_arrow_footers_read_and_write_back_byte_for_byte(options):
    table = pa.table({"id": ["a", "b", "c", "d", "e"], "ids": [[1, 2], [], [3], [4, 5, 6], [7]],
                      "x": pa.array([1.5, -2.0, None, 4.0, 1e300]), "flag": [True, False, None, True, True],
                      "ts": pa.array([0, -1, 2 ** 40, 5, 6], pa.timestamp("us", tz="UTC"))})
    footer = arrow_footer(table, **options)
    meta, end = Struct.from_bytes(footer)
    assert end == len(footer)
    assert meta.to_bytes() == footer
    assert meta.get(3) == 5                      # FileMetaData.num_rows
    assert meta.get(6).startswith(b"parquet-cpp-arrow")


def test_known_encodings():
    # Field deltas up to 15 share the type's byte; a jump past 15 writes the id as a zigzag i16.
    assert Struct([[1, I32, -1], [17, I64, 300]]).to_bytes().hex() == "150106" + "22d804" + "00"
    # Bools are the field's type nibble (1 true, 2 false); binaries their length first.
    assert Struct([[1, BOOL, True], [2, BOOL, False], [3, BINARY, b"ab"]]).to_bytes().hex() == "11121802616200"
    # A list of 15 or more elements writes its size apart.
    big = Struct([[1, LIST, (I16, list(range(15)))]]).to_bytes()
    assert big[:3].hex() == "19f40f" and Struct.from_bytes(big)[0].get(1) == (I16, list(range(15)))


def test_set_adds_in_field_order_and_remove_drops():
    s = Struct([[1, I32, 1], [5, I32, 5]])
    s.set(3, I32, 3)
    s.set(5, I64, 50)
    s.remove(1)
    assert s == [[3, I32, 3], [5, I64, 50]]
    assert Struct.from_bytes(s.to_bytes())[0] == s


@pytest.mark.parametrize("data", [b"", b"\x15", b"\x18\x05ab", b"\x19\xf5", b"\x1b\x00", b"\x15\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"])
def test_bytes_that_are_not_a_struct_are_refused(data):
    with pytest.raises(ThriftError):
        Struct.from_bytes(data)


def test_structs_nested_past_the_limit_are_refused():
    with pytest.raises(ThriftError, match="deep"):
        Struct.from_bytes(b"\x1c" * 100 + b"\x00" * 101)
    deep = Struct([[1, I32, 7]])
    for _ in range(10):
        deep = Struct([[1, STRUCT, deep]])
    assert Struct.from_bytes(deep.to_bytes())[0] == deep
