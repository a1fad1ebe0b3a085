"""``litdata.utilities.env`` at the same path: LitData's ``_DistributedEnv`` and ``_WorkerEnv``, which clients build
to set ``StreamingDataset.distributed_env`` (and compare it with)."""

from streamscope.engine.distributed import _DistributedEnv, _WorkerEnv  # noqa: F401

__all__ = ["_DistributedEnv", "_WorkerEnv"]
