"""Leaf serializers of LitData's chunk format, one class per ``data_format`` name.

A serializer turns one pytree leaf into bytes and back. ``serialize`` returns ``(bytes, name)`` where
``name`` is the ``data_format`` entry when it carries a parameter (``no_header_tensor:18``) and ``None``
otherwise (the registry key is used). ``deserialize`` accepts ``bytes`` or a ``memoryview`` (the reader hands
out zero-copy views of a memory-mapped chunk). Detection order is :func:`default_serializers`' key order:
the first serializer whose ``can_serialize`` accepts a leaf of the FIRST sample wins.

Heavy libraries (torch, PIL, torchvision, tifffile) are imported only when a leaf needs them: an object can
only be a tensor if torch is already imported, so detection never imports torch.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import sys
from typing import Any

import numpy as np

from streamscope._core.errors import FormatError
from streamscope._core.optional import require
from streamscope.format import dtypes, jsonleaf

__all__ = [
    "BooleanSerializer",
    "BytesSerializer",
    "FileSerializer",
    "FloatSerializer",
    "ImageSerializer",
    "IntegerSerializer",
    "JsonSerializer",
    "JPEGArraySerializer",
    "JPEGSerializer",
    "NoHeaderNumpySerializer",
    "NoHeaderTensorSerializer",
    "NumpySerializer",
    "PILSerializer",
    "PickleSerializer",
    "Serializer",
    "StringSerializer",
    "TIFFSerializer",
    "TensorSerializer",
    "VideoSerializer",
    "default_serializers",
    "key_for_format",
    "merge_serializers",
]

_VIDEO_EXTENSIONS = ("mp4", "ogv", "mjpeg", "avi", "mov", "h264", "mpg", "webm", "wmv")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_TENSOR_HEAD = struct.Struct(">II")


def _is_tensor(item: Any) -> bool:
    torch = dtypes.torch_loaded()
    return torch is not None and isinstance(item, torch.Tensor)


def _pil_image_cls() -> Any:
    mod = sys.modules.get("PIL.Image")
    return None if mod is None else mod.Image


def _is_jpeg(item: Any) -> bool:
    mod = sys.modules.get("PIL.JpegImagePlugin")
    return mod is not None and isinstance(item, mod.JpegImageFile)


class Serializer:
    """Base serializer (LitData-compatible shape)."""

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        """Encode ``item``; returns its bytes and its ``data_format`` name if parameterised, else None."""
        raise NotImplementedError

    def deserialize(self, data: bytes | memoryview) -> Any:
        """Decode the bytes of one leaf."""
        raise NotImplementedError

    def can_serialize(self, item: Any) -> bool:
        """True when this serializer handles ``item`` (used on the first sample only)."""
        raise NotImplementedError

    def setup(self, data_format: str) -> None:
        """Configure from a ``data_format`` entry (``no_header_*`` parse their dtype index here)."""

    def matches(self, item: Any) -> bool:
        """True when ``item`` can be written in a field this serializer was chosen for (schema check).

        Defaults to :meth:`can_serialize`; cheaper, filesystem-independent checks override it.
        """
        return self.can_serialize(item)


class StringSerializer(Serializer):
    """``str``: UTF-8 bytes. Like LitData, a string naming an existing file is not auto-detected as str."""

    def serialize(self, item: str) -> tuple[bytes, str | None]:
        return item.encode("utf-8"), None

    def deserialize(self, data: bytes | memoryview) -> str:
        return str(data, "utf-8")

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, str) and not os.path.isfile(item)

    def matches(self, item: Any) -> bool:
        return isinstance(item, str)


class BooleanSerializer(Serializer):
    """``bool``: one byte 0x00/0x01."""

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        return (b"\x01" if item else b"\x00"), None

    def deserialize(self, data: bytes | memoryview) -> bool:
        return data[0] != 0

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, bool)


class IntegerSerializer(Serializer):
    """``int``: 8 bytes int64 little-endian."""

    size = 8

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        try:
            return _I64.pack(item), None
        except struct.error:
            raise FormatError(f"integer {item} does not fit in int64") from None

    def deserialize(self, data: bytes | memoryview) -> int:
        return _I64.unpack_from(data)[0]

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, int)

    def matches(self, item: Any) -> bool:
        return isinstance(item, int) and not isinstance(item, bool)


class FloatSerializer(Serializer):
    """``float``: 8 bytes float64 little-endian."""

    size = 8

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        return _F64.pack(item), None

    def deserialize(self, data: bytes | memoryview) -> float:
        return _F64.unpack_from(data)[0]

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, float)


class _RawFileSerializer(Serializer):
    """Raw bytes of a file named by a string leaf."""

    def _read(self, path: str) -> bytes:
        if not isinstance(path, str) or not os.path.isfile(path):
            raise FormatError(f"{type(self).__name__} needs an existing file path, got {path!r}")
        with open(path, "rb") as f:
            return f.read()


class VideoSerializer(_RawFileSerializer):
    """``video:{ext}``: raw bytes of a video file; decodes with torchvision (or torchcodec)."""

    def serialize(self, item: str) -> tuple[bytes, str | None]:
        return self._read(item), f"video:{os.path.splitext(item)[1][1:]}"

    def deserialize(self, data: bytes | memoryview) -> Any:
        import tempfile  # noqa: PLC0415

        tvio = require("torchvision.io", "decoding a `video` leaf", "video")
        with tempfile.NamedTemporaryFile(suffix=".mp4") as f:
            f.write(bytes(data))
            f.flush()
            return tvio.read_video(f.name, pts_unit="sec")

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, str) and os.path.isfile(item) and item.endswith(_VIDEO_EXTENSIONS)


class TIFFSerializer(_RawFileSerializer):
    """``tifffile``: raw bytes of a .tif/.tiff file; decodes to an ndarray with tifffile."""

    def serialize(self, item: str) -> tuple[bytes, str | None]:
        return self._read(item), None

    def deserialize(self, data: bytes | memoryview) -> Any:
        tifffile = require("tifffile", "decoding a `tifffile` leaf", "image")
        return tifffile.imread(io.BytesIO(bytes(data)))

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, str) and os.path.isfile(item) and item.lower().endswith((".tif", ".tiff"))


class FileSerializer(_RawFileSerializer):
    """``file:{ext}``: raw bytes of any file; never auto-detected (pass it explicitly)."""

    def serialize(self, item: str) -> tuple[bytes, str | None]:
        return self._read(item), f"file:{os.path.splitext(item)[1][1:]}"

    def deserialize(self, data: bytes | memoryview) -> bytes:
        return bytes(data)

    def can_serialize(self, item: Any) -> bool:
        return False

    def matches(self, item: Any) -> bool:
        return isinstance(item, str)


class PILSerializer(Serializer):
    """``pil``: ``u32 width, u32 height, u32 len(mode)``, mode ASCII, then ``img.tobytes()``."""

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        mode = item.mode.encode("utf-8")
        width, height = item.size
        return struct.pack("<III", width, height, len(mode)) + mode + item.tobytes(), None

    def deserialize(self, data: bytes | memoryview) -> Any:
        Image = require("PIL.Image", "decoding a `pil` leaf", "image")  # noqa: N806

        width, height, mode_len = struct.unpack_from("<III", data, 0)
        mode = str(data[12 : 12 + mode_len], "utf-8")
        return Image.frombytes(mode, (width, height), bytes(data[12 + mode_len :]))

    def can_serialize(self, item: Any) -> bool:
        cls = _pil_image_cls()
        return cls is not None and isinstance(item, cls) and not _is_jpeg(item)


def _jpeg_bytes(item: Any) -> bytes:
    if _is_jpeg(item):
        filename = getattr(item, "filename", None)
        if filename and os.path.isfile(filename):
            with open(filename, "rb") as f:
                return f.read()
        buf = io.BytesIO()
        item.save(buf, format="JPEG")
        return buf.getvalue()
    cls = _pil_image_cls()
    if cls is not None and isinstance(item, cls):
        buf = io.BytesIO()
        item.convert("RGB").save(buf, quality=100, format="JPEG")
        return buf.getvalue()
    raise FormatError(f"the jpeg serializer needs a PIL JpegImageFile, got {type(item).__name__}")


def _decode_jpeg(data: bytes | memoryview) -> Any:
    """JPEG bytes -> uint8 CHW RGB tensor (torchvision when present, else PIL + numpy)."""
    import torch  # noqa: PLC0415

    try:
        from torchvision.io import ImageReadMode, decode_image  # noqa: PLC0415
    except ImportError:
        Image = require("PIL.Image", "decoding a `jpeg` leaf (torchvision or pillow)", "image")  # noqa: N806

        with Image.open(io.BytesIO(bytes(data))) as img:
            arr = np.asarray(img.convert("RGB"))
        return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
    return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)


class JPEGSerializer(Serializer):
    """``jpeg``: the JPEG file's bytes (or a re-encoding); decodes to a uint8 CHW RGB tensor."""

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        return _jpeg_bytes(item), None

    def deserialize(self, data: bytes | memoryview) -> Any:
        return _decode_jpeg(data)

    def can_serialize(self, item: Any) -> bool:
        return _is_jpeg(item)

    def matches(self, item: Any) -> bool:
        """Later samples of a ``jpeg`` field may be any PIL image: re-encoded as JPEG (quality 100), as LitData."""
        cls = _pil_image_cls()
        return _is_jpeg(item) or (cls is not None and isinstance(item, cls))

    # a leaf that does not fit a jpeg field: LitData's sentence leads the error
    litdata_mismatch = "The provided item should be of type `JpegImageFile`. Found {item}."


