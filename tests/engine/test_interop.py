"""Read datasets written by the real LitData (0.2.68) and compare with what LitData itself reads."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.format.item_loader import TokensLoader
from tests.support.litdata_version import litdata_env

pytestmark = [pytest.mark.interop, pytest.mark.slow]

WRITER = r"""
import sys
import numpy as np
import torch
import litdata as ld
from litdata.streaming.item_loader import TokensLoader


def sample(i):
    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 255, (3, 8, 8), dtype=np.uint8), "label": i, "name": f"img{i}"}


def tokens(i):
    return torch.arange(i * 50, i * 50 + 50, dtype=torch.int32)


if __name__ == "__main__":
    out, kind = sys.argv[1], sys.argv[2]
    if kind == "tokens":
        ld.optimize(fn=tokens, inputs=list(range(40)), output_dir=out, chunk_size=400, num_workers=1,
                    item_loader=TokensLoader())
    else:
        ld.optimize(fn=sample, inputs=list(range(90)), output_dir=out, chunk_bytes="8KB", num_workers=1,
                    compression="zstd" if kind == "zstd" else None)
"""


def litdata_write_all(tmp: str, kinds: tuple[str, ...]) -> dict[str, str]:
    """Write each kind with litdata.optimize in its own process, all at once (LitData's optimize is slow)."""
    script = os.path.join(tmp, "writer.py")
    with open(script, "w") as f:
        f.write(WRITER)
    procs = {}
    for kind in kinds:
        env = litdata_env()  # the real litdata (the version under test), without our sources
        env["LITDATA_DISABLE_VERSION_CHECK"] = "1"  # no network here: the PyPI check would wait for its timeout
        env["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(tmp, f"stage-{kind}")  # private: /tmp/chunks is shared
        env["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(tmp, f"dstage-{kind}")
        out = os.path.join(tmp, kind)
        procs[kind] = (
            out,
            subprocess.Popen(
                [sys.executable, script, out, kind], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            ),
        )
    for kind, (_, p) in procs.items():
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"litdata.optimize ({kind}) failed: {err.decode()[-2000:]}"
    return {kind: out for kind, (out, _) in procs.items()}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return litdata_write_all(str(tmp_path_factory.mktemp("litdata")), ("plain", "zstd", "tokens"))


def _litdata():
    os.environ["LITDATA_DISABLE_VERSION_CHECK"] = "1"  # read when litdata is first imported
    import litdata

    return litdata


@pytest.mark.parametrize("kind", ["plain", "zstd"])
def test_same_samples_as_litdata(written, kind, tmp_path):
    ld = _litdata()
    d = written[kind]
    theirs = ld.StreamingDataset(d, cache_dir=str(tmp_path / "ldcache"))
    ours = StreamingDataset(d, cache_dir=str(tmp_path / "cache"))
    assert len(ours) == len(theirs) == 90
    for i in (0, 17, 89):
        a, b = ours[i], theirs[i]
        assert np.array_equal(a["image"], b["image"]) and a["label"] == b["label"] and a["name"] == b["name"]
    ours_ids = [b["label"].tolist() for b in StreamingDataLoader(ours, batch_size=16, num_workers=2)]
    assert [i for b in ours_ids for i in b] == list(range(90))


def test_same_batches_as_litdata_loader(written):
    ld = _litdata()
    d = written["plain"]
    theirs = list(ld.StreamingDataLoader(ld.StreamingDataset(d), batch_size=16))
    ours = list(StreamingDataLoader(StreamingDataset(d), batch_size=16))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"]) and a["name"] == b["name"]


def test_tokens_same_blocks_as_litdata(written):
    ld = _litdata()
    from litdata.streaming.item_loader import TokensLoader as LDTokens

    d = written["tokens"]
    theirs = ld.StreamingDataset(d, item_loader=LDTokens(block_size=64))
    ours = StreamingDataset(d, item_loader=TokensLoader(block_size=64))
    assert len(ours) == len(theirs)
    for i in range(len(ours)):
        assert torch.equal(ours[i], theirs[i])
    batches = list(StreamingDataLoader(ours, batch_size=4, num_workers=2))
    assert torch.equal(torch.cat(batches), torch.stack([theirs[i] for i in range(len(theirs))]))
