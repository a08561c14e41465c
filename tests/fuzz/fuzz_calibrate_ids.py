"""Fuzz target: the calibration counts of a batch's token ids (`_native.calibrate_ids`, one pass
without the GIL, and `_native.calibrate_flat`, the same over one flat buffer) must equal those of its numpy specification (`stats.calibrate_ids` over `_id_runs`),
with and without the id counts (int64, or uint32 with uint32 cells: a thread's tallies), for ids inside and outside the vocabulary, empty records, folded id
classes (from a table or computed from their fold) and cells already counted; an id outside the vocabulary is a ValueError from both (the compiled pass
raising before it counts anything). Run from the worktree:

    mkdir -p /tmp/fuzz-calibrate_ids && python3 tests/fuzz/fuzz_calibrate_ids.py -max_total_time=300 \
        /tmp/fuzz-calibrate_ids

(new corpus entries go to the first folder, crashing inputs to ./crash-*)."""
import sys
from array import array
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    import numpy as np
    from bpe_ops import stats
    from bpe_ops.flat_ids import FlatIds

VOCAB_SIZES = (1, 2, 256, 300, 4096, 4097, 5000)


def check(data: bytes) -> None:
    if len(data) < 2:
        return
    vocab_size = VOCAB_SIZES[data[0] % len(VOCAB_SIZES)]
    chunk = 1 + data[1] % 4
    # Records: each byte pair after the header is an id (little-endian, 0..65535: past every vocabulary
    # above); a pair 0xffff ends a record.
    id_lists, record = [], []
    body = data[2:]
    for k in range(0, len(body) - 1, 2):
        value = body[k] | body[k + 1] << 8
        if value == 0xFFFF:
            id_lists.append(record)
            record = []
        else:
            record.append(value % (vocab_size + 3))       # a few ids just past the vocabulary
    id_lists.append(record)
    mask = np.zeros(vocab_size, dtype=np.uint8)
    mask[: data[0] % 300] = 1
    # The class table, the same classes from their fold (what the pipelines hand the compiled pass),
    # and a fold of the input's choosing (classes below 2F per group row).
    fold = 1 << (data[1] >> 2) % 12
    for table, classes in ((stats.id_class_table(vocab_size), stats.id_class_count(vocab_size)),
                           (stats.ID_CLASS_FOLD, stats.id_class_count(vocab_size)),
                           (fold, min(vocab_size, 2 * fold))):
        check_classes(id_lists, vocab_size, chunk, mask, table, classes)


def check_classes(id_lists, vocab_size, chunk, mask, table, classes) -> None:
    rows = np.array([stats.record_group(f"r{k}") * classes for k in range(len(id_lists))], dtype=np.int32)
    for with_counts in (False, True, "uint32"):
        results = []
        # uint32: a thread's tallies (counts and cells uint32, nothing tracked).
        width = np.uint32 if with_counts == "uint32" else np.int64
        for variant in ("arrays", "flat", "numpy"):
            raw, cells = np.zeros(len(id_lists), np.int64), np.zeros(stats.REPLICATE_GROUPS * classes, width)
            cells[::5] = 1
            counts = np.arange(vocab_size, dtype=width)
            if variant == "arrays":
                count, ids = stats._CALIBRATE_IDS, [array("I", x) for x in id_lists]
            elif variant == "flat":         # the same records as one buffer and their ends
                flat = FlatIds.of(id_lists)
                count, ids = partial(stats._CALIBRATE_FLAT, flat.ids), flat.ends
            else:
                count, ids = stats.calibrate_ids, stats._id_runs(id_lists, [len(x) for x in id_lists], chunk=chunk)
            try:
                new = count(ids, rows, mask, table, raw, cells, *([counts] if with_counts else []))
            except ValueError as exc:
                # The compiled passes check every id first and count nothing (the specification may
                # have counted the runs before the bad one).
                if variant != "numpy" and (raw.any() or cells.sum() != len(cells[::5])
                                           or counts.tolist() != list(range(vocab_size))):
                    raise AssertionError(f"the compiled pass ({variant}) counted before raising on {id_lists!r}")
                results.append(str(exc))
            else:
                results.append((raw.tolist(), cells.tolist(), sorted(np.frombuffer(new, np.int64).tolist()),
                                counts.tolist() if with_counts else None))
        if not results[0] == results[1] == results[2]:
            raise AssertionError(f"compiled (arrays, flat) and numpy calibrations differ (counts: {with_counts}, "
                                 f"classes: {table if isinstance(table, int) else 'table'}) on {id_lists!r}")


if __name__ == "__main__":
    if stats._CALIBRATE_IDS is None or stats._CALIBRATE_FLAT is None:
        sys.exit("fuzz_calibrate_ids: bpe_ops._native is not built")
    harness.fuzz(check)
