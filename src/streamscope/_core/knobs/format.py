"""Knobs of the on-disk format: the layout optimize() and BinaryWriter write."""

from __future__ import annotations

from streamscope._core.knob_registry import knob

__all__ = ["WRITE_FORMATS", "parse_write_format"]

#: The on-disk layouts streamscope can write, by the LitData release that writes them.
WRITE_FORMATS = ("0.2.76", "0.2.68")


def parse_write_format(raw: str) -> str:
    """A ``write_format`` value: one of :data:`WRITE_FORMATS` (surrounding blanks ignored)."""
    value = str(raw).strip()
    if value not in WRITE_FORMATS:
        raise ValueError(f"expected one of {', '.join(WRITE_FORMATS)}, got {raw!r}")
    return value


knob(
    "write_format",
    "0.2.76",
    "LitData release",
    ("STREAMSCOPE_WRITE_FORMAT",),
    "Layout optimize() and BinaryWriter write: '0.2.76' (LitData 0.2.76's: config.types and its compression "
    "keys, json leaves, Arrow-footer rows for JSON-like dict samples, framed zstd; LitData 0.2.68 cannot read "
    "all of it) or '0.2.68' (byte-identical to LitData 0.2.68, which 0.2.76 reads too). "
    "optimize(mode='append') keeps the layout of the dataset it appends to, whatever this says.",
    parse=parse_write_format,
)
