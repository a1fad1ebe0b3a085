"""One rank of tests/tune/test_ranks.py (run as a script: ``python _rank_job.py ARGS_JSON``).

The rank joins a gloo process group on loopback (``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` from its
environment), streams a local dataset with a tuned StreamingDataLoader (``autotune=True``) and steps in lock step
with the other ranks (an all-reduce per batch, as a DDP training step). The rank ``slow`` decodes slowly (a
transform that sleeps): its loop waits for data, the others wait in the all-reduce. It prints one JSON line.

ARGS_JSON keys: ``src``, ``cache``, ``slow`` (the slow rank), ``epochs``, ``kept`` (values the slow rank's tuner
starts from, as a resumed run's; None: none), ``untuned`` (ranks whose loader is not tuned).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _slow(sample: Any) -> Any:
    # a decode-heavy transform: this rank's loop waits on decoding, 16 ms a batch of 4 (at 8 ms, the fast rank's
    # start-up waits on a loaded machine once outweighed it in the first shared window and decided the first plan)
    time.sleep(0.004)
    return sample


def main() -> None:
    args = json.loads(sys.argv[1])
    import torch
    import torch.distributed as dist

    import streamscope as ss
    from streamscope.tune.ranks import PLAN_KEY, PREFIX

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    slow = rank == args["slow"]
    ds = ss.StreamingDataset(
        args["src"], cache_dir=os.path.join(args["cache"], f"rank{rank}"), transform=_slow if slow else None
    )
    tuned = rank not in args.get("untuned", [])
    dl = ss.StreamingDataLoader(ds, batch_size=4, num_workers=0, autotune=tuned)
    if slow and args.get("kept"):
        dl.tuner.load_state_dict({"version": 1, "values": args["kept"]})  # as a resumed run's tuned values
    before = dl.knobs.snapshot()
    batches = 0
    for _ in range(args["epochs"]):
        for _b in dl:
            alive = torch.ones(1)
            dist.all_reduce(alive)  # a training step: every rank at the same step
            batches += 1
    dist.barrier()
    out: dict[str, Any] = {"rank": rank, "batches": batches, "before": before, "after": dl.knobs.snapshot()}
    if tuned:
        tuner = dl.tuner.tuner
        time.sleep(0.3)  # the tuner's last reading settles before its events are read
        tuner.stop()
        out["ranks"] = [f for n, f in list(tuner.events) if n == "ranks"]
        out["values"] = dl.state_dict()["autotune"]["values"]
        share = tuner.ranks
        out["readings"] = share.readings if share is not None else 0
        out["paused"] = tuner._paused  # its controller stopped: another rank decides
    # the tuner's keys in the store: one per rank and epoch, and the plan
    keys = [f"{PREFIX}/{e}/{r}" for e in range(args["epochs"] + 2) for r in range(world)] + [PLAN_KEY]
    out["store_keys"] = [k for k in keys if store.check([k])]
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
