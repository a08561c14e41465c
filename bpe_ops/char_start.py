"""A byte-level piece's first symbols with its characters' own merges already made, where that is
exact for any merge list, ranks ascending or not: the specification of `_char_start.h`.

The replay (`merging.merge_python`) repeatedly merges the adjacent pair of lowest rank. A character
c of two or three UTF-8 bytes, replayed alone, makes its own merges r_1, r_2 (lowest first) and is
E_0 (bytes), E_1, E_2 after each. Making c's first s of them before the replay starts gives the same
ids when, with R = max(r_1..r_s):
  (a) for k = 1..s, every merge that could join E_{k-1}'s edge symbols to c's neighbours ranks
      above r_k: in the replay from bytes nothing touches c's symbols before its merge k;
  (b) every merge that could join E_s's edge symbols to the neighbours ranks above R: every merge
      the replay makes elsewhere before c's merge s ranks at most R, so it still comes first;
  (c) E_s's own next pair, if it has one, ranks above R: it cannot come first either.
A merge (x, v) with x ending in byte p and v starting with byte q ranks at least
max(min_right[v], edge[p][q]); (a) and (b) hold where that exceeds each bound. Nothing depends on
what the neighbours have become, only on their bytes, so every character of a piece may be started
this way at once (one character at a time, each step exact). Where ranks ascend, (b) and (c) always
hold and this is the rule `_char_start.h` used before for such lists alone.

Worked example: merges (E3, 81) rank 0, (' ', E3) rank 1, (E3 81, AE) rank 2; 'の' is E3 81 AE.

>>> no = "の".encode()
>>> left, right, merged = [0xE3, 32, 256], [0x81, 0xE3, 0xAE], [256, 257, 258]
>>> tables = start_tables(first_ranks(left, right), left, right, merged, list(range(256)))
>>> first_symbols(b" " + no, tables), first_symbols(b"a" + no, tables)
([32, 258], [97, 258])

With (' ', E3) first, " の" starts from its bytes; "aの" still from 'の'. With (E3 81, AE) ranked
first (the ranks do not ascend: it is made of merge 1's product), 'の' alone still ends as 258.

>>> left, right, merged = [32, 0xE3, 257], [0xE3, 0x81, 0xAE], [256, 257, 258]
>>> tables = start_tables(first_ranks(left, right), left, right, merged, list(range(256)))
>>> first_symbols(b" " + no, tables), first_symbols(b"a" + no, tables)
([32, 227, 129, 174], [97, 258])
>>> left, right, merged = [257, 0xE3], [0xAE, 0x81], [258, 257]
>>> tables = start_tables(first_ranks(left, right), left, right, merged, list(range(256)))
>>> first_symbols(no, tables), merge_python(list(no), first_ranks(left, right), left, right, merged, False)
([258], [258])
"""
from __future__ import annotations

from typing import NamedTuple

from .merging import NO_MERGE, Ranks, first_ranks, merge_python  # noqa: F401 (the doctests use them)


class StartTables(NamedTuple):
    """What `first_symbols` reads: the merges, each id's lowest rank as a left and a right part,
    the lowest rank of a merge joining a symbol ending in byte p to one starting with byte q
    (`edge[p << 8 | q]`), and the byte ids."""
    ranks: Ranks
    merged: list[int]
    min_left: dict[int, int]
    min_right: dict[int, int]
    edge: dict[int, int]
    byte_ids: list[int]


def start_tables(ranks: Ranks, left: list[int], right: list[int], merged: list[int],
                 byte_ids: list[int]) -> StartTables:
    """The tables of `first_symbols` for merges by rank (`ranks` as `merging.first_ranks` makes
    them: a repeated pair's later copies never apply). A symbol's first and last bytes come from the
    merges that make it, in as many passes as the ranks need (one where they ascend)."""
    live = sorted(ranks.values())
    min_left: dict[int, int] = {}
    min_right: dict[int, int] = {}
    for r in live:
        min_left.setdefault(left[r], r)
        min_right.setdefault(right[r], r)
    ends = {i: (b, b) for b, i in enumerate(byte_ids)}
    grown = True
    while grown:
        grown = False
        for r in live:
            a, b = ends.get(left[r]), ends.get(right[r])
            if a is not None and b is not None and merged[r] not in ends:
                ends[merged[r]] = (a[0], b[1])
                grown = True
    edge: dict[int, int] = {}
    for r in live:
        a, b = ends.get(left[r]), ends.get(right[r])
        if a is not None and b is not None:
            edge.setdefault(a[1] << 8 | b[0], r)
    return StartTables(ranks, merged, min_left, min_right, edge, byte_ids)


def own_merges(char: bytes, t: StartTables) -> list[tuple[int, list[int]]]:
    """[(r_k, E_k)]: the character's own merges alone, lowest rank first, each with its symbols after.

    >>> t = start_tables({(0xC3, 0xA9): 0}, [0xC3], [0xA9], [256], list(range(256)))
    >>> own_merges("é".encode(), t)
    [(0, [256])]
    """
    sym = [t.byte_ids[b] for b in char]
    out = []
    while len(sym) > 1:
        pairs = [t.ranks.get(p, NO_MERGE) for p in zip(sym, sym[1:])]
        r = min(pairs)
        if r == NO_MERGE:
            break
        at = pairs.index(r)
        sym = sym[:at] + [t.merged[r]] + sym[at + 2:]
        out.append((r, sym))
    return out


def bounds(char: bytes, t: StartTables, s: int) -> tuple[int, int] | None:
    """(need_left, need_right) for making the first s own merges: exact where the edge rank on each
    side with a neighbour is above its need (-1: no need); None where (c) fails.

    >>> t = start_tables({(0xC3, 0xA9): 0, (32, 0xC3): 1}, [0xC3, 32], [0xA9, 0xC3], [256, 257], list(range(256)))
    >>> bounds("é".encode(), t, 1)
    (-1, -1)
    """
    steps = own_merges(char, t)
    syms = [[t.byte_ids[b] for b in char]] + [e for _, e in steps]
    rs = [r for r, _ in steps[:s]]
    top = max(rs)
    if s < len(steps) and steps[s][0] < top:
        return None
    checks = [(syms[k - 1], rs[k - 1]) for k in range(1, s + 1)] + [(syms[s], top)]
    need_left = max([q for e, q in checks if t.min_right.get(e[0], NO_MERGE) <= q], default=-1)
    need_right = max([q for e, q in checks if t.min_left.get(e[-1], NO_MERGE) <= q], default=-1)
    return need_left, need_right


def first_symbols(piece: bytes, t: StartTables) -> list[int]:
    """The piece's first symbols (whole UTF-8 characters): each character of two or three bytes as
    its symbols after the most own merges that are exact where it stands; other bytes as bytes."""
    out: list[int] = []
    i = 0
    while i < len(piece):
        k = 1 if piece[i] < 0x80 else 2 if piece[i] < 0xE0 else 3 if piece[i] < 0xF0 else 4
        char = piece[i:i + k]
        best = [t.byte_ids[b] for b in char]
        if k in (2, 3):
            steps = own_merges(char, t)
            for s in range(len(steps), 0, -1):
                need = bounds(char, t, s)
                if need is None:
                    continue
                if i > 0 and t.edge.get(piece[i - 1] << 8 | piece[i], NO_MERGE) <= need[0]:
                    continue
                if i + k < len(piece) and t.edge.get(piece[i + k - 1] << 8 | piece[i + k], NO_MERGE) <= need[1]:
                    continue
                best = steps[s - 1][1]
                break
        out += best
        i += k
    return out
