"""pipelines/core/line_chart.py: a valid PNG (chunks, CRCs, rows), the line where the data are, ticks
at round values, every label character drawn, the same bytes for the same data; Pillow reads the
same pixels."""
import struct
import zlib

import pytest

from pipelines.core.line_chart import GLYPHS, GRID, INK, LINE, PALETTE, WHITE, Canvas, line_chart_png, round_ticks
from pipelines.train import compression_curve


def decode(png: bytes) -> tuple[int, int, bytes, list[bytes]]:
    """Width, height, palette and rows of an 8-bit palette PNG with filter 0, every CRC checked."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, []
    while at < len(png):
        (length,) = struct.unpack(">I", png[at:at + 4])
        kind, data = png[at + 4:at + 8], png[at + 8:at + 8 + length]
        assert struct.unpack(">I", png[at + 8 + length:at + 12 + length])[0] == zlib.crc32(kind + data)
        chunks.append((kind, data))
        at += 12 + length
    assert [k for k, _ in chunks] == [b"IHDR", b"PLTE", b"IDAT", b"IEND"]
    width, height, depth, colour_type, *_ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour_type) == (8, 3)
    raw = zlib.decompress(chunks[2][1])
    assert len(raw) == height * (width + 1)
    rows = [raw[y * (width + 1):(y + 1) * (width + 1)] for y in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, chunks[1][1], [row[1:] for row in rows]


def test_a_diagonal_is_drawn_from_corner_to_corner_of_the_plot():
    width, height, palette, rows = decode(line_chart_png([0, 1], [0, 1], "t", "x", "y", width=300, height=200))
    assert (width, height, palette) == (300, 200, PALETTE)
    line = {(x, y) for y, row in enumerate(rows) for x, v in enumerate(row) if v == LINE}
    xs, ys = [x for x, _ in line], [y for _, y in line]
    # The line goes up to the right: its leftmost pixels are its lowest.
    assert max(y for x, y in line if x == min(xs)) >= max(ys) - 2
    assert min(y for x, y in line if x == max(xs)) <= min(ys) + 2
    assert {v for row in rows for v in row} == {WHITE, INK, GRID, LINE}


def test_the_curve_of_a_training_run_is_the_same_bytes_each_time():
    curve = compression_curve(1000, 1000, [100, 50, 25, 10, 5, 1], 256)
    xs, ys = [c["vocab_size"] for c in curve], [c["tokens_per_byte"] for c in curve]
    first = line_chart_png(xs, ys, "Compression curve", "vocabulary size", "tokens per byte (training counts)")
    assert first == line_chart_png(xs, ys, "Compression curve", "vocabulary size", "tokens per byte (training counts)")
    width, height, _, rows = decode(first)
    assert (width, height) == (770, 495)


@pytest.mark.parametrize("xs, ys", [([], []), ([5], [0.5]), ([1, 2, 3], [2.0, 2.0, 2.0])])
def test_no_points_one_point_or_a_flat_line_still_make_a_picture(xs, ys):
    decode(line_chart_png(xs, ys, "title"))


@pytest.mark.parametrize("low, high, most, expected", [
    (0.2, 1.04, 10, ([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], 1)),
    (-1400, 34000, 8, ([0, 5000, 10000, 15000, 20000, 25000, 30000], 0)),
    (0, 1, 8, ([0.0, 0.2, 0.4, 0.6, 0.8, 1.0], 1)),
])
def test_ticks_are_round_values_inside_the_range(low, high, most, expected):
    ticks, decimals = round_ticks(low, high, most)
    assert ([round(t, 9) for t in ticks], decimals) == expected


def test_every_label_character_has_a_glyph():
    for text in ("Compression curve", "vocabulary size", "tokens per byte (training counts)", "0123456789.-"):
        assert set(text) <= set(GLYPHS)
    assert all(len(rows) == 7 and all(r < 32 for r in rows) for rows in GLYPHS.values())


def test_text_turned_a_quarter_reads_bottom_up():
    upright, turned = Canvas(40, 40), Canvas(40, 40)
    upright.text(0, 0, "1")
    turned.text(0, 39, "1", upright=False)
    ink = lambda c: {(x, y) for y, row in enumerate(c.rows) for x, v in enumerate(row) if v == INK}   # noqa: E731
    # Turning a quarter left maps (x, y) to (y, 39 - x).
    assert ink(turned) == {(y, 39 - x) for x, y in ink(upright)}


def test_pillow_reads_the_same_pixels(tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    png = line_chart_png([1, 2, 3, 10], [0.9, 0.5, 0.4, 0.3], "Compression curve", "vocabulary size", "tokens")
    (tmp_path / "c.png").write_bytes(png)
    image = image_module.open(tmp_path / "c.png")
    width, height, _, rows = decode(png)
    assert image.size == (width, height) and image.mode == "P"
    assert image.tobytes() == b"".join(rows)
