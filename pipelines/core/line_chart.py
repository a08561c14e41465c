"""A line chart as PNG bytes, drawn by hand: axes, a grid at round values, tick labels in a 5x7
bitmap font, one line. No plotting library: importing matplotlib cost `tokenbeam train` about a
CPU-second for one small picture, and a line chart needs only pixels and zlib.

    png = line_chart_png(xs, ys, title="Compression curve", x_label="vocabulary size", y_label="...")

The picture is an 8-bit palette PNG (white, ink, grid, line); the same data give the same bytes.
"""
from __future__ import annotations

import math
import struct
import zlib

WHITE, INK, GRID, LINE = range(4)
PALETTE = bytes((255, 255, 255, 0, 0, 0, 221, 221, 221, 31, 119, 180))

# 5x7 glyphs in the style of the HD44780 character ROM: each hex pair is a row, top first, the
# highest of 5 bits the leftmost pixel. Only what labels and numbers use; others draw blank.
GLYPHS = {ch: bytes.fromhex(rows) for ch, rows in {
    " ": "00000000000000", "0": "0e11131519110e", "1": "040c040404040e", "2": "0e11010204081f", "3": "1f02040201110e",
    "4": "02060a121f0202", "5": "1f101e0101110e", "6": "0608101e11110e", "7": "1f010204080808", "8": "0e11110e11110e",
    "9": "0e11110f01020c", ".": "00000000000c0c", ",": "000000000c0408", "-": "0000001f000000", "(": "02040808080402",
    ")": "08040202020408", "a": "00000e010f110f", "b": "1010161911111e", "c": "00000e1010110e", "d": "01010d1311110f",
    "e": "00000e111f100e", "f": "0609081c080808", "g": "000f11110f010e", "h": "10101619111111", "i": "04000c0404040e",
    "j": "0200060202120c", "k": "10101214181412", "l": "0c04040404040e", "m": "00001a15151111", "n": "00001619111111",
    "o": "00000e1111110e", "p": "00001e111e1010", "q": "00000d130f0101", "r": "00001619101010", "s": "00000e100e011e",
    "t": "08081c08080906", "u": "0000111111130d", "v": "00001111110a04", "w": "0000111115150a", "x": "0000110a040a11",
    "y": "000011110f010e", "z": "00001f0204081f", "C": "0e11101010110e",
}.items()}
FONT_SCALE = 2                          # each font pixel is 2x2 picture pixels
CHAR_W, CHAR_H = 6 * FONT_SCALE, 7 * FONT_SCALE     # advance (5 pixels and a gap) and height


