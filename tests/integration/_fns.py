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