class JPEGArraySerializer(Serializer):
    """``jpeg_array``: ``u32 n, u32 sizes[n]`` then the JPEG bytes; decodes to a list of tensors."""

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        blobs = [_jpeg_bytes(x) for x in item]
        head = struct.pack(f"<I{len(blobs)}I", len(blobs), *(len(b) for b in blobs))
        return head + b"".join(blobs), None

    def deserialize(self, data: bytes | memoryview) -> list[Any]:
        if len(data) < 4:
            raise FormatError(f"jpeg_array leaf of {len(data)} bytes is too short for its count")
        (n,) = _U32.unpack_from(data, 0)
        pos = 4 + 4 * n
        if len(data) < pos:
            raise FormatError(f"jpeg_array leaf of {len(data)} bytes is too short for {n} sizes")
        sizes = struct.unpack_from(f"<{n}I", data, 4)
        out = []
        for size in sizes:
            if pos + size > len(data):
                raise FormatError(f"jpeg_array image of {size} bytes runs past the leaf end ({len(data)} bytes)")
            out.append(_decode_jpeg(data[pos : pos + size]))
            pos += size
        return out

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, (list, tuple)) and all(_is_jpeg(x) for x in item)


class BytesSerializer(Serializer):
    """``bytes``: raw bytes."""

    def serialize(self, item: bytes) -> tuple[bytes, str | None]:
        return item, None

    def deserialize(self, data: bytes | memoryview) -> bytes:
        return bytes(data)

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, bytes)


