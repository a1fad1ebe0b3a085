"""``_core.dirs``: what users pass as a directory, as a ``Dir`` (``as_dir``) or as the local folder and URL of a
writer that caches locally (``local_and_url``, LitData's ``Cache``)."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from streamscope._core.dirs import Dir, local_and_url


def test_a_path_is_the_absolute_local_folder_without_url(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert local_and_url("data", "Cache") == (os.path.join(str(tmp_path), "data"), None)
    assert local_and_url(tmp_path / "x", "Cache") == (str(tmp_path / "x"), None)


def test_a_dir_or_an_object_like_it_gives_its_path_and_url() -> None:
    assert local_and_url(Dir(path="/l", url="s3://b/p"), "Cache") == ("/l", "s3://b/p")
    assert local_and_url(SimpleNamespace(path="/m", url=None), "Cache") == ("/m", None)  # LitData's own Dir


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "Cache needs an input_dir"),
        (Dir(url="s3://b/p"), "Cache needs a local path in"),
        ("s3://b/p", r"for a remote dataset pass Dir\(path=<local>, url='s3://b/p'\)"),
    ],
)
def test_what_gives_no_local_folder_is_a_value_error_saying_so(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        local_and_url(value, "Cache")
