"""``litdata.utilities.breakpoint`` at the same path."""

from streamscope.api.breakpoint import MultiprocessingPdb, breakpoint  # noqa: F401

__all__ = ["MultiprocessingPdb", "breakpoint"]