class NoHeaderNumpySerializer(Serializer):
    """``no_header_numpy:{d}``: a 1-D array's raw bytes; decodes zero-copy with ``np.frombuffer``."""

    def __init__(self) -> None:
        self._dtype: np.dtype | None = None

    def setup(self, data_format: str) -> None:
        self._dtype = dtypes.numpy_dtype(_format_index(data_format))

    def serialize(self, item: np.ndarray) -> tuple[bytes, str | None]:
        idx = dtypes.numpy_dtype_index(item.dtype)
        if idx is None:
            raise FormatError(f"numpy dtype {item.dtype} cannot be stored raw (use pickle)")
        return item.tobytes(order="C"), f"no_header_numpy:{idx}"

    def deserialize(self, data: bytes | memoryview) -> np.ndarray:
        if self._dtype is None:
            raise FormatError("no_header_numpy serializer used before setup('no_header_numpy:{index}')")
        return np.frombuffer(data, dtype=self._dtype)

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, np.ndarray) and item.ndim == 1 and dtypes.numpy_dtype_index(item.dtype) is not None


class NumpySerializer(Serializer):
    """``numpy``: ``u32 dtype_idx, u32 ndim, u32 dims[ndim]`` then C-order bytes (arrays with ndim > 1)."""

    def serialize(self, item: np.ndarray) -> tuple[bytes, str | None]:
        idx = dtypes.numpy_dtype_index(item.dtype)
        if idx is None:
            raise FormatError(f"numpy dtype {item.dtype} cannot be stored raw (use pickle)")
        head = struct.pack(f"<II{item.ndim}I", idx, item.ndim, *item.shape)
        return head + item.tobytes(order="C"), None

    def deserialize(self, data: bytes | memoryview) -> np.ndarray:
        idx, ndim = struct.unpack_from("<II", data, 0)
        shape = struct.unpack_from(f"<{ndim}I", data, 8)
        arr = np.frombuffer(data, dtype=dtypes.numpy_dtype(idx), offset=8 + 4 * ndim)
        return arr.reshape(shape)

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, np.ndarray) and item.ndim > 1 and dtypes.numpy_dtype_index(item.dtype) is not None


