"""Thrift's compact protocol, as Parquet writes its footer and page headers in it: a struct read into
a list of fields and written back byte for byte, so that a footer Arrow wrote can have a few fields
changed and everything else kept as it was.

A struct is a list of fields `[field_id, type, value]` in the order they were read (or are to be
written). The value of an integer field is an int, of BOOL a bool, of BINARY bytes, of DOUBLE a
float, of LIST or SET a `(element_type, [values])` pair and of STRUCT a `Struct`.

    >>> header = Struct([[1, I32, 0], [2, I32, 20], [5, STRUCT, Struct([[1, I32, 3], [2, I32, 0]])]])
    >>> data = header.to_bytes()
    >>> data.hex()         # field 1 (+1, I32) 0, field 2 (+1) zigzag 20, field 5 (+3, STRUCT) {...}, stop
    '150015283c150615000000'
    >>> Struct.from_bytes(data)[0] == header
    True
    >>> header.get(2), header.get(5).get(1), header.get(4)
    (20, 3, None)
"""
from __future__ import annotations

import struct as _struct

# Compact protocol type codes (a field's type; BOOL is written as TRUE or FALSE in a field header).
STOP, BOOL, BOOL_FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
TRUE = BOOL
INTEGERS = (BYTE, I16, I32, I64)


class ThriftError(ValueError):
    """Bytes that are not a compact-protocol struct (truncated, an unknown type, too deep)."""


class Struct(list):
    """A compact-protocol struct: its fields `[field_id, type, value]`, in order."""

    def get(self, field_id: int, default=None):
        """The value of field `field_id`, or `default` when the struct does not have it."""
        for fid, _, value in self:
            if fid == field_id:
                return value
        return default

    def set(self, field_id: int, type_: int, value) -> None:
        """Field `field_id` set to `value` where it is; added in field-id order where it is not."""
        for field in self:
            if field[0] == field_id:
                field[1], field[2] = type_, value
                return
        at = next((i for i, field in enumerate(self) if field[0] > field_id), len(self))
        self.insert(at, [field_id, type_, value])

    def remove(self, field_id: int) -> None:
        """Field `field_id` dropped (nothing when the struct does not have it)."""
        self[:] = [field for field in self if field[0] != field_id]

    @classmethod
    def from_bytes(cls, data: bytes, at: int = 0) -> tuple["Struct", int]:
        """The struct that starts at `at` in `data`, and where it ends."""
        return _Reader(bytes(data), at).read_struct(0)

    def to_bytes(self) -> bytes:
        out = bytearray()
        _write_struct(out, self)
        return bytes(out)


def _varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _write_value(out: bytearray, type_: int, value) -> None:
    if type_ in INTEGERS:
        if type_ == BYTE:
            out.append(value & 0xFF)
        else:
            _varint(out, _zigzag(value) & 0xFFFFFFFFFFFFFFFF)
    elif type_ in (BOOL, BOOL_FALSE):            # an element of a list of bools
        out.append(1 if value else 2)
    elif type_ == DOUBLE:
        out += _struct.pack("<d", value)
    elif type_ == BINARY:
        _varint(out, len(value))
        out += value
    elif type_ in (LIST, SET):
        element_type, values = value
        if len(values) < 15:
            out.append(len(values) << 4 | element_type)
        else:
            out.append(0xF0 | element_type)
            _varint(out, len(values))
        for v in values:
            _write_value(out, element_type, v)
    elif type_ == STRUCT:
        _write_struct(out, value)
    else:
        raise ThriftError(f"cannot write a value of compact type {type_}")


def _write_struct(out: bytearray, fields: Struct) -> None:
    last = 0
    for fid, type_, value in fields:
        wire = (TRUE if value else BOOL_FALSE) if type_ in (BOOL, BOOL_FALSE) else type_
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | wire)
        else:
            out.append(wire)
            _varint(out, _zigzag(fid) & 0xFFFF)
        if type_ not in (BOOL, BOOL_FALSE):
            _write_value(out, type_, value)
        last = fid
    out.append(STOP)


MAX_DEPTH = 64      # structs within structs: a Parquet footer nests five deep


class _Reader:
    def __init__(self, data: bytes, at: int):
        self.data, self.at = data, at

    def byte(self) -> int:
        try:
            b = self.data[self.at]
        except IndexError:
            raise ThriftError("truncated compact-protocol struct") from None
        self.at += 1
        return b

    def varint(self) -> int:
        b = self.byte()
        if b < 0x80:
            return b
        n, shift = b & 0x7F, 7
        while True:
            b = self.byte()
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7
            if shift > 63:
                raise ThriftError("a varint longer than ten bytes")

    def integer(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, type_: int, depth: int):
        if type_ == BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if type_ in (I16, I32, I64):
            return self.integer()
        if type_ in (BOOL, BOOL_FALSE):
            return self.byte() == 1
        if type_ == DOUBLE:
            if self.at + 8 > len(self.data):
                raise ThriftError("truncated compact-protocol struct")
            self.at += 8
            return _struct.unpack("<d", self.data[self.at - 8:self.at])[0]
        if type_ == BINARY:
            n = self.varint()
            if self.at + n > len(self.data):
                raise ThriftError("truncated compact-protocol struct")
            self.at += n
            return bytes(self.data[self.at - n:self.at])
        if type_ in (LIST, SET):
            head = self.byte()
            size, element_type = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if element_type in (STOP, MAP) or element_type > STRUCT or size > len(self.data) - self.at:
                raise ThriftError(f"a list of {size} elements of compact type {element_type}")
            return element_type, [self.value(element_type, depth) for _ in range(size)]
        if type_ == STRUCT:
            return self.read_struct(depth + 1)[0]
        raise ThriftError(f"compact type {type_} (a map or unknown) where Parquet has none")

    def read_struct(self, depth: int) -> tuple[Struct, int]:
        if depth > MAX_DEPTH:
            raise ThriftError("structs nested too deep")
        fields, last = Struct(), 0
        while True:
            head = self.byte()
            if head == STOP:
                return fields, self.at
            type_, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.integer()
            if type_ in (TRUE, BOOL_FALSE):
                fields.append([fid, BOOL, type_ == TRUE])
            else:
                fields.append([fid, type_, self.value(type_, depth)])
            last = fid
