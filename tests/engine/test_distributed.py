"""Simulated DDP: world size 2 as two real processes (WORLD_SIZE/RANK env), each with 2 DataLoader workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from streamscope._core.errors import DatasetError
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset

SCRIPT = r"""
import json, sys
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.dataloader import StreamingDataLoader
d, drop, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
kw = {} if drop == "default" else {"drop_last": drop == "1"}
ds = StreamingDataset(d, shuffle=True, seed=5, **kw)
dl = StreamingDataLoader(ds, batch_size=6, num_workers=2)
out = {"len": len(dl), "epoch1": [b["index"].tolist() for b in dl]}
if stop:
    seen = []
    for k, b in enumerate(dl):
        seen.append(b["index"].tolist())
        if k + 1 == stop:
            break
    st = dl.state_dict()
    dl2 = StreamingDataLoader(StreamingDataset(d, shuffle=True, seed=5, **kw), batch_size=6, num_workers=1)
    dl2.load_state_dict(st)
    out["epoch2_before"] = seen
    out["epoch2_after"] = [b["index"].tolist() for b in dl2]
print(json.dumps(out))
"""


def run_ranks(d: str, drop: str, stop: int = 0) -> list[dict]:
    procs = []
    for rank in range(2):
        env = dict(os.environ, WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank))
        procs.append(
            subprocess.Popen([sys.executable, "-c", SCRIPT, d, drop, str(stop)], env=env, stdout=subprocess.PIPE)
        )
    outs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return outs


@pytest.mark.slow
@pytest.mark.parametrize("n", [61, 72])
def test_two_ranks_every_sample_once_equal_batches(tmp_path, n):
    d = write_dataset(str(tmp_path / "ds"), n, chunk_size=10)
    outs = run_ranks(d, "0", stop=3)
    assert outs[0]["len"] == outs[1]["len"] == len(outs[0]["epoch1"]) == len(outs[1]["epoch1"])
    union = [i for o in outs for b in o["epoch1"] for i in b]
    assert sorted(union) == list(range(n))
    # resume in epoch 2 on each rank (2 workers before, 1 after): exactly the rest of the epoch
    union2 = []
    for o in outs:
        got = [i for b in o["epoch2_before"] + o["epoch2_after"] for i in b]
        assert len(o["epoch2_before"]) + len(o["epoch2_after"]) == o["len"]
        union2.extend(got)
    assert sorted(union2) == list(range(n))


@pytest.mark.slow
def test_two_ranks_default_drop_last(tmp_path):
    d = write_dataset(str(tmp_path / "ds"), 61, chunk_size=10)
    outs = run_ranks(d, "default")
    union = [i for o in outs for b in o["epoch1"] for i in b]
    assert len(union) == len(set(union)) == 60  # drop_last=True by default with 2 ranks: 5 full batches each
    assert all(len(b) == 6 for o in outs for b in o["epoch1"])


def test_rank_without_data_fails_at_construction(tmp_path, monkeypatch):
    d = write_dataset(str(tmp_path / "ds"), 3, chunk_size=10)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(DatasetError, match="world_size=4"):
        StreamingDataset(d)


def test_global_rank_env_is_accepted(tmp_path, monkeypatch):
    d = write_dataset(str(tmp_path / "ds"), 20, chunk_size=10)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("GLOBAL_RANK", "1")
    ds = StreamingDataset(d)
    assert (ds.world_size, ds.rank, ds.drop_last) == (2, 1, True)
    assert [s["index"] for s in ds] == list(range(10, 20))


def test_writer_rank_is_the_optimizer_s_global_rank_else_rank_times_workers(monkeypatch):
    from streamscope.engine.distributed import writer_rank

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("DATA_OPTIMIZER_GLOBAL_RANK", raising=False)
    assert writer_rank() == 1  # global_rank 1 * 1 worker (the main process) + worker 0
    monkeypatch.setenv("DATA_OPTIMIZER_GLOBAL_RANK", "7")
    assert writer_rank() == 7
