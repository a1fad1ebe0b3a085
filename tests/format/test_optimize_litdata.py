"""`litdata.optimize(num_workers=1)` output is byte-identical to ChunkWriter's for the same samples."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from streamscope.format import ChunkWriter, dumps_index, load_index
from tests.support.litdata_version import LITDATA_076

LAYOUT = "0.2.76" if LITDATA_076 else "0.2.68"

pytest.importorskip("litdata")
pytestmark = pytest.mark.interop

SCRIPT = r"""
import os, sys
import numpy as np
import litdata

def fn(i):
    return {"index": i, "text": f"sample {i}", "x": np.arange(i % 7, dtype=np.float32)}

if __name__ == "__main__":
    litdata.optimize(fn=fn, inputs=list(range(int(sys.argv[2]))), output_dir=sys.argv[1], chunk_bytes=300,
                     num_workers=1, compression=sys.argv[3] if len(sys.argv) > 3 else None)
"""


def fn(i: int) -> dict:
    return {"index": i, "text": f"sample {i}", "x": np.arange(i % 7, dtype=np.float32)}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_optimize_output_is_byte_identical(tmp_path):
    script = tmp_path / "opt.py"
    script.write_text(SCRIPT)
    env = {
        **os.environ,
        "LITDATA_DISABLE_VERSION_CHECK": "1",
        # private staging dirs: litdata rmtree's its default shared ones at start
        "DATA_OPTIMIZER_CACHE_FOLDER": str(tmp_path / "stage-chunks"),
        "DATA_OPTIMIZER_DATA_CACHE_FOLDER": str(tmp_path / "stage-data"),
    }
    n = 30
    ld = tmp_path / "ld"
    proc = subprocess.run(
        [sys.executable, str(script), str(ld), str(n), "zstd"], env=env, capture_output=True, text=True, timeout=220
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the layout of the LitData under test (the format layer writes what it is told)
    w = ChunkWriter(str(tmp_path / "ss"), chunk_bytes=300, compression="zstd", write_format=LAYOUT)
    for i in range(n):
        w.add_item(i, fn(i))
    w.done()
    idx = load_index(str(ld))
    assert idx["chunks"] == w.chunks and len(w.chunks) > 2
    text = (ld / "index.json").read_text()
    assert text == dumps_index(w.chunks, w.config, idx["updated_at"])
    for c in w.chunks:
        assert (ld / c["filename"]).read_bytes() == (tmp_path / "ss" / c["filename"]).read_bytes()
