"""Input lists for ``optimize``/``map`` from media on disk (LitData 0.2.76's ``list_media_folder`` and
``iter_webdataset_tar``).

``list_media_folder(root, kind)`` walks a class-folder tree (``root/<class>/<file>``) and lists the files of one
media kind as ``{"path": absolute path, "label": class folder name}`` (``label`` None for a file directly under
``root`` or with ``drop_labels``), sorted by path. ``iter_webdataset_tar(path)`` yields one dict per WebDataset
sample of a tar: the bytes of each member under its suffix (``"jpg"``, ``"cls"``, ``"json"``, ...), plus
``__key__`` (the member name before its first dot) and ``__url__`` (the tar's path). Members of one sample are
consecutive in a WebDataset tar; a new key starts a new sample.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from typing import Any

__all__ = ["KINDS", "iter_webdataset_tar", "list_media_folder"]


#: File name suffixes of each media kind (lower case, without the dot).
KINDS: dict[str, tuple[str, ...]] = {
    "text": ("txt", "md"),
    "image": ("jpg", "jpeg", "png", "bmp", "gif", "webp", "tif", "tiff"),
    "video": ("mp4", "ogv", "mjpeg", "avi", "mov", "h264", "mpg", "mpeg", "webm", "wmv", "mkv"),
    "audio": ("wav", "mp3", "flac", "ogg", "opus", "m4a", "aac", "wma", "pcm"),
    "mesh": ("glb", "ply", "stl"),
    "pdf": ("pdf",),
    "nifti": ("nii", "nii.gz"),
}


def _suffix(name: str) -> str:
    lower = name.lower().split("?", 1)[0]
    return "nii.gz" if lower.endswith(".nii.gz") else os.path.splitext(lower)[1][1:]


def list_media_folder(root: str, kind: str = "image", drop_labels: bool = False) -> list[dict[str, Any]]:
    """The ``kind`` files under ``root`` as ``{"path", "label"}`` dicts, sorted by path.

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown media kind {kind!r}; expected one of {sorted(KINDS)}")
    wanted = KINDS[kind]
    root = os.path.abspath(root)
    items = []
    for folder, _dirs, files in os.walk(root):
        label = None if drop_labels or os.path.abspath(folder) == root else os.path.basename(folder)
        items += [{"path": os.path.join(folder, f), "label": label} for f in files if _suffix(f) in wanted]
    return sorted(items, key=lambda item: item["path"])


def iter_webdataset_tar(tar_path: str) -> Iterator[dict[str, Any]]:
    """One dict per WebDataset sample of ``tar_path`` (see the module docstring)."""
    sample: dict[str, Any] = {}
    key: str | None = None
    with tarfile.open(tar_path, "r") as tar:
        for member in tar:
            base = os.path.basename(member.name.replace("\\", "/"))
            if not member.isfile() or "." not in base:
                continue
            member_key, field = base.split(".", 1)
            if key is not None and member_key != key:
                yield {**sample, "__key__": key, "__url__": tar_path}
                sample = {}
            key = member_key
            data = tar.extractfile(member)
            if data is not None:
                sample[field] = data.read()
    if key is not None:
        yield {**sample, "__key__": key, "__url__": tar_path}