class Canvas:
    """Rows of palette indices, drawn into with clipping, written as a PNG."""

    def __init__(self, width: int, height: int):
        self.width, self.height = width, height
        self.rows = [bytearray(width) for _ in range(height)]        # WHITE is 0

    def fill(self, x0: int, y0: int, x1: int, y1: int, colour: int) -> None:
        """The rectangle [x0, x1) x [y0, y1), clipped."""
        x0, x1 = max(0, x0), min(self.width, x1)
        if x0 >= x1:
            return
        run = bytes((colour,)) * (x1 - x0)
        for y in range(max(0, y0), min(self.height, y1)):
            self.rows[y][x0:x1] = run

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: int, pen: int = 2) -> None:
        """A straight line (Bresenham's steps), each step a pen x pen square."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        error = dx + dy
        while True:
            self.fill(x0, y0, x0 + pen, y0 + pen, colour)
            if x0 == x1 and y0 == y1:
                return
            twice = 2 * error
            if twice >= dy:
                error += dy
                x0 += sx
            if twice <= dx:
                error += dx
                y0 += sy

    def text(self, x: int, y: int, text: str, colour: int = INK, upright: bool = True) -> None:
        """`text` with its top-left corner at (x, y); not upright: turned a quarter left (read bottom
        up), its bottom-left pixel at (x, y)."""
        for i, ch in enumerate(text):
            for row, bits in enumerate(GLYPHS.get(ch, GLYPHS[" "])):
                for column in range(5):
                    if bits & (0x10 >> column):
                        a, b = i * CHAR_W + column * FONT_SCALE, row * FONT_SCALE
                        if upright:
                            self.fill(x + a, y + b, x + a + FONT_SCALE, y + b + FONT_SCALE, colour)
                        else:
                            self.fill(x + b, y + 1 - a - FONT_SCALE, x + b + FONT_SCALE, y + 1 - a, colour)

    def png(self) -> bytes:
        """The picture as an 8-bit palette PNG (filter 0 on every row)."""
        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        raw = b"".join(b"\x00" + bytes(row) for row in self.rows)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 3, 0, 0, 0))
                + chunk(b"PLTE", PALETTE) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def text_width(text: str) -> int:
    return len(text) * CHAR_W - FONT_SCALE


def round_ticks(low: float, high: float, most: int = 8) -> tuple[list[float], int]:
    """Round values (1, 2 or 5 times a power of ten apart) inside [low, high], at most `most` of
    them, and the decimals that write them."""
    span = high - low if high > low else abs(high) or 1.0
    power = 10.0 ** math.floor(math.log10(span / most))
    step = next(power * m for m in (1, 2, 5, 10) if span / (power * m) <= most)
    first = math.ceil(low / step - 1e-9)
    ticks = [k * step for k in range(first, math.floor(high / step + 1e-9) + 1)]
    return ticks, max(0, -math.floor(math.log10(step) + 1e-9))


def tick_label(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}" if decimals else f"{round(value)}"


def line_chart_png(xs: list[float], ys: list[float], title: str = "", x_label: str = "", y_label: str = "",
                   width: int = 770, height: int = 495) -> bytes:
    """The PNG of the line through (xs[i], ys[i]), in a frame with round-valued ticks and a grid."""
    canvas = Canvas(width, height)
    if not xs:
        return canvas.png()
    x_low, x_high = min(xs), max(xs)
    y_low, y_high = min(ys), max(ys)
    # A margin of 5% of the span inside the frame, as plotting libraries leave.
    x_pad = (x_high - x_low) * 0.05 or abs(x_high) * 0.05 or 1.0
    y_pad = (y_high - y_low) * 0.05 or abs(y_high) * 0.05 or 1.0
    x_low, x_high, y_low, y_high = x_low - x_pad, x_high + x_pad, y_low - y_pad, y_high + y_pad
    y_ticks, y_decimals = round_ticks(y_low, y_high, most=10)
    x_ticks, x_decimals = round_ticks(x_low, x_high)
    y_texts = [tick_label(v, y_decimals) for v in y_ticks]
    left = 16 + CHAR_H + 8 + max(map(text_width, y_texts), default=0) + 8
    top, right, bottom = 16 + CHAR_H + 12, width - 24, height - (8 + CHAR_H + 10 + CHAR_H + 16)

    def at_x(x: float) -> int:
        return left + round((x - x_low) / (x_high - x_low) * (right - left))

    def at_y(y: float) -> int:
        return bottom - round((y - y_low) / (y_high - y_low) * (bottom - top))

    for x, label in zip(x_ticks, [tick_label(v, x_decimals) for v in x_ticks]):
        canvas.fill(at_x(x), top, at_x(x) + 1, bottom, GRID)
        canvas.fill(at_x(x), bottom, at_x(x) + 1, bottom + 6, INK)
        canvas.text(at_x(x) - text_width(label) // 2, bottom + 8, label)
    for y, label in zip(y_ticks, y_texts):
        canvas.fill(left, at_y(y), right, at_y(y) + 1, GRID)
        canvas.fill(left - 6, at_y(y), left, at_y(y) + 1, INK)
        canvas.text(left - 8 - text_width(label), at_y(y) - CHAR_H // 2, label)
    for x0, y0, x1, y1 in ((left, top, right + 1, top + 1), (left, bottom, right + 1, bottom + 1),
                           (left, top, left + 1, bottom), (right, top, right + 1, bottom)):
        canvas.fill(x0, y0, x1, y1, INK)
    points = [(at_x(x) - 1, at_y(y) - 1) for x, y in zip(xs, ys)]
    for (x0, y0), (x1, y1) in zip(points, points[1:] or points):
        canvas.line(x0, y0, x1, y1, LINE)
    canvas.text((left + right - text_width(title)) // 2, 16, title)
    canvas.text((left + right - text_width(x_label)) // 2, height - 16 - CHAR_H, x_label)
    canvas.text(16, (top + bottom + text_width(y_label)) // 2, y_label, upright=False)
    return canvas.png()
