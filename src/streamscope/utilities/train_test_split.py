"""``litdata.utilities.train_test_split`` at the same path."""

from streamscope.engine.split import train_test_split  # noqa: F401

__all__ = ["train_test_split"]
