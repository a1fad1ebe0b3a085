"""The leaves of samples, serialized with the serializers the FIRST sample picked.

Each sample is flattened (:mod:`.pytree`); the first sample picks a serializer per leaf (the first of
:func:`~.serializers.merge_serializers` that accepts it) and so sets the dataset's ``data_format`` and structure
(``data_spec``). Every later sample must have the same structure, and each leaf must fit its field's serializer,
else :class:`~streamscope._core.errors.SchemaMismatchError` names the sample and the field (LitData checks neither).
A writer that continues another's chunks (a resumed optimize worker) adopts that writer's formats instead of
picking afresh when its first sample has the same structure.
"""

from __future__ import annotations

from typing import Any

from streamscope._core.errors import FormatError, SchemaMismatchError, short_repr
from streamscope.format.pytree import TreeSpec, leaf_paths, spec_difference, tree_flatten, treespec_dumps
from streamscope.format.serializers import Serializer, key_for_format, merge_serializers

__all__ = ["SampleEncoder"]


class SampleEncoder:
    """Serialize the leaves of samples, checking every sample against the first one.

    Args:
        serializers: extra serializers, tried before the built-ins.

    Attributes:
        data_format: the leaf formats the first sample set (None before it).
        spec: the first sample's structure (None before it).
        resume_format: ``(data_format, data_spec text)`` of the writer this one continues, until the first sample
            adopts it (same structure) or drops it.
    """

    def __init__(self, serializers: dict[str, Serializer] | None = None) -> None:
        self._serializers = merge_serializers(serializers)
        self.data_format: list[str] | None = None
        self.spec: TreeSpec | None = None
        self.resume_format: tuple[list[str], str] | None = None
        self._leaf_sers: list[Serializer] = []
        self._matchers: list[Any] = []
        self._paths: list[str] = []

    def serialize(self, index: int, sample: Any) -> tuple[list[Any], list[bytes], list[int]]:
        """The leaves of sample ``index``, their bytes and their sizes (what the item loader encodes).

        Raises:
            SchemaMismatchError: the sample does not have the first sample's structure, or a leaf does not fit
                its field's serializer.
            FormatError: a leaf cannot be serialized.
        """
        leaves, spec = tree_flatten(sample)
        if self.data_format is None and self.resume_format is not None:
            self._adopt(spec, *self.resume_format)
        if self.data_format is None:
            data, sizes = self._first_sample(index, leaves, spec)
        else:
            data, sizes = self._next_sample(index, leaves, spec)
        return leaves, data, sizes

    def _first_sample(self, index: int, leaves: list[Any], spec: TreeSpec) -> tuple[list[bytes], list[int]]:
        data: list[bytes] = []
        sizes: list[int] = []
        fmts: list[str] = []
        sers: list[Serializer] = []
        paths = leaf_paths(spec)
        for path, leaf in zip(paths, leaves):
            for key, ser in self._serializers.items():
                if ser.can_serialize(leaf):
                    blob, name = self._run(ser, leaf, index, path)
                    fmts.append(name or key)
                    sers.append(ser)
                    data.append(blob)
                    sizes.append(getattr(ser, "size", len(blob)))
                    break
            else:  # pragma: no cover (pickle accepts everything unless replaced)
                raise FormatError(f"sample {index} field {path}: no serializer accepts {type(leaf).__name__}")
        self.data_format = fmts
        self.spec = spec
        self._leaf_sers = sers
        # LitData-style user serializers have no ``matches``: their ``can_serialize`` checks the type then
        self._matchers = [getattr(ser, "matches", None) or ser.can_serialize for ser in sers]
        self._paths = paths
        return data, sizes

    @staticmethod
    def _run(ser: Serializer, leaf: Any, index: int, path: str) -> tuple[bytes, str | None]:
        try:
            return ser.serialize(leaf)
        except FormatError as exc:
            raise type(exc)(f"sample {index} field {path}: {exc}") from None
        except (OverflowError, ValueError, TypeError, KeyError, RuntimeError) as exc:
            raise FormatError(f"sample {index} field {path}: cannot serialize {type(leaf).__name__}: {exc}") from exc

    def _adopt(self, spec: TreeSpec, formats: list[str], spec_text: str) -> None:
        """Take the leaf formats of the writer this one continues when ``spec`` is its structure (a first sample
        of its own could pick other serializers, e.g. ``str`` where the dataset has ``pickle``)."""
        self.resume_format = None
        if treespec_dumps(spec) != spec_text or len(formats) != spec.num_leaves:
            return  # another structure: detected afresh, and the merge then names the difference
        try:
            sers = [self._serializers[key_for_format(f, self._serializers)] for f in formats]
        except KeyError:
            return
        self.data_format = formats
        self.spec = spec
        self._leaf_sers = sers
        self._matchers = [getattr(ser, "matches", None) or ser.can_serialize for ser in sers]
        self._paths = leaf_paths(spec)

    def _next_sample(self, index: int, leaves: list[Any], spec: TreeSpec) -> tuple[list[bytes], list[int]]:
        assert self.spec is not None and self.data_format is not None
        if spec != self.spec:
            path, why = spec_difference(self.spec, spec)
            raise SchemaMismatchError(f"sample {index} field {path} does not match the first sample's structure: {why}")
        data: list[bytes] = []
        sizes: list[int] = []
        for j, (leaf, ser, fmt, matches) in enumerate(zip(leaves, self._leaf_sers, self.data_format, self._matchers)):
            if not matches(leaf):
                lead = getattr(ser, "litdata_mismatch", "")
                raise SchemaMismatchError(
                    (lead.format(item=short_repr(_leaf_value(leaf), 80)) + " " if lead else "")
                    + f"sample {index} field {self._paths[j]}: {_leaf_type(leaf)} does not fit the field's "
                    f"data_format {fmt!r} set by the first sample"
                )
            blob, name = self._run(ser, leaf, index, self._paths[j])
            if name is not None and name != fmt:
                raise SchemaMismatchError(
                    f"sample {index} field {self._paths[j]}: encodes as {name!r} but the first sample set {fmt!r}"
                )
            data.append(blob)
            sizes.append(getattr(ser, "size", len(blob)))
        return data, sizes


def _leaf_value(leaf: Any) -> Any:
    return leaf.value if type(leaf).__name__ == "JsonLeaf" and hasattr(leaf, "value") else leaf


def _leaf_type(leaf: Any) -> str:
    """The type name of a leaf; for a ``json`` leaf, of the value it wraps (a field whose type changed)."""
    if type(leaf).__name__ == "JsonLeaf" and hasattr(leaf, "value"):
        return f"{type(leaf.value).__name__} (a json leaf: the field's type changed from the earlier samples')"
    return type(leaf).__name__
