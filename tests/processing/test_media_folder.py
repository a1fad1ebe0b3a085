"""list_media_folder / iter_webdataset_tar (LitData 0.2.76's input helpers)."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest

from streamscope import iter_webdataset_tar, list_media_folder


def _touch(path: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")


def test_list_media_folder_labels_by_class_folder(tmp_path: Any) -> None:
    for name in ["cat/a.JPG", "cat/b.png", "dog/c.jpeg", "dog/notes.txt", "top.webp", "vol/s.nii.gz"]:
        _touch(tmp_path / name)
    items = list_media_folder(str(tmp_path))
    assert items == [
        {"path": str(tmp_path / "cat/a.JPG"), "label": "cat"},
        {"path": str(tmp_path / "cat/b.png"), "label": "cat"},
        {"path": str(tmp_path / "dog/c.jpeg"), "label": "dog"},
        {"path": str(tmp_path / "top.webp"), "label": None},
    ]
    assert {i["label"] for i in list_media_folder(str(tmp_path), drop_labels=True)} == {None}
    assert list_media_folder(str(tmp_path), kind="text") == [{"path": str(tmp_path / "dog/notes.txt"), "label": "dog"}]
    assert [i["path"] for i in list_media_folder(str(tmp_path), kind="nifti")] == [str(tmp_path / "vol/s.nii.gz")]
    with pytest.raises(ValueError, match="unknown media kind 'images'"):
        list_media_folder(str(tmp_path), kind="images")


def test_iter_webdataset_tar_groups_members_by_key(tmp_path: Any) -> None:
    path = str(tmp_path / "shard-000.tar")
    with tarfile.open(path, "w") as tar:
        for name, data in [
            ("s/000.jpg", b"J0"),
            ("s/000.cls", b"3"),
            ("s/001.jpg", b"J1"),
            ("s/001.meta.json", b"{}"),
            ("s/README", b"no suffix: skipped"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert list(iter_webdataset_tar(path)) == [
        {"jpg": b"J0", "cls": b"3", "__key__": "000", "__url__": path},
        {"jpg": b"J1", "meta.json": b"{}", "__key__": "001", "__url__": path},
    ]
