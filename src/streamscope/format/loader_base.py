"""The base of the item loaders: what every loader shares (setup from an index ``config``, pickling for spawned
workers, reading from an open chunk).

It sits below the loaders of each layout (:mod:`.item_loader`'s PyTree and Tokens loaders, :mod:`.parquet`'s
Parquet loader) so that :func:`~streamscope.format.item_loader.loader_for_config` can name them all.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from streamscope._core.errors import FormatError
from streamscope.format.chunk import ChunkFile
from streamscope.format.serializers import Serializer, key_for_format, merge_serializers

__all__ = ["BaseItemLoader"]


class BaseItemLoader:
    """Base of the item loaders. ``name`` is the index.json ``config["item_loader"]`` string."""

    name = "BaseItemLoader"

    def __init__(self) -> None:
        self._config: dict[str, Any] | None = None
        self._serializers: dict[str, Serializer] = {}
        self._leaf_serializers: list[Serializer] = []
        self._data_format: list[str] = []

    # --- writing -----------------------------------------------------------------------------------

    def encode_data(self, data: list[bytes], sizes: list[int], flattened: list[Any]) -> tuple[bytes, int | None]:
        """One item's bytes from its serialized leaves; returns ``(blob, dim)``."""
        raise NotImplementedError

    # --- reading -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Loader arguments to restore it (LitData: ``{}``, Tokens: ``{"block_size": N}``)."""
        return {}

    def setup(
        self,
        config: dict[str, Any],
        serializers: dict[str, Serializer] | None = None,
        chunks: list[dict[str, Any]] | None = None,
    ) -> None:
        """Prepare to decode items of a dataset with this index ``config`` (once per dataset)."""
        loader_name = config.get("item_loader")
        if loader_name is not None and loader_name != self.name:
            raise FormatError(
                f"the dataset was written with item_loader {loader_name!r} but is read with {self.name!r}"
            )
        self._config = config
        self._chunks = chunks
        self._user_serializers = serializers
        registry = merge_serializers(serializers)
        self._data_format = list(config.get("data_format") or [])
        leaf_sers: list[Serializer] = []
        for fmt in self._data_format:
            key = key_for_format(fmt, registry)
            proto = registry.get(key)
            if proto is None:  # fail when such a leaf is decoded (0.2.76 Arrow rows never decode their leaves)
                leaf_sers.append(_Unknown(fmt, sorted(registry)))
                continue
            try:
                ser = _fresh(proto)
            except Exception:  # noqa: BLE001 (a user serializer that cannot be copied is used as is)
                ser = proto
            ser.setup(fmt)
            leaf_sers.append(ser)
        self._serializers = registry
        self._leaf_serializers = leaf_sers

    def decode(self, view: memoryview) -> Any:
        """Decode the bytes of one item."""
        raise NotImplementedError

    # --- reading from an open chunk (what a dataset calls; each loader reads its own layout) --------------

    @property
    def batch_layout(self) -> str | None:
        """How a batch of this loader's samples is decoded at once: ``"tree"`` (leaf by leaf, or the rows of a
        0.2.76 Arrow chunk), ``"tokens"`` (blocks of a token stream), None (sample by sample only)."""
        return "tree"

    def read_sample(self, file: Any, item: int, chunk: dict[str, Any]) -> Any:
        """Sample ``item`` of the open chunk ``file`` (index entry ``chunk``); the chunk decodes by its kind
        (classic items, 0.2.76 Arrow rows, ...)."""
        return file.sample(item, self)

    def read_samples(self, file: Any, items: Any) -> list[Any] | None:
        """Samples ``items`` of the open chunk ``file`` at once, or None when it decodes them one by one."""
        many = getattr(file, "samples", None)
        return None if many is None else many(items, self)

    # --- pickling (DataLoader workers with spawn) ---------------------------------------------------

    _PICKLED: tuple[str, ...] = ("_block_size",)

    def __getstate__(self) -> dict[str, Any]:
        """Only the setup inputs travel; the compiled decoders are rebuilt on the other side."""
        state = {k: self.__dict__[k] for k in self._PICKLED if k in self.__dict__}
        state["_setup_args"] = (
            (self._config, getattr(self, "_user_serializers", None), getattr(self, "_chunks", None))
            if self._config is not None
            else None
        )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        args = state.pop("_setup_args", None)
        self.__init__()  # type: ignore[misc]
        self.__dict__.update(state)
        if args is not None:
            self.setup(*args)

    def decode_many(self, chunk: ChunkFile, indices: Sequence[int]) -> list[Any]:
        """Decode items ``indices`` (local to ``chunk``)."""
        decode = self.decode
        view = chunk.item_view
        return [decode(view(i)) for i in indices]


class _Unknown(Serializer):
    """Stands for a ``data_format`` entry no serializer handles; decoding such a leaf raises."""

    def __init__(self, fmt: str, known: list[str]) -> None:
        self._fmt = fmt
        self._known = known

    def deserialize(self, data: bytes | memoryview) -> Any:
        raise FormatError(f"data_format entry {self._fmt!r} has no serializer; known: {self._known}")


def _fresh(proto: Serializer) -> Serializer:

    return copy.deepcopy(proto)
