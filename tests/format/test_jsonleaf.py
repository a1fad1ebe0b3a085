"""The ``json`` leaf: byte-identical to LitData 0.2.76's JsonSerializer, and read back the same way."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscope._core.errors import FormatError
from streamscope.format import jsonleaf
from streamscope.format.item_loader import PyTreeLoader
from streamscope.format.serializers import JsonSerializer, default_serializers

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.integers(min_value=2**63, max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _TEXT
)


def _records(children: Any) -> Any:
    """Lists of dicts with one key set (the records tag), sometimes holding a value records cannot take."""
    keys = st.lists(_TEXT, min_size=1, max_size=3, unique=True)
    cell = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | _TEXT
    return keys.flatmap(
        lambda ks: st.lists(st.fixed_dictionaries({k: cell | children for k in ks}), min_size=1, max_size=4)
    )


_VALUES = st.recursive(
    _SCALAR,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)
        | st.lists(st.floats(), max_size=4)
        | st.lists(st.booleans(), max_size=4)
        | st.lists(_TEXT, max_size=4)
        | st.dictionaries(_TEXT, children, max_size=4)
        | st.dictionaries(st.integers(-5, 5), children, max_size=2)  # non-str keys: the whole dict is JSON
        | st.tuples(children, children)  # not a list: JSON (as a list)
        | _records(children)
    ),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


_LD = "litdata.streaming.serializers"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_VALUES)
def test_encode_matches_litdata_076_byte_for_byte(ld076: Any, value: Any) -> None:
    mine = jsonleaf.encode(value)
    assert mine == ld076.call(f"{_LD}._nested_dumps", value)
    assert _same(jsonleaf.decode(mine), ld076.call(f"{_LD}._nested_loads", mine))
    # as a leaf: the serializer names it `json`, like LitData's JsonSerializer
    assert JsonSerializer().serialize(jsonleaf.JsonLeaf(value)) == (mine, "json")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.lists(_VALUES, max_size=3) | st.dictionaries(_TEXT, _VALUES, max_size=3))
def test_legacy_json_payloads_read_like_litdata(ld076: Any, value: Any) -> None:
    """Leaves of earlier 0.2.76 writers are plain JSON starting with ``[`` or ``{``."""
    payload = json.dumps(value, ensure_ascii=False).encode("utf-8")
    assert _same(jsonleaf.decode(payload), ld076.call(f"{_LD}._nested_loads", payload))


def test_worked_example_in_the_docstring() -> None:
    got = jsonleaf.encode({"k": [1, 2]})
    want = bytes.fromhex("05 01000000 01000000 6b 02 02000000 0100000000000000 0200000000000000".replace(" ", ""))
    assert got == want
    assert jsonleaf.decode(got) == {"k": [1, 2]}


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ([], 1),
        (["a"], 1),
        ([1, 2], 2),
        ([1.0], 3),
        ([True], 4),
        ({"a": 1}, 5),
        ([{"a": 1}, {"a": None}], 6),
        ("s", 7),
        (3, 8),
        (2.5, 9),
        (False, 10),
        (None, 11),
        ([1, 2.5], 0),  # mixed: JSON
        ([True, 1], 0),
        ([2**63], 0),  # outside int64: JSON
        ({1: "a"}, 0),
        ([{"a": 1}, {"b": 1}], 0),  # records need one key set
        ([{"a": [1]}], 0),  # and scalar cells
    ],
)
def test_tags(value: Any, tag: int) -> None:
    enc = jsonleaf.encode(value)
    assert enc[0] == tag
    back = jsonleaf.decode(enc)
    assert back == (json.loads(json.dumps(value)) if tag == 0 else value)


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x01\x05\x00\x00\x00",  # 5 strings announced, none there
        b"\x02\x03\x00\x00\x00" + struct.pack("<q", 1),  # 3 ints announced, one there
        b"\x07\xff\x00\x00\x00ab",  # a 255-byte string of 2 bytes
        b"\x05\x01\x00\x00\x00\x01\x00\x00\x00k\x0f",  # dict value with unknown tag 15
        b"\x06\x01\x00\x00\x00\x01\x00\x00\x00k\x19",  # record cell tag 0x19
        b"\x00\x09\x00\x00\x00[1,",  # JSON truncated
        b"[1, 2",  # legacy JSON truncated
        b"\x07\x02\x00\x00\x00\xff\xfe",  # invalid UTF-8
    ],
)
def test_bad_payloads_raise_a_clear_error(payload: bytes) -> None:
    with pytest.raises(FormatError, match="json leaf"):
        jsonleaf.decode(payload)


def test_whitespace_led_json_is_json() -> None:
    """A payload led by a byte that is not a tag (JSON whitespace) is parsed as JSON, as LitData does."""
    assert jsonleaf.decode(b"\r[1, 2]") == [1, 2]
    assert jsonleaf.decode(b' {"a": 1}') == {"a": 1}


def test_json_leaf_through_the_item_loader() -> None:
    """A `json` data_format entry resolves to the serializer (and `file:json` too, as LitData resolves it)."""
    assert "json" in default_serializers()
    loader = PyTreeLoader()
    loader.setup({"data_format": ["int", "json"], "data_spec": None})
    leaf = jsonleaf.encode({"tags": ["a", "b"], "n": None})
    item = struct.pack("<II", 8, len(leaf)) + struct.pack("<q", 5) + leaf
    assert loader.decode(memoryview(item)) == [5, {"tags": ["a", "b"], "n": None}]


def test_plain_values_are_not_detected_as_json() -> None:
    ser = JsonSerializer()
    assert not ser.can_serialize([1, 2])
    assert not ser.can_serialize({"a": 1})
    assert ser.can_serialize(jsonleaf.JsonLeaf([1, 2]))