def _tensor_bytes(item: Any) -> bytes:
    torch = dtypes.torch_loaded()
    t = item.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: store its bits
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def _tensor_from(data: bytes | memoryview, index: int, shape: tuple[int, ...] | None = None) -> Any:
    """A writable tensor holding a private copy of ``data`` (a view into a read-only mmap could segfault)."""
    torch = dtypes.torch_loaded() or dtypes._torch()
    npdt = dtypes.TORCH_INDEX_NUMPY[index] if 0 <= index < len(dtypes.TORCH_INDEX_NUMPY) else None
    if npdt is not None:  # numpy's copy + from_numpy is about 2x faster than torch.frombuffer
        arr = np.frombuffer(data, dtype=npdt)
        if shape is not None:
            arr = arr.reshape(shape)
        return torch.from_numpy(arr.copy())
    dtype = dtypes.torch_dtype(index)
    if len(data) == 0:
        t = torch.empty((0,), dtype=dtype)
    else:
        t = torch.frombuffer(bytearray(data), dtype=dtype)
    return t if shape is None else t.reshape(shape)


class NoHeaderTensorSerializer(Serializer):
    """``no_header_tensor:{d}``: a 1-D tensor's raw bytes."""

    def __init__(self) -> None:
        self._index: int | None = None

    def setup(self, data_format: str) -> None:
        idx = _format_index(data_format)
        dtypes.torch_dtype(idx)  # validates the index
        self._index = idx

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        return _tensor_bytes(item), f"no_header_tensor:{dtypes.torch_dtype_index(item.dtype)}"

    def deserialize(self, data: bytes | memoryview) -> Any:
        if self._index is None:
            raise FormatError("no_header_tensor serializer used before setup('no_header_tensor:{index}')")
        return _tensor_from(data, self._index)

    def can_serialize(self, item: Any) -> bool:
        return _is_tensor(item) and item.ndim == 1


_SHAPE_STRUCTS: dict[int, struct.Struct] = {}


class TensorSerializer(Serializer):
    """``tensor``: big-endian ``u32 dtype_idx, u32 rank, u32 dims[rank]`` then native (LE) data."""

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        idx = dtypes.torch_dtype_index(item.dtype)
        head = struct.pack(f">II{item.ndim}I", idx, item.ndim, *item.shape)
        return head + _tensor_bytes(item), None

    def deserialize(self, data: bytes | memoryview) -> Any:
        idx, rank = _TENSOR_HEAD.unpack_from(data, 0)
        st = _SHAPE_STRUCTS.get(rank)
        if st is None:
            st = _SHAPE_STRUCTS[rank] = struct.Struct(f">{rank}I")
        shape = st.unpack_from(data, 8)
        start = 8 + 4 * rank
        if start >= len(data):
            if all(shape) and shape:  # a non-empty shape needs data
                raise FormatError(f"tensor leaf of shape {tuple(shape)} has no data bytes")
            torch = dtypes.torch_loaded() or dtypes._torch()
            return torch.empty(shape, dtype=dtypes.torch_dtype(idx))
        return _tensor_from(data[start:], idx, shape)

    def can_serialize(self, item: Any) -> bool:
        return _is_tensor(item) and item.ndim != 1


