"""``litdata.streaming.serializers`` at the same path."""

from streamscope.format.serializers import *  # noqa: F401,F403
