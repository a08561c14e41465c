"""Fuzz target: a token_ids page body (`_native.list_page`, compiled) must equal its Python
specification (`schemas.token_pages.page_body_spec`) for any records and any range of them, both
refusing ends that do not rise within the ids with a ValueError; and a token Parquet file written by
`TokenFileWriter` from the same records (in row groups of the input's choosing) must read back in
Arrow as those records. Run from the worktree:

    mkdir -p /tmp/fuzz-token_pages && python3 tests/fuzz/fuzz_token_pages.py -max_total_time=600 \
        /tmp/fuzz-token_pages tests/fuzz/corpus/token_pages

(new corpus entries go to the first folder, crashing inputs to ./crash-*; seeds: make_seeds.py).

An input: a byte picking the row group size (1 + byte % 8 records), one the range's first record,
one its last, then records: each a length byte (0xff: the next byte times 40, for long records;
0xfe: the last `ends` entry made to fall back or pass the ids, which both must refuse) and that many ids of two bytes each,
repeated cyclically when the input runs out."""
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from bpe_ops._native import list_page
    from bpe_ops.flat_ids import FlatIds
    from schemas.tables import STAT_COLUMNS, tokens_schema
    from schemas.token_pages import page_body_spec
    from pipelines.steps.token_file import TokenFileWriter

SCHEMA = tokens_schema(1 << 17)       # list<uint32>


def records_of(data: bytes):
    """The input's records (lists of ids) and whether it asks for a falling end."""
    body, records, falling, at = data[3:], [], False, 0
    words = np.frombuffer(body[: len(body) // 2 * 2], "<u2").astype(np.uint32) if len(body) > 1 else np.zeros(1, np.uint32)
    while at < len(body) and len(records) < 64:
        n = body[at]
        at += 1
        if n == 0xFE:
            falling = True
            continue
        if n == 0xFF and at < len(body):
            n = body[at] * 40
            at += 1
        start = (at // 2) % len(words)
        records.append(np.resize(np.roll(words, -start), n).tolist() if n else [])
    return records, falling


class _Kept(io.BytesIO):
    """A file in memory that the writer's close leaves readable."""

    def close(self) -> None:
        pass


def check(data: bytes) -> None:
    if len(data) < 3:
        return
    records, falling = records_of(data)
    batch = FlatIds.of(records)
    ids, ends = batch.ids, batch.ends.copy()
    first = data[1] % (len(records) + 1)
    last = first + data[2] % (len(records) - first + 1)
    if falling and len(ends) > 1:
        ends[-1] = ends[0] - 1 if ends[0] > 0 else len(ids) + 1     # falls back, or passes the ids held
        for build in (list_page, page_body_spec):
            try:
                build(ids, ends, 0, len(ends))
            except ValueError:
                continue
            raise AssertionError(f"{build.__name__} took ends that do not rise within the ids: {ends.tolist()}")
        return
    compiled, spec = list_page(ids, ends, first, last), page_body_spec(ids, ends, first, last)
    if compiled != spec:
        raise AssertionError(f"list_page and its specification differ on records {records!r} [{first}:{last}]")
    # The whole file, row group by row group, read back by Arrow.
    size = 1 + data[0] % 8
    out = _Kept()
    with TokenFileWriter(out, SCHEMA) as writer:
        for g in range(0, max(1, len(records)), size):
            part = records[g:g + size]
            columns = {"id": [f"r{g + k}" for k in range(len(part))], "token_ids": [[]] * len(part),
                       **{c: [len(r) for r in part] for c in STAT_COLUMNS}}
            writer.write_row_group(pa.table(columns, schema=SCHEMA), [FlatIds.of(part)])
    back = pq.read_table(io.BytesIO(out.getvalue())).column("token_ids").to_pylist()
    if back != records:
        raise AssertionError(f"the file's token_ids read back as {back!r}, not {records!r}")


if __name__ == "__main__":
    harness.fuzz(check)
