"""Knobs of optimize() and map(): staging, polling, multi-node runs, the Ray executor, fast_dev_run."""

from __future__ import annotations

from streamscope._core.knob import choice
from streamscope._core.knob_registry import knob

__all__ = ["EXECUTOR_CHOICES", "NODE_ENV_CHOICES"]

#: Values of the ``optimize_node_env`` and ``optimize_executor`` knobs.
NODE_ENV_CHOICES = ("auto", "litdata", "off")
EXECUTOR_CHOICES = ("process", "ray")


knob(
    "optimize_staging_dir",
    "",
    "path",
    ("STREAMSCOPE_OPTIMIZE_STAGING_DIR",),
    "Parent of the per-job staging directory where optimize()/map() workers write chunks before publishing "
    "them. Empty: inside a local output_dir (publish = rename), else the system temp dir.",
)
knob(
    "optimize_poll_interval",
    0.05,
    "s",
    ("STREAMSCOPE_OPTIMIZE_POLL_INTERVAL",),
    "How often the optimize() main process checks worker messages, liveness and progress.",
)
knob(
    "optimize_exit_grace",
    5.0,
    "s",
    ("STREAMSCOPE_OPTIMIZE_EXIT_GRACE",),
    "How long the main process waits for the final message of a worker that has already exited.",
)
knob(
    "processor_fast_dev_run",
    True,
    "bool",
    ("DATA_OPTIMIZER_FAST_DEV_RUN",),
    "DataProcessor(fast_dev_run=None) processes only the first optimize_fast_dev_run_items inputs (LitData's "
    "default: on; set 0 to process them all).",
)
knob(
    "processor_output_dir",
    "",
    "path",
    ("DATA_OPTIMIZER_CACHE_FOLDER",),
    "Where DataProcessor(output_dir=None) writes (LitData's chunk cache folder). Empty: <system temp dir>/chunks.",
)
knob(
    "optimize_node_env",
    "auto",
    "choice",
    ("STREAMSCOPE_OPTIMIZE_NODE_ENV",),
    "Which variables make optimize()/map() one node of a multi-node job. auto: DATA_OPTIMIZER_NUM_NODES/"
    "DATA_OPTIMIZER_NODE_RANK (LitData's), else NNODES/NODE_RANK (torchrun launch scripts), else SLURM_NNODES/"
    "SLURM_NODEID; litdata: LitData's pair only; off: always one node.",
    parse=choice(NODE_ENV_CHOICES),
)
knob(
    "optimize_node_heartbeat",
    5.0,
    "s",
    ("STREAMSCOPE_OPTIMIZE_NODE_HEARTBEAT",),
    "How often a node of a multi-node optimize()/map() rewrites its claim (.nodes/node-<rank>.json in output_dir) "
    "to show it is alive.",
)
knob(
    "optimize_node_stale_after",
    60.0,
    "s",
    ("STREAMSCOPE_OPTIMIZE_NODE_STALE_AFTER",),
    "A node claim not rewritten for this long belongs to a dead node: a rerun of that rank takes it over (at "
    "once when the claim names a dead process on this host). Node clocks must agree to well within this.",
)
knob(
    "optimize_node_claim_settle",
    0.25,
    "s",
    ("STREAMSCOPE_OPTIMIZE_NODE_CLAIM_SETTLE",),
    "After writing its claim a node waits this long and reads it back: a node that started with the same rank "
    "at the same moment has overwritten it by then (a read and a write of one small object), and one of the two "
    "stops with NodeRankClaimedError. One that slips through is caught at the next heartbeat, before its node "
    "publishes its {rank}-index.json.",
)
knob(
    "optimize_executor",
    "process",
    "choice",
    ("STREAMSCOPE_OPTIMIZE_EXECUTOR",),
    "Where optimize()/map() run their workers when executor is not given: process (worker processes on this "
    "machine) or ray (tasks on the Ray cluster ray.init() joins: RAY_ADDRESS, else a local one).",
    parse=choice(EXECUTOR_CHOICES),
)
knob(
    "ray_connect_timeout",
    15.0,
    "s",
    ("STREAMSCOPE_RAY_CONNECT_TIMEOUT",),
    "executor='ray': how long to wait for the cluster at the given address to answer before ClusterUnreachableError.",
)
knob(
    "ray_max_retries",
    3,
    "retries",
    ("STREAMSCOPE_RAY_MAX_RETRIES",),
    "executor='ray': how many times Ray reruns a worker task whose process or node died (an exception in fn is "
    "never retried). A rerun rewrites the same chunks, so the output does not change.",
)
knob(
    "ray_progress_interval",
    0.25,
    "s",
    ("STREAMSCOPE_RAY_PROGRESS_INTERVAL",),
    "executor='ray': least time between two progress reports of a worker task to the driver's progress bar.",
)
knob(
    "optimize_fast_dev_run_items",
    10,
    "inputs",
    ("DATA_OPTIMIZER_FAST_DEV_RUN_ITEMS",),
    "Number of inputs each worker processes when fast_dev_run=True (LitData: items per process).",
)
