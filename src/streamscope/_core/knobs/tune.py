"""Knobs of the auto-tuner: whether it runs, its RAM budget, workers, and how it decides."""

from __future__ import annotations

from streamscope._core.knob_registry import knob
from streamscope._core.units import parse_bytes

__all__: list[str] = []

knob(
    "autotune",
    False,
    "flag",
    ("STREAMSCOPE_AUTOTUNE",),
    "Auto-tune every StreamingDataLoader (as its autotune=True does; autotune=False wins): a thread in each "
    "rank's main process moves the live knobs nobody pinned, and num_workers between epochs, to cut the training "
    "loop's wait for data, within the RAM and cache budgets. Switches metrics on (level chunk). See "
    "src/streamscope/tune/README.md.",
)
knob(
    "autotune_ram_budget",
    "0",
    "bytes",
    ("STREAMSCOPE_AUTOTUNE_RAM_BUDGET",),
    "Resident memory the tuner lets one rank's main process and its DataLoader workers use together (e.g. 8GB). "
    "0 = autotune_ram_fraction of the memory limit (the cgroup's memory.max, else physical memory) divided by the "
    "ranks of the node (LOCAL_WORLD_SIZE).",
    parse_bytes,
    kind=int,
    bounds=(0, 2**60),
)
knob(
    "autotune_ram_fraction",
    0.5,
    "fraction",
    ("STREAMSCOPE_AUTOTUNE_RAM_FRACTION",),
    "Share of the memory limit the node's ranks may use when autotune_ram_budget is 0 (tf.data's ram_budget "
    "takes half).",
    bounds=(0.01, 1.0),
)
knob(
    "autotune_max_workers",
    -1,
    "workers",
    ("STREAMSCOPE_AUTOTUNE_MAX_WORKERS",),
    "Most DataLoader workers the tuner gives a loader (it adds workers between epochs, never with "
    "persistent_workers). -1 = the CPU cores this process may use (affinity and cgroup quota); 0 = num_workers "
    "stays as given.",
    bounds=(-1, 1024),
)
knob(
    "autotune_period_max",
    60.0,
    "s",
    ("STREAMSCOPE_AUTOTUNE_PERIOD_MAX",),
    "Longest pause between two runs of the capacity model by a tuner that found nothing to improve (the pause "
    "doubles from one metrics interval up to this; a regime change is watched for at every reading).",
    bounds=(1.0, 3600.0),
)
knob(
    "autotune_min_gain",
    0.01,
    "fraction",
    ("STREAMSCOPE_AUTOTUNE_MIN_GAIN",),
    "Gain in the loop's throughput, relative, that the lower bound of a candidate's paired check (95%) must "
    "exceed for the tuner to adopt it; otherwise the incumbent values stay.",
    bounds=(0.0, 0.9),
)
knob(
    "autotune_wait_share",
    0.05,
    "fraction",
    ("STREAMSCOPE_AUTOTUNE_WAIT_SHARE",),
    "The tuner does nothing while the training loop waits for data less than this share of its time (below it "
    "a move could gain less than its check costs).",
    bounds=(0.0, 1.0),
)
knob(
    "autotune_rank_every",
    5,
    "readings",
    ("STREAMSCOPE_AUTOTUNE_RANK_EVERY",),
    "Under torch.distributed (more than one rank), tuner readings between two publications of a rank's model "
    "inputs in the process group's store (a side channel, never a collective); the rank that waits most per batch "
    "decides, and every rank applies its values at one published step. 0 = each rank tunes alone.",
    bounds=(0, 10_000),
)
knob(
    "autotune_probe_share",
    0.02,
    "fraction",
    ("STREAMSCOPE_AUTOTUNE_PROBE_SHARE",),
    "Share of the run's time the tuner may lose measuring candidates that turn out worse than the incumbent "
    "(weighted by how much worse); past it no new check starts until the run has grown.",
    bounds=(0.0, 1.0),
)
