"""Top-level sample functions for optimize() (importable by spawned workers)."""

from __future__ import annotations

from typing import Any

import numpy as np


def sample(i: int) -> dict[str, Any]:
    """Sample ``i`` of the first version of a dataset: an image, its index and a name."""
    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 256, (3, 8, 8), dtype=np.uint8), "index": i, "name": f"v1-{i:05d}"}


def sample_v2(i: int) -> dict[str, Any]:
    """Sample ``i`` of a second version (same shapes, different content) written to the same URL."""
    rng = np.random.default_rng(10_000 + i)
    return {"image": rng.integers(0, 256, (3, 8, 8), dtype=np.uint8), "index": i, "name": f"v2-{i:05d}"}


def write_files(i: int, output_dir: str) -> None:
    """map() function: write ``part-<i>.txt`` (and a nested file for even inputs) under ``output_dir``."""
    import os

    with open(os.path.join(output_dir, f"part-{i:03d}.txt"), "w") as f:
        f.write(f"item {i}\n" * (i + 1))
    if i % 2 == 0:
        os.makedirs(os.path.join(output_dir, "even"), exist_ok=True)
        with open(os.path.join(output_dir, "even", f"{i:03d}.bin"), "wb") as f:
            f.write(bytes([i]) * 100)
