"""The sample schema LitData 0.2.76 writes into ``index.json`` as ``config.types``, and what it decides.

LitData 0.2.76 infers a type for every sample it writes and fuses them: a dict sample is a ``struct`` of its
fields, a field missing or None on some samples becomes ``optional``, two different kinds fuse to ``json``. The
fused schema then decides three things about the chunks (see :mod:`.writer`):

* whether the samples are JSON-like rows stored as an Arrow table behind the chunk (:func:`is_arrow_footer_type`);
* how a dict sample is flattened (:func:`wrap_for_pytree`): a list/dict field becomes ONE ``json`` leaf, a field
  missing from a later sample gets a default, fields the first sample did not have are left out of the leaves;
* how many bytes a row counts for toward ``chunk_bytes`` (:func:`sample_payload_bytes`).

Kinds: ``str int float bool bytes null json`` (scalars), ``list`` (``value`` = item type, None for an empty list),
``map`` (``value``), ``struct`` (``fields``), and media kinds named after the value's class (``Tensor`` ->
``tensor``, ``Image`` -> ``image``, other PIL images -> ``pil``, ...). The JSON shape (``config.types``): a
struct at the top is a plain ``{field: type}`` object; a non-optional scalar is its kind's name; everything else
is an object ``{"type": kind, "optional": true?, "value": ..., "fields": {...}}``. Example, for the samples
``{"id": 1, "tags": ["a"]}`` and ``{"id": 2, "tags": [], "note": "x"}``::

    {"id": "int", "note": {"optional": true, "type": "str"}, "tags": {"type": "list", "value": "str"}}

Fusing across workers goes through this JSON (:func:`fuse_schema_json`), as LitData's index merge does; it is not
lossless (an empty list's item type comes back as ``json``), so resumable writers keep the exact in-memory schema
with :func:`schema_state` / :func:`schema_from_state`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "JsonType",
    "data_format_is_arrow_safe",
    "default_for",
    "fuse_schema_json",
    "fuse_type",
    "infer_type",
    "is_arrow_footer_type",
    "is_binary_heavy",
    "is_json_row",
    "sample_payload_bytes",
    "schema_from_json",
    "schema_from_state",
    "schema_state",
    "schema_to_json",
    "wrap_for_pytree",
]

# value class name -> kind (LitData 0.2.76's sample wrappers; torch.Tensor and PIL's Image class share the names)
MEDIA_KINDS: dict[str, str] = {
    "Audio": "audio",
    "Video": "video",
    "Image": "image",
    "Jpeg": "jpeg",
    "JpegArray": "jpeg_array",
    "Pil": "pil",
    "Tiff": "tiff",
    "Text": "text",
    "File": "file",
    "Mesh": "mesh",
    "Pdf": "pdf",
    "Nifti": "nifti",
    "Graph": "graph",
    "Tensor": "tensor",
}
_SCALARS = frozenset({"str", "int", "float", "bool", "bytes", "null", "json", *MEDIA_KINDS.values()})
# kinds an Arrow table column can hold (a media field keeps the row out of the Arrow footer)
_ARROW_KINDS = frozenset({"str", "int", "float", "bool", "bytes", "null", "list", "map", "struct"})
# data_format names (before ":") whose leaves keep the sample out of the Arrow footer
_NOT_ARROW_FORMATS = frozenset(MEDIA_KINDS.values()) | {"no_header_tensor", "no_header_numpy"}
# a row whose bytes/bytearray values make up at least this share of its payload is stored without IPC zstd
# (already-compressed media barely shrinks)
_BINARY_HEAVY_SHARE = 0.6


@dataclass
class JsonType:
    """One inferred type. ``optional``: the field was missing or None on some samples."""

    kind: str
    value: JsonType | None = None
    fields: dict[str, JsonType] | None = None
    optional: bool = False


def _optional(t: JsonType) -> JsonType:
    return t if t.optional else JsonType(t.kind, t.value, t.fields, True)


def _unwrapped(value: Any) -> Any:
    # a JsonLeaf marker (any class of that name with a ``value``) stands for the value it holds
    while type(value).__name__ == "JsonLeaf" and hasattr(value, "value"):
        value = value.value
    return value


def infer_type(value: Any) -> JsonType:
    """The type of one value."""
    value = _unwrapped(value)
    if value is None:
        return JsonType("null", optional=True)
    cls = type(value)
    media = MEDIA_KINDS.get(cls.__name__)
    if media is not None:
        return JsonType(media)
    if (getattr(cls, "__module__", "") or "").startswith("PIL.") and (
        cls.__name__.endswith("ImageFile") or cls.__name__ == "Image"
    ):
        return JsonType("pil")
    # bool before int (a bool is an int); subclasses count as their base (np.float64 is a float)
    for base, kind in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), ((bytes, bytearray), "bytes")):
        if isinstance(value, base):
            return JsonType(kind)
    if isinstance(value, list):
        item: JsonType | None = None
        for x in value:
            item = infer_type(x) if item is None else fuse_type(item, infer_type(x))
        return JsonType("list", value=item)
    if isinstance(value, dict):
        return JsonType("struct", fields={k: infer_type(v) for k, v in value.items()})
    return JsonType("json")  # tuples, arrays, anything else: one opaque value


def _fuse_value(a: JsonType | None, b: JsonType | None) -> JsonType | None:
    if a is None:
        return b
    if b is None:
        return a
    return fuse_type(a, b)


def _map_value(struct: JsonType) -> JsonType:
    """The item type of a struct seen as a map: its field types fused."""
    out: JsonType | None = None
    for t in (struct.fields or {}).values():
        out = t if out is None else fuse_type(out, t)
    return out or JsonType("json")


def fuse_type(a: JsonType | None, b: JsonType | None) -> JsonType:
    """The type covering both observations (fields seen on one side only become optional)."""
    if a is None:
        return _optional(b) if b is not None else JsonType("json", optional=True)
    if b is None:
        return _optional(a)
    optional = a.optional or b.optional
    if a.kind == "null":
        return _optional(b)
    if b.kind == "null":
        return _optional(a)
    if a.kind == b.kind:
        if a.kind in ("list", "map"):
            return JsonType(a.kind, value=_fuse_value(a.value, b.value), optional=optional)
        if a.kind == "struct":
            left, right = a.fields or {}, b.fields or {}
            fields: dict[str, JsonType] = {}
            for key in [*left, *(k for k in right if k not in left)]:
                if key in left and key in right:
                    fields[key] = fuse_type(left[key], right[key])
                else:
                    fields[key] = _optional(left[key] if key in left else right[key])
            return JsonType("struct", fields=fields, optional=optional)
        return JsonType(a.kind, optional=optional)
    if a.kind == "map" and b.kind == "struct":
        return fuse_type(a, JsonType("map", value=_map_value(b), optional=b.optional))
    if a.kind == "struct" and b.kind == "map":
        return fuse_type(JsonType("map", value=_map_value(a), optional=a.optional), b)
    return JsonType("json", optional=optional)


# --- config.types (JSON) --------------------------------------------------------------------------


def _type_json(t: JsonType) -> Any:
    if t.kind in _SCALARS and t.kind != "json" and not t.optional:
        return t.kind
    if t.kind == "json" and not t.optional:
        return "json"
    out: dict[str, Any] = {"type": t.kind}
    if t.optional:
        out["optional"] = True
    if t.kind in ("list", "map"):
        out["value"] = _type_json(t.value) if t.value else "json"
    elif t.kind == "struct":
        out["fields"] = {k: _type_json(v) for k, v in (t.fields or {}).items()}
    return out


def _type_from(obj: Any) -> JsonType:
    if isinstance(obj, str):
        return JsonType(obj)
    if not isinstance(obj, dict):
        return JsonType("json")
    kind = obj.get("type") or obj.get("kind")
    if kind is None:  # a bare field map
        return JsonType("struct", fields={k: _type_from(v) for k, v in obj.items()})
    optional = bool(obj.get("optional", False))
    if kind in ("list", "map"):
        return JsonType(kind, value=_type_from(obj.get("value", "json")), optional=optional)
    if kind == "struct":
        fields = obj.get("fields") or {}
        return JsonType("struct", fields={k: _type_from(v) for k, v in fields.items()}, optional=optional)
    return JsonType(str(kind), optional=optional)


def schema_to_json(t: JsonType | None) -> Any:
    """``config.types`` of a schema (a top-level struct is a plain field map)."""
    if t is None:
        return None
    if t.kind == "struct":
        return {k: _type_json(v) for k, v in (t.fields or {}).items()}
    return _type_json(t)


def schema_from_json(obj: Any) -> JsonType | None:
    """The schema a ``config.types`` value describes (None for None)."""
    if obj is None:
        return None
    if isinstance(obj, dict) and "type" not in obj and "kind" not in obj:
        return JsonType("struct", fields={k: _type_from(v) for k, v in obj.items()})
    return _type_from(obj)


def fuse_schema_json(a: Any, b: Any) -> Any:
    """Fuse two ``config.types`` values (the index merge of several workers, or an append)."""
    if a is None:
        return b
    if b is None:
        return a
    return schema_to_json(fuse_type(schema_from_json(a), schema_from_json(b)))


def schema_state(t: JsonType | None) -> Any:
    """A lossless JSON form of a schema (for checkpoints; ``config.types`` is not lossless)."""
    if t is None:
        return None
    return {
        "kind": t.kind,
        "value": schema_state(t.value),
        "fields": None if t.fields is None else {k: schema_state(v) for k, v in t.fields.items()},
        "optional": t.optional,
    }


def schema_from_state(obj: Any) -> JsonType | None:
    """Inverse of :func:`schema_state`."""
    if obj is None:
        return None
    fields = obj.get("fields")
    return JsonType(
        str(obj["kind"]),
        value=schema_from_state(obj.get("value")),
        fields=None if fields is None else {k: schema_from_state(v) for k, v in fields.items()},  # type: ignore[misc]
        optional=bool(obj.get("optional", False)),
    )


# --- decisions ------------------------------------------------------------------------------------


def is_json_row(value: Any) -> bool:
    """True for None, bool/int/float/str/bytes, and lists/dicts of those (what an Arrow row can hold)."""
    value = _unwrapped(value)
    if value is None or isinstance(value, (bool, int, float, str, bytes, bytearray)):
        return True
    if isinstance(value, list):
        return all(is_json_row(x) for x in value)
    if isinstance(value, dict):
        return all(is_json_row(x) for x in value.values())
    return False


def _is_nested(t: JsonType | None) -> bool:
    if t is None:
        return False
    if t.kind in ("list", "map", "json"):
        return True
    return t.kind == "struct" and any(_is_nested(v) for v in (t.fields or {}).values())


def _arrow_column(t: JsonType) -> bool:
    if t.kind not in _ARROW_KINDS:
        return False
    if t.kind == "struct":
        return all(_arrow_column(v) for v in (t.fields or {}).values())
    if t.kind in ("list", "map") and t.value is not None:
        return _arrow_column(t.value)
    return True


def is_arrow_footer_type(t: JsonType | None) -> bool:
    """True when samples of this schema are stored as Arrow rows: a non-empty struct of JSON-like fields (or a
    nested non-struct type, whose samples then still need to be dicts to be rows)."""
    if t is None:
        return False
    if t.kind == "struct":
        return bool(t.fields) and all(_arrow_column(v) for v in (t.fields or {}).values())
    return _is_nested(t)


def data_format_is_arrow_safe(data_format: list[str] | None) -> bool:
    """False when a leaf is media or a 1-D array/tensor: such samples stay in the pytree item bytes."""
    return all(name.split(":", 1)[0].lower() not in _NOT_ARROW_FORMATS for name in data_format or ())


def sample_payload_bytes(value: Any) -> tuple[int, int]:
    """``(binary, total)``: bytes of bytes-like values, and of everything (str: its length in characters;
    None: 0; other scalars: 8), summed over a sample's lists and dicts."""
    if value is None:
        return 0, 0
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value), len(value)
    if isinstance(value, str):
        return 0, len(value)
    if isinstance(value, (dict, list, tuple)):
        binary = total = 0
        for x in value.values() if isinstance(value, dict) else value:
            b, t = sample_payload_bytes(x)
            binary += b
            total += t
        return binary, total
    return 0, 8


