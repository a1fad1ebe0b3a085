"""Pytree flattening and the ``data_spec`` encoding of LitData's index.json (protocol 1).

Containers are recognised by EXACT type: ``tuple``, ``list``, ``dict``, namedtuples, ``OrderedDict``,
``defaultdict`` and ``deque``; anything else (including subclasses of those, and non-empty lists/tuples whose
items are all PIL JPEG images, which form one ``jpeg_array`` leaf) is a leaf. Dict children follow insertion
order. ``treespec_dumps`` produces exactly ``json.dumps((1, schema))`` where a schema node is
``{"type": name|null, "context": json-string|object|null, "children_spec": [...]}``.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamscope._core.errors import FormatError

__all__ = [
    "LEAF_SPEC",
    "NAMEDTUPLE",
    "TreeSpec",
    "compile_unflatten",
    "leaf_paths",
    "register_namedtuple",
    "spec_difference",
    "tree_flatten",
    "tree_unflatten",
    "treespec_dumps",
    "treespec_loads",
]


class _NamedTupleMarker:
    """Stands for "some namedtuple class" in :attr:`TreeSpec.type`; the class itself is the context."""


NAMEDTUPLE = _NamedTupleMarker

_TYPE_NAMES: dict[Any, str] = {
    tuple: "builtins.tuple",
    list: "builtins.list",
    dict: "builtins.dict",
    NAMEDTUPLE: "collections.namedtuple",
    OrderedDict: "collections.OrderedDict",
    defaultdict: "collections.defaultdict",
    deque: "collections.deque",
}
_NAME_TYPES: dict[str, Any] = {v: k for k, v in _TYPE_NAMES.items()}

_namedtuple_names: dict[type, str] = {}
_namedtuple_classes: dict[str, type] = {}


def register_namedtuple(cls: type, serialized_type_name: str) -> None:
    """Give namedtuple ``cls`` the name stored in ``data_spec`` (LitData's ``_register_namedtuple``)."""
    _namedtuple_names[cls] = serialized_type_name
    _namedtuple_classes[serialized_type_name] = cls


@dataclass
class TreeSpec:
    """Structure of a pytree: node ``type`` (None for a leaf), its ``context`` and child specs."""

    type: Any
    context: Any
    children_specs: list[TreeSpec] = field(default_factory=list)
    num_leaves: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        self.num_leaves = 1 if self.type is None else sum(c.num_leaves for c in self.children_specs)

    def is_leaf(self) -> bool:
        """True for a leaf spec."""
        return self.type is None


LEAF_SPEC = TreeSpec(None, None, [])


def _is_namedtuple(obj: Any) -> bool:
    typ = type(obj)
    bases = typ.__bases__
    if len(bases) != 1 or bases[0] is not tuple:
        return False
    fields = getattr(typ, "_fields", None)
    return isinstance(fields, tuple) and all(type(f) is str for f in fields)


def _is_jpeg_list(obj: Any) -> bool:
    mod = sys.modules.get("PIL.JpegImagePlugin")
    if mod is None or not obj:
        return False
    return all(isinstance(x, mod.JpegImageFile) for x in obj)


def _node(obj: Any) -> tuple[Any, Any, list[Any]] | None:
    """``(type, context, children)`` for a container, None for a leaf."""
    typ = type(obj)
    if typ is dict:
        return dict, list(obj.keys()), list(obj.values())
    if typ is list:
        if _is_jpeg_list(obj):
            return None
        return list, None, list(obj)
    if typ is tuple:
        if _is_jpeg_list(obj):
            return None
        return tuple, None, list(obj)
    if typ is OrderedDict:
        return OrderedDict, list(obj.keys()), list(obj.values())
    if typ is defaultdict:
        return defaultdict, [obj.default_factory, list(obj.keys())], list(obj.values())
    if typ is deque:
        return deque, obj.maxlen, list(obj)
    if _is_namedtuple(obj):
        return NAMEDTUPLE, typ, list(obj)
    return None


def _flatten(obj: Any, leaves: list[Any]) -> TreeSpec:
    node = _node(obj)
    if node is None:
        leaves.append(obj)
        return LEAF_SPEC
    typ, ctx, children = node
    return TreeSpec(typ, ctx, [_flatten(c, leaves) for c in children])


def tree_flatten(sample: Any) -> tuple[list[Any], TreeSpec]:
    """Leaves of ``sample`` in order, and its structure."""
    leaves: list[Any] = []
    spec = _flatten(sample, leaves)
    return leaves, spec


def _build(spec: TreeSpec, it: Any) -> Any:
    if spec.type is None:
        return next(it)
    children = [_build(c, it) for c in spec.children_specs]
    typ, ctx = spec.type, spec.context
    if typ is dict:
        return dict(zip(ctx, children))
    if typ is list:
        return children
    if typ is tuple:
        return tuple(children)
    if typ is OrderedDict:
        return OrderedDict(zip(ctx, children))
    if typ is defaultdict:
        return defaultdict(ctx[0], zip(ctx[1], children))
    if typ is deque:
        return deque(children, maxlen=ctx)
    if typ is NAMEDTUPLE:
        return ctx(*children)
    raise FormatError(f"unknown pytree node type {typ!r}")


def tree_unflatten(leaves: list[Any], spec: TreeSpec) -> Any:
    """Rebuild a sample from its leaves and structure."""
    if len(leaves) != spec.num_leaves:
        raise FormatError(f"tree_unflatten got {len(leaves)} leaves for a spec with {spec.num_leaves}")
    return _build(spec, iter(leaves))


def compile_unflatten(spec: TreeSpec) -> Callable[[list[Any]], Any]:
    """A specialised ``leaves -> sample`` function for ``spec`` (hot path of the reader)."""
    if spec.type is None:
        return lambda leaves: leaves[0]
    flat = all(c.type is None for c in spec.children_specs)
    if flat:
        if spec.type is dict:
            keys = tuple(spec.context)
            return lambda leaves: dict(zip(keys, leaves))
        if spec.type is list:
            return list
        if spec.type is tuple:
            return tuple
    return lambda leaves: _build(spec, iter(leaves))


# --- data_spec (de)serialisation -------------------------------------------------------------------


def _namedtuple_name(cls: type) -> str:
    name = _namedtuple_names.get(cls)
    if name is not None:
        return name
    return f"{cls.__module__}.{cls.__qualname__}"


def _namedtuple_class(name: str) -> Any:
    cls = _namedtuple_classes.get(name)
    if cls is not None:
        return cls
    module, _, qual = name.rpartition(".")
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        return obj
    except (ImportError, AttributeError, ValueError):
        return tuple  # unknown namedtuple: rebuild a plain tuple of its fields


def _to_json(spec: TreeSpec) -> dict[str, Any]:
    if spec.type is None:
        return {"type": None, "context": None, "children_spec": []}
    typ, ctx = spec.type, spec.context
    try:
        if typ is NAMEDTUPLE:
            context: Any = _namedtuple_name(ctx)
        elif typ is defaultdict:
            factory, keys = ctx
            if factory is None:
                raise FormatError("a defaultdict without default_factory cannot be stored in data_spec")
            context = {
                "default_factory_module": factory.__module__,
                "default_factory_name": factory.__qualname__,
                "dict_context": keys,
            }
        else:
            context = json.dumps(ctx)
    except TypeError as exc:
        raise FormatError(f"pytree node {_TYPE_NAMES[typ]} has keys that JSON cannot store: {exc}") from None
    return {
        "type": _TYPE_NAMES[typ],
        "context": context,
        "children_spec": [_to_json(c) for c in spec.children_specs],
    }


def _from_json(node: Any) -> TreeSpec:
    if not isinstance(node, dict) or not {"type", "context", "children_spec"} <= node.keys():
        raise FormatError(f"data_spec node is malformed: {node!r:.200}")
    name, ctx, children = node["type"], node["context"], node["children_spec"]
    if name is None and ctx is None and not children:
        return LEAF_SPEC
    typ = _NAME_TYPES.get(name)
    if typ is None:
        raise FormatError(f"data_spec names an unknown node type {name!r}; known: {sorted(_NAME_TYPES)}")
    if typ is NAMEDTUPLE:
        cls = _namedtuple_class(ctx)
        if cls is tuple:
            typ, context = tuple, None
        else:
            context = cls
    elif typ is defaultdict:
        module = importlib.import_module(ctx["default_factory_module"])
        factory: Any = module
        for part in ctx["default_factory_name"].split("."):
            factory = getattr(factory, part)
        context = [factory, ctx["dict_context"]]
    else:
        context = json.loads(ctx)
    return TreeSpec(typ, context, [_from_json(c) for c in children])


def treespec_dumps(spec: TreeSpec) -> str:
    """The ``data_spec`` string of ``spec``: ``json.dumps((1, schema))``."""
    return json.dumps((1, _to_json(spec)))


def treespec_loads(s: str) -> TreeSpec:
    """Parse a ``data_spec`` string."""
    try:
        protocol, schema = json.loads(s)
    except (ValueError, TypeError) as exc:
        raise FormatError(f"data_spec is not valid JSON [protocol, schema]: {exc}") from None
    if protocol != 1:
        raise FormatError(f"data_spec uses protocol {protocol}; only protocol 1 is known")
    return _from_json(schema)


# --- paths (for error messages) --------------------------------------------------------------------


def _child_paths(spec: TreeSpec) -> list[str]:
    typ, ctx = spec.type, spec.context
    n = len(spec.children_specs)
    if typ in (dict, OrderedDict):
        return [f"[{k!r}]" for k in ctx]
    if typ is defaultdict:
        return [f"[{k!r}]" for k in ctx[1]]
    if typ is NAMEDTUPLE:
        return [f".{f}" for f in ctx._fields]
    return [f"[{i}]" for i in range(n)]


def leaf_paths(spec: TreeSpec) -> list[str]:
    """Path of each leaf, e.g. ``["label"]`` or ``[0]["x"]``; the root leaf is ``<root>``."""
    out: list[str] = []

    def walk(s: TreeSpec, prefix: str) -> None:
        if s.type is None:
            out.append(prefix or "<root>")
            return
        for p, c in zip(_child_paths(s), s.children_specs):
            walk(c, prefix + p)

    walk(spec, "")
    return out


def _describe(spec: TreeSpec) -> str:
    if spec.type is None:
        return "a leaf"
    name = _TYPE_NAMES[spec.type]
    if spec.type in (dict, OrderedDict):
        return f"{name} with keys {list(spec.context)}"
    if spec.type is defaultdict:
        return f"{name} with keys {list(spec.context[1])}"
    return f"{name} of {len(spec.children_specs)} items"


def spec_difference(expected: TreeSpec, got: TreeSpec) -> tuple[str, str]:
    """``(path, explanation)`` of the first place where ``got`` differs from ``expected``."""

    def walk(e: TreeSpec, g: TreeSpec, prefix: str) -> tuple[str, str] | None:
        same_node = e.type == g.type and len(e.children_specs) == len(g.children_specs)
        if same_node and e.type is not None:
            if e.type is defaultdict:
                same_node = e.context[1] == g.context[1] and e.context[0] is g.context[0]
            else:
                same_node = e.context == g.context
        if not same_node:
            return prefix or "<root>", f"expected {_describe(e)}, got {_describe(g)}"
        for p, ce, cg in zip(_child_paths(e), e.children_specs, g.children_specs):
            r = walk(ce, cg, prefix + p)
            if r is not None:
                return r
        return None

    return walk(expected, got, "") or ("<root>", "structures differ")
