"""One rank of the real DDP run of test_ddp_s3.py (run as a script: ``python _ddp_rank.py ARGS_JSON``).

The rank joins a gloo process group on loopback (``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` from its
environment), streams the S3 dataset with a StreamingDataLoader and its own DataLoader workers, the tracer on, and
steps in lock step with the other ranks (an all-reduce per batch, as a DDP training step). It prints one JSON line:
what its training loop received.

ARGS_JSON keys: ``url``, ``options`` (storage_options), ``cache`` (cache dir of this job), ``log`` (trace log),
``workers``, ``batch_size``, ``drop_last``, ``phase``:

* ``"run"``: epoch 1 whole; epoch 2 until ``stop`` batches, then the loader's state is written to ``state``
  (by rank 0; every rank's plan position is the same);
* ``"resume"``: load ``state`` and finish that epoch.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main() -> None:
    args = json.loads(sys.argv[1])
    import torch
    import torch.distributed as dist

    import streamscope as ss

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ss.enable_tracer(level="chunk", log_file=args["log"], flush_interval=0.5)

    def loader() -> Any:
        ds = ss.StreamingDataset(
            args["url"],
            storage_options=args["options"],
            cache_dir=os.path.join(args["cache"], f"rank{rank}"),
            shuffle=True,
            seed=17,
            drop_last=args["drop_last"],
        )
        assert (ds.world_size, ds.rank) == (world, rank)  # taken from torch.distributed
        return ss.StreamingDataLoader(ds, batch_size=args["batch_size"], num_workers=args["workers"])

    def step(batch: Any) -> list[int]:
        got = batch["index"].tolist()
        alive = torch.ones(1)
        dist.all_reduce(alive)  # a training step: every rank must be at the same step, or this waits forever
        assert int(alive.item()) == world
        return got

    out: dict[str, Any] = {"rank": rank, "world": world, "pid": os.getpid()}
    dl = loader()
    if args["phase"] == "run":
        out["len"] = len(dl)
        out["epoch1"] = [step(b) for b in dl]
        before = []
        for b in dl:
            before.append(step(b))
            if len(before) == args["stop"]:
                break
        state = dl.state_dict()
        out["plan_state"] = state["dataset"]["plan_state"]
        if rank == 0:
            with open(args["state"], "w") as f:
                json.dump(state, f)
        out["epoch2_before"] = before
    else:
        with open(args["state"]) as f:
            dl.load_state_dict(json.load(f))
        out["len"] = len(dl)
        out["epoch2_after"] = [step(b) for b in dl]
        out["epoch"] = dl.current_epoch
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