class ImageSerializer(Serializer):
    """``image:{ext}`` (LitData 0.2.76): an image file's bytes (a str path to a .png/.jpg/... file); decodes to a
    uint8 CHW RGB tensor like ``jpeg``. Reading only: streamscope does not pick it when writing."""

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        raise FormatError("streamscope writes image files as `pil`/`jpeg` leaves, not `image:{ext}`")

    def deserialize(self, data: bytes | memoryview) -> Any:
        return _decode_jpeg(data)

    def can_serialize(self, item: Any) -> bool:
        return False


class JsonSerializer(Serializer):
    """``json`` (LitData 0.2.76): a list/dict field as one tagged-binary leaf (:mod:`streamscope.format.jsonleaf`).

    Only a :class:`~streamscope.format.jsonleaf.JsonLeaf` marker is detected, so plain samples keep their
    0.2.68 leaves unless the writer wraps a field.
    """

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        return jsonleaf.encode(item.value if isinstance(item, jsonleaf.JsonLeaf) else item), "json"

    def deserialize(self, data: bytes | memoryview) -> Any:
        return jsonleaf.decode(data)

    def can_serialize(self, item: Any) -> bool:
        return isinstance(item, jsonleaf.JsonLeaf)


class PickleSerializer(Serializer):
    """``pickle``: ``pickle.dumps`` with the default protocol; accepts anything."""

    def serialize(self, item: Any) -> tuple[bytes, str | None]:
        return pickle.dumps(item), None

    def deserialize(self, data: bytes | memoryview) -> Any:
        return pickle.loads(data)  # noqa: S301 (datasets are trusted input, as in LitData)

    def can_serialize(self, item: Any) -> bool:
        return True


def _format_index(data_format: str) -> int:
    try:
        return int(data_format.split(":", 1)[1])
    except (IndexError, ValueError):
        raise FormatError(f"data_format {data_format!r} lacks a dtype index (expected name:index)") from None


#: Registry order = detection order (LitData's).
_ORDER: tuple[tuple[str, type[Serializer]], ...] = (
    ("str", StringSerializer),
    ("bool", BooleanSerializer),
    ("int", IntegerSerializer),
    ("float", FloatSerializer),
    ("video", VideoSerializer),
    ("tifffile", TIFFSerializer),
    ("file", FileSerializer),
    ("pil", PILSerializer),
    ("jpeg", JPEGSerializer),
    ("jpeg_array", JPEGArraySerializer),
    ("bytes", BytesSerializer),
    ("no_header_numpy", NoHeaderNumpySerializer),
    ("numpy", NumpySerializer),
    ("no_header_tensor", NoHeaderTensorSerializer),
    ("tensor", TensorSerializer),
    ("image", ImageSerializer),
    ("json", JsonSerializer),
    ("pickle", PickleSerializer),
)


def default_serializers() -> dict[str, Serializer]:
    """Fresh instances of every built-in serializer, in LitData's detection order."""
    return {name: cls() for name, cls in _ORDER}


def merge_serializers(user: dict[str, Serializer] | None) -> dict[str, Serializer]:
    """User serializers first (they win detection), then the built-ins they do not replace."""
    out: dict[str, Serializer] = dict(user or {})
    for name, ser in default_serializers().items():
        out.setdefault(name, ser)
    return out


_MDS_ALIASES = {"pkl": "pickle"}


def key_for_format(data_format: str, serializers: dict[str, Serializer]) -> str:
    """Registry key for a ``data_format`` entry: for ``a:b``, ``b`` if registered, else ``a``."""
    if data_format in _MDS_ALIASES and data_format not in serializers:
        return _MDS_ALIASES[data_format]
    if ":" in data_format:
        head, sub = data_format.split(":", 1)
        return sub if sub in serializers else head
    return data_format
