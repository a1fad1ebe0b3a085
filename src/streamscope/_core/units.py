"""Parsing of human sizes and durations, in one place.

``parse_bytes`` accepts LitData's decimal units (``"64MB"`` = 64_000_000) and also plain bytes (``"100B"``,
``"100"``) and binary units (``"1GiB"``), which LitData rejects.
"""

from __future__ import annotations

import re

from streamscope._core.errors import ConfigError

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | float | str) -> int:
    """Return ``value`` as a whole number of bytes.

    Raises:
        ConfigError: the value is negative, not a number, or has an unknown unit.
    """
    if isinstance(value, bool):
        raise ConfigError(f"a size must be a number of bytes or a string like '64MB', got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ConfigError(f"a size cannot be negative, got {value!r}")
        return int(value)
    if not isinstance(value, str):
        raise ConfigError(f"a size must be a number of bytes or a string like '64MB', got {value!r}")
    m = _SIZE_RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(
            f"cannot parse size {value!r}: use a number with an optional unit "
            f"(B, KB, MB, GB, TB decimal; KiB, MiB, GiB, TiB binary)"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(n: float) -> str:
    """Render a byte count for humans (decimal units, like the sizes users pass in)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover
