"""Parsing of human sizes and durations, in one place.

``parse_bytes`` accepts LitData's decimal units (``"64MB"`` = 64_000_000) and also plain bytes (``"100B"``,
``"100"``) and binary units (``"1GiB"``), which LitData rejects.
"""

from __future__ import annotations

import os
import re
import shutil

from streamscope._core.errors import ConfigError

__all__ = ["CACHE_FREE_FRACTION", "CACHE_RESERVE", "cache_budget", "parse_bytes"]


_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "k": 10**3,  # LitData's short spellings ("100G")
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}
# the number forms LitData's chunk_bytes parser takes through float(): "64", "1.5", ".5", "1e3"
_SIZE_RE = re.compile(r"^\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


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
    number, unit = m.group(1), _UNITS[m.group(2).lower()]
    if number.isdigit():  # exact: a float would round sizes above 2**53
        return int(number) * unit
    return int(float(number) * unit)


#: LitData 0.2.76's default cache budget: this share of the free disk, leaving at least CACHE_RESERVE free.
CACHE_FREE_FRACTION = 0.75
CACHE_RESERVE = 50 * 10**9


def _free_bytes(path: str) -> int:
    probe = os.path.abspath(path or os.getcwd())
    while not os.path.isdir(probe):  # the cache folder may not exist yet: measure the volume it will be on
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        return int(shutil.disk_usage(probe).free)
    except OSError:
        return CACHE_RESERVE


def _fraction(value: int | float | str) -> float | None:
    """A share of the free disk (a float, or a string like "0.9", in (0, 1]); None for a size."""
    if isinstance(value, bool) or isinstance(value, int):
        return None
    if isinstance(value, float):
        return value if 0 < value <= 1 else None
    try:
        share = float(value.strip())
    except ValueError:
        return None
    return share if 0 < share <= 1 and not value.strip().isdigit() else None


def cache_budget(value: int | float | str | None, path: str) -> int:
    """A ``max_cache_size`` as bytes, with LitData 0.2.76's meanings.

    None (or "auto"): 75 % of the free disk of ``path``'s volume, but at least 50 GB left free when the volume
    has more than that free. A float in (0, 1] (or a string such as "0.9"): that share of the free disk.
    Anything else: a size for :func:`parse_bytes` (``"100GB"``, ``"100G"``, an int).
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        free = _free_bytes(path)
        budget = int(free * CACHE_FREE_FRACTION)
        return min(budget, free - CACHE_RESERVE) if free > CACHE_RESERVE else budget
    share = _fraction(value)
    if share is not None:
        return int(_free_bytes(path) * share)
    return parse_bytes(value)