def is_binary_heavy(sample: Any) -> bool:
    """True when bytes values make up most of the sample (IPC zstd is then skipped)."""
    binary, total = sample_payload_bytes(sample)
    return total > 0 and binary / total >= _BINARY_HEAVY_SHARE


def default_for(t: JsonType) -> Any:
    """The value a missing/None field of type ``t`` gets in the pytree leaves."""
    if t.kind == "struct":
        return {k: default_for(v) for k, v in (t.fields or {}).items()}
    return {"list": [], "map": {}, "int": 0, "float": 0.0, "bool": False, "bytes": b"", "str": ""}.get(t.kind)


def wrap_for_pytree(
    sample: Any, schema: JsonType, *, keys: list[str] | None = None, wrap_leaf: Callable[[Any], Any] | None = None
) -> Any:
    """The dict sample as it is flattened: fields in ``keys`` order (the first sample's; None: the schema's),
    missing/None fields filled with :func:`default_for`, list/map/json fields wrapped by ``wrap_leaf`` into one
    leaf (when JSON-like), nested structs treated the same way."""
    wrap = wrap_leaf or (lambda v: v)
    if schema.kind == "struct" and isinstance(sample, dict):
        fields = schema.fields or {}
        out: dict[str, Any] = {}
        for key in keys if keys is not None else list(fields):
            t = fields.get(key)
            if t is None:
                continue
            value = _unwrapped(sample.get(key))
            out[key] = _wrap_value(default_for(t) if value is None else value, t, wrap)
        return out
    return _wrap_value(sample, schema, wrap)


def _wrap_value(value: Any, t: JsonType, wrap: Callable[[Any], Any]) -> Any:
    if t.kind in ("list", "map", "json"):
        # a list of images or tensors stays what it is (its own serializer, e.g. jpeg_array)
        return wrap(value) if is_json_row(value) else value
    if t.kind == "struct":
        return wrap_for_pytree(value if isinstance(value, dict) else default_for(t), t, wrap_leaf=wrap)
    return value
