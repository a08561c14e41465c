"""A shard's token Parquet file, written row group by row group: Arrow's ParquetWriter writes every
column but token_ids (a placeholder of empty lists in its place), this writer each row group's
token_ids chunk right after Arrow's (`schemas.token_pages`), and on close the footer Arrow wrote is
pointed at those chunks. Readers see an ordinary Parquet file of the token schema.
"""
from __future__ import annotations

from typing import BinaryIO, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bpe_ops.flat_ids import FlatIds
from schemas.token_pages import ChunkWritten, point_footer_at, write_chunk

WRITE_BUFFER_BYTES = 1 << 20    # a Parquet file's bytes handed to its (Python) file at a time
TOKEN_COLUMN = "token_ids"
CODEC = "zstd"
MAGIC = b"PAR1"


def placeholder_ids(rows: int, list_type: pa.DataType, pool=None) -> pa.ListArray:
    """`rows` empty lists of `list_type`: what Arrow writes in the token_ids column's place."""
    return pa.ListArray.from_arrays(pa.array(np.zeros(rows + 1, dtype=np.int32), memory_pool=pool),
                                    pa.array([], list_type.value_type), type=list_type, pool=pool)


class _FooterCatch:
    """The file under Arrow's buffered stream: bytes go straight to `f`, except those written while
    `catching` (the footer Arrow writes on close), which are kept in `caught`."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.catching = False
        self.caught = bytearray()

    def write(self, data) -> int:
        if self.catching:
            self.caught += data
            return len(data)
        return self.f.write(data)

    def tell(self) -> int:
        return self.f.tell() + len(self.caught)

    def flush(self) -> None:
        self.f.flush()

    @property
    def closed(self) -> bool:
        return self.f.closed

    def close(self) -> None:
        self.f.close()


class TokenFileWriter:
    """Writes one token Parquet file to `f` (binary, open for writing; closed with the writer).

    Args:
        f: the file.
        schema: the token schema (`schemas.tables.tokens_schema`).
        pool: the Arrow memory pool for Arrow's writer and the placeholder columns.
    """

    def __init__(self, f: BinaryIO, schema: pa.Schema, pool=None):
        self.schema = schema
        self.pool = pool
        self.list_type = schema.field(TOKEN_COLUMN).type
        # The chunk's leaf column: the columns before token_ids are each one leaf (id is first).
        before = schema.names.index(TOKEN_COLUMN)
        if any(pa.types.is_nested(schema.field(i).type) for i in range(before)):
            raise ValueError("token_ids must come after plain columns only")
        self.column = before
        self.catch = _FooterCatch(f)
        self.sink = pa.output_stream(self.catch, buffer_size=WRITE_BUFFER_BYTES)
        self.arrow = pq.ParquetWriter(self.sink, schema, compression=CODEC, use_dictionary=False,
                                      write_statistics=False, memory_pool=pool)
        self.codec = pa.Codec(CODEC)
        self.chunks: list[ChunkWritten] = []
        self.closed = False

    def write_row_group(self, table: pa.Table, batches: Sequence[FlatIds]) -> None:
        """One row group: `table`'s columns but token_ids (which Arrow writes as empty lists: ids
        the table holds there are dropped), and the token ids of its records, `batches` in order."""
        ids = FlatIds.joined(list(batches))
        if len(ids) != table.num_rows:
            raise ValueError(f"{table.num_rows} rows given the token ids of {len(ids)} records")
        if self.list_type.value_type == pa.uint16() and len(ids.ids) and int(ids.ids.max()) > 0xFFFF:
            raise OverflowError(f"token id {int(ids.ids.max())} in a list<uint16> column")
        index = table.schema.get_field_index(TOKEN_COLUMN)
        if any(len(chunk.values) for chunk in table.column(index).chunks):     # not a placeholder already
            table = table.set_column(index, self.schema.field(TOKEN_COLUMN),
                                     placeholder_ids(table.num_rows, self.list_type, self.pool))
        self.arrow.write_table(table, row_group_size=max(1, table.num_rows))
        self.chunks.append(write_chunk(self.sink, ids.ids, ids.counts, self.codec))

    def add_key_value_metadata(self, metadata: dict[str, str]) -> None:
        self.arrow.add_key_value_metadata(metadata)

    def close(self) -> None:
        """Finish the file: Arrow's footer, pointed at the token_ids chunks, and the file closed."""
        if self.closed:
            return
        self.closed = True
        try:
            self.sink.flush()
            self.catch.catching = True
            self.arrow.close()
            self.sink.flush()
            tail = bytes(self.catch.caught)
            length = int.from_bytes(tail[-8:-4], "little")
            if tail[-4:] != MAGIC or length + 8 != len(tail):
                raise RuntimeError(f"Arrow's footer came as {len(tail)} bytes not ending in its length and {MAGIC!r}")
            footer = point_footer_at(tail[:-8], self.column, self.chunks)
            self.catch.catching = False
            self.sink.write(footer + len(footer).to_bytes(4, "little") + MAGIC)
        finally:
            self.sink.close()

    def abandon(self) -> None:
        """Close without finishing (the file is to be dropped)."""
        if not self.closed:
            self.closed = True
            self.catch.catching = True      # no footer: what was written cannot pass for a whole file
            try:
                self.arrow.close()
            finally:
                self.sink.close()

    def __enter__(self) -> "TokenFileWriter":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self.abandon()
