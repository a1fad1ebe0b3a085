"""LitData's README quick start, line for line, with both engines (PIL images, default batch_size=1)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.compat.conftest import both

pytestmark = pytest.mark.interop


def _image(img: Any) -> Any:
    # its first four pixels (getpixel: Image.getdata is deprecated in Pillow 13, get_flattened_data not in Pillow 10)
    return type(img).__name__, img.mode, img.size, [img.getpixel((i % img.width, i // img.width)) for i in range(4)]


def test_quick_start_random_access(readme_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        dataset = ld.StreamingDataset(readme_dir, shuffle=True)
        sample = dataset[50]
        return len(dataset), sample["index"], _image(sample["image"]), sample["class"]

    a, b = both(scenario)
    assert a == b
    assert a[0] == 60


def test_quick_start_iterate(readme_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        dataset = ld.StreamingDataset(readme_dir, shuffle=True)
        seen = sorted(sample["index"] for sample in dataset)
        return seen == list(range(60)), sorted({_image(s["image"])[0] for s in dataset})

    a, b = both(scenario)
    assert a == b
    assert a[0] is True


def test_quick_start_dataloader_default_batch(readme_dir: str) -> None:
    # README: `for sample in StreamingDataLoader(dataset): img, cls = sample["image"], sample["class"]`;
    # whatever the default collate makes of PIL images, both engines must do the same (value or error type)
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(readme_dir))
        first = next(iter(loader))
        img = first["image"]
        return len(loader), type(img).__name__, first["class"], first["index"]

    a, b = both(scenario, errors_ok=True)
    assert a == b


def test_quick_start_dataloader_list_collate(readme_dir: str) -> None:
    # (the default collate cannot stack PIL images: both engines raise TypeError in the test above)
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(readme_dir), batch_size=8, collate_fn=lambda xs: xs)
        batches = list(loader)
        return len(loader), [len(b) for b in batches], [_image(s["image"]) for s in batches[0][:2]]

    a, b = both(scenario)
    assert a == b
    assert a[0] == 8
