"""schemas.token_pages: a token_ids page body (the compiled `list_page` against its Python
specification, and both against what Arrow's reader makes of them), page cuts, and the footer
pointed at the chunks."""
import io
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas import token_pages
from schemas.thrift_compact import Struct
from schemas.token_pages import PAGE_IDS, page_body_spec, page_cuts, write_chunk

needs_native = pytest.mark.skipif(token_pages._list_page is None, reason="bpe_ops._native not built (optional)")


def batch(rng: random.Random, records: int, vocab: int = 1 << 32):
    counts = [rng.choice([0, 0, 1, 2, rng.randint(0, 50), rng.randint(0, 5000)]) for _ in range(records)]
    ends = np.cumsum(np.array(counts, dtype=np.int64)) if records else np.zeros(0, np.int64)
    ids = np.array([rng.randrange(vocab) for _ in range(int(ends[-1]) if records else 0)], dtype=np.uint32)
    return ids, ends, counts


def test_the_known_page():
    # Records [5, 6], [], [7], [8]: repetition levels 0 1 0 0 0, definition levels 2 2 0 2 2.
    body = page_body_spec(np.array([5, 6, 7, 8], np.uint32), np.array([2, 2, 3, 4]), 0, 4)
    assert body[:10] == bytes([6, 0, 0, 0, 0x02, 0, 0x02, 1, 0x06, 0])
    assert body[10:20] == bytes([6, 0, 0, 0, 0x04, 2, 0x02, 0, 0x04, 2])
    assert np.frombuffer(body[20:], "<u4").tolist() == [5, 6, 7, 8]
    # A record of 200 ids: one run of 199 ones, its length a two-byte varint (199 << 1 = 398).
    body = page_body_spec(np.arange(200, dtype=np.uint32), np.array([200]), 0, 1)
    assert body[:9] == bytes([5, 0, 0, 0, 0x02, 0, 0x8E, 0x03, 1])


@needs_native
def test_compiled_pages_equal_the_specification():
    rng = random.Random(7)
    for _ in range(400):
        ids, ends, _ = batch(rng, rng.randint(0, 30))
        first = rng.randint(0, len(ends))
        last = rng.randint(first, len(ends))
        assert token_pages._list_page(ids, ends, first, last) == page_body_spec(ids, ends, first, last)


@needs_native
@pytest.mark.parametrize("ends, first, last", [([2, 1], 0, 2), ([5], 0, 1), ([1], 1, 0), ([1], 0, 2), ([1], -1, 1),
                                               ([-1, 1], 1, 2), ([3, 3], 1, 2)])
def test_compiled_pages_refuse_ends_and_ranges_outside_the_ids(ends, first, last):
    with pytest.raises(ValueError):
        token_pages._list_page(np.arange(2, dtype=np.uint32), np.array(ends, np.int64), first, last)


def test_page_cuts():
    assert page_cuts(np.array([10, PAGE_IDS, PAGE_IDS + 1])) == [2, 3]
    assert page_cuts(np.array([3 * PAGE_IDS])) == [1]          # a record is never cut
    assert page_cuts(np.array([0, 0, 0])) == [3]


@pytest.mark.parametrize("seed", range(4))
def test_a_chunk_reads_back_in_arrow_as_the_records(seed):
    """A one-column file made of a chunk and a footer pointed at it, read by Arrow: the records."""
    rng = random.Random(seed)
    ids, ends, counts = batch(rng, rng.randint(1, 400), vocab=1 << 20)
    records = np.split(ids, ends[:-1])
    schema = pa.schema([pa.field("token_ids", pa.list_(pa.uint32()), nullable=False)])
    placeholder = io.BytesIO()
    pq.write_table(pa.table({"token_ids": pa.array([[]] * len(counts), schema.field(0).type)}, schema=schema),
                   placeholder, compression="zstd", use_dictionary=False, write_statistics=False)
    data = placeholder.getvalue()
    footer = data[-8 - int.from_bytes(data[-8:-4], "little"):-8]
    out = io.BytesIO()
    out.write(data[:-8 - len(footer)])
    chunk = write_chunk(out, ids, np.array(counts), pa.Codec("zstd") if seed % 2 else None)
    if seed % 2 == 0:           # uncompressed pages, and the footer saying so
        meta = Struct.from_bytes(footer)[0]
        meta.get(4)[1][0].get(1)[1][0].get(3).set(4, 5, 0)
        footer = meta.to_bytes()
    new = token_pages.point_footer_at(footer, 0, [chunk])
    out.write(new + len(new).to_bytes(4, "little") + b"PAR1")
    back = pq.read_table(io.BytesIO(out.getvalue())).column("token_ids").to_pylist()
    assert back == [r.tolist() for r in records]
    column = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata.row_group(0).column(0)
    assert column.num_values == len(ids) + counts.count(0)
    assert column.data_page_offset == chunk.offset and column.total_compressed_size == chunk.compressed


def test_a_footer_of_other_row_groups_is_refused():
    out = io.BytesIO()
    pq.write_table(pa.table({"token_ids": pa.array([[]] * 3, pa.list_(pa.uint32()))}), out)
    data = out.getvalue()
    footer = data[-8 - int.from_bytes(data[-8:-4], "little"):-8]
    chunk = token_pages.ChunkWritten(4, 1, 10, 10, 1, rows=2, empty=1, ids=1)
    with pytest.raises(ValueError, match="3 rows"):
        token_pages.point_footer_at(footer, 0, [chunk])
    with pytest.raises(ValueError, match="row groups"):
        token_pages.point_footer_at(footer, 0, [chunk, chunk])
