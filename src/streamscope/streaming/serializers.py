"""``litdata.streaming.serializers`` at the same path."""

from streamscope.format import serializers as _serializers
from streamscope.format.serializers import *  # noqa: F401,F403

__all__ = list(_serializers.__all__)
