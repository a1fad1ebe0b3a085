"""Lines of numbers rendered with numpy: a constant template per shape, every digit from one look-up table,
numbers right-aligned with spaces, so the lines of one shape have one width (:func:`render_rows`)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["render_rows"]


def _cells(spaced: bool, blank_zero: bool = False) -> np.ndarray:
    """0..9999 as four ASCII digits each, one uint32 per number: zero-padded, or leading zeros as spaces
    (``spaced``), and with ``blank_zero`` 0 as four spaces."""
    v = np.arange(10_000)
    chars = (np.stack([v // 1000, v // 100 % 10, v // 10 % 10, v % 10], axis=1) + 48).astype(np.uint8)
    if spaced:
        lead = chars[:, :3]
        lead[np.logical_and.accumulate(lead == 48, axis=1)] = 32
    if blank_zero:
        chars[0] = 32
    return chars.reshape(-1).view(np.uint32)


#: Four ASCII digits for each of 0..9999 as one uint32 cell (bytes in text order), in three regions:
#: zero-padded (``"0007"``), space-padded (``"   7"``), and space-padded with 0 blank (``"    "``: a leading
#: cell of a longer number that is all zeros).
_LUT = np.concatenate([_cells(False), _cells(True), _cells(True, blank_zero=True)])
#: Offset of the space-padded region (the blank region follows at twice this).
_SPACED = 10_000
#: A number's digits above this place that every row shares are written once, as constant text (a ts).
_SHARED_PLACE = 10**12
_INT64_MAX = 2**63 - 1


class _Layout:
    """Where the digits of each number go in a line template (see :func:`render_rows`); cached per shape.

    The numbers' cells (four digits each, most significant first) are laid end to end: cell ``c`` holds the
    digits of number ``field[c]`` at ``10**(4i) .. 10**(4i+3)`` (``div[c] = 10**(4i)``). Its look-up region
    is chosen per row by comparing the number with ``lo`` and ``hi``: below ``lo`` the cell is all leading
    (blank), below ``hi`` it holds the first significant digit (space-padded), else zero-padded. A number's
    digits are one contiguous run of the cells' bytes; ``copies`` are the slices that place them (the decimal
    point of a ``dec3`` number splits one), ``src``/``dst`` the same as byte indexes.

    The constant text is not part of a layout, only its length in bytes (an int in ``parts``): lines that differ
    only in their text (a DataLoader worker's pid and tid, new every epoch) share one. ``fills`` are the
    placeholders of the numbers, in order, that :meth:`template` puts between the texts.
    """

    __slots__ = ("width", "fills", "field", "div", "lo", "hi", "copies", "src", "dst")

    def __init__(self, parts: tuple[Any, ...]) -> None:
        width = 0
        fills: list[bytes] = []
        field: list[int] = []
        div: list[int] = []
        lo: list[int] = []
        hi: list[int] = []
        copies: list[tuple[int, int, int]] = []  # (first byte in the cells, last + 1, first column in the line)
        k = 0
        for p in parts:
            if type(p) is int:
                width += p
                continue
            digits, dec3, padded = p
            cells = -(-digits // 4)
            first = 4 * (len(field) + cells) - digits  # byte of the number's first digit in the cells
            for i in range(cells - 1, -1, -1):
                field.append(k)
                div.append(10 ** (4 * i))
                if padded or (dec3 and i == 0):  # zero-padded: a ts below its shared digits, a dec3's units cell
                    lo.append(-1)
                    hi.append(-1)
                else:
                    lo.append(10 ** (4 * i) if i else -1)
                    hi.append(min(10 ** (4 * i + 4), _INT64_MAX))  # every int64 is below 10**20
            col = width
            if dec3:
                copies += [(first, first + digits - 3, col), (first + digits - 3, first + digits, col + digits - 2)]
                fills.append(b"0" * (digits - 3) + b".000")
            else:
                copies.append((first, first + digits, col))
                fills.append(b"0" * digits)
            width += len(fills[-1])
            k += 1
        self.width = width
        self.fills = fills
        self.field = np.array(field, dtype=np.intp)
        self.div = np.array(div, dtype=np.int64)[:, None]
        self.lo = np.array(lo, dtype=np.int64)[:, None]
        self.hi = np.array(hi, dtype=np.int64)[:, None]
        self.copies = copies
        self.src = np.concatenate([np.arange(a, b) for a, b, _ in copies])
        self.dst = np.concatenate([np.arange(c, c + b - a) for a, b, c in copies])

    def template(self, texts: list[Any]) -> np.ndarray:
        """One line with every number a placeholder: ``texts`` (the constant parts, in order, as many as the
        layout's text lengths) with :attr:`fills` between them where the numbers go."""
        pieces: list[bytes] = []
        numbers = iter(self.fills)
        for t in texts:
            if t is _NUMBER:
                pieces.append(next(numbers))
            else:
                pieces.append(t)
        return np.frombuffer(b"".join(pieces), dtype=np.uint8)


_layouts: dict[tuple[Any, ...], _Layout] = {}
#: Marks where a number goes among a line's texts (see :meth:`_Layout.template`).
_NUMBER: Any = object()
#: Rows rendered per block by :func:`render_rows`.
_ROWS = 1024


def render_rows(n: int, segs: list[Any]) -> np.ndarray:
    """``n`` lines as a uint8 matrix (a row per line): ``segs`` are constant text or ``(values, dec3)`` numbers.

    A number is an int, right-aligned and space-padded to its column's widest value, or with ``dec3`` a count
    of ns written as µs with three decimals (``12.345``). Digits shared by every row (the leading digits of a
    timestamp) are constant text. All digits of all rows come from one look-up in :data:`_LUT`, four digits
    per cell, into a layout cached per shape: a group costs a fixed handful of vector operations however many
    numbers its lines hold (groups are small, a series' events since the last flush, so fixed costs dominate).

    Raises:
        ValueError: a negative value.
    """
    values = np.array([seg[0] for seg in segs if type(seg) is not str])  # a row per number: contiguous
    tops, bottoms = np.maximum.reduce(values, axis=1).tolist(), np.minimum.reduce(values, axis=1).tolist()
    if min(bottoms) < 0:
        raise ValueError("negative value")
    parts: list[Any] = []  # the layout's key: text lengths in bytes and number specs
    texts: list[Any] = []  # the texts (bytes), and _NUMBER where a number goes
    shift = [0] * len(tops)
    k = 0
    for seg in segs:
        if type(seg) is str:
            text = seg.encode("utf-8", "replace")
            parts.append(len(text))
            texts.append(text)
            continue
        dec3 = seg[1]
        shared = tops[k] // _SHARED_PLACE
        if shared and shared == bottoms[k] // _SHARED_PLACE:
            text = str(shared).encode()
            parts.append(len(text))
            texts.append(text)
            shift[k] = shared * _SHARED_PLACE
            parts.append((12, dec3, True))
        else:
            parts.append((max(4 if dec3 else 1, len(str(tops[k]))), dec3, False))
        texts.append(_NUMBER)
        k += 1
    if any(shift):
        values -= np.array(shift, dtype=np.int64)[:, None]
    key = tuple(parts)
    layout = _layouts.get(key)
    if layout is None:
        layout = _Layout(key)
        if len(_layouts) < 1024:
            _layouts[key] = layout
    m = np.empty((n, layout.width), dtype=np.uint8)
    m[:] = layout.template(texts)
    for r in range(0, n, _ROWS):  # blocks of rows: small temporaries, reused by the allocator (no page faults)
        v = values[layout.field, r : r + _ROWS]  # a row per cell
        cells = v // layout.div % 10_000
        region = np.add(v < layout.hi, v < layout.lo, dtype=np.int64)
        region *= _SPACED  # 0: zero-padded, 1: space-padded, 2: blank (the regions are 10_000 apart)
        cells += region
        chars = _LUT.take(cells.T).view(np.uint8)  # a row per line
        if n <= _ROWS:
            m[:, layout.dst] = chars[:, layout.src]  # two calls; slow per row, so big groups use slices
        else:
            block = m[r : r + _ROWS]
            for a, b, col in layout.copies:
                block[:, col : col + b - a] = chars[:, a:b]
    return m
