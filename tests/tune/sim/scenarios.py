"""The simulator's scenarios: where nothing can be gained, and where latency or decoding bounds the loop.

Runs last 5 simulated minutes where nothing can be gained, 10 where something can: a search takes about a minute
(the knee's bisection, the epochs of a num_workers check), which a training run of hours does not notice and a
5-minute run would count against the tuner four times over."""

from __future__ import annotations

from tests.tune.sim.world import World

#: name -> (world, kind): ``flat`` (nothing can be gained: tuned / untuned), ``bound`` (tuned / best static).
SCENARIOS: dict[str, tuple[World, str]] = {
    # the loop computes; data is local and decoded fast enough: the tuner must do nothing
    "step-bound": (World(step=0.02, noise=0.1, drift=0.1, u=0.004, w0=0.005, fits=True, nb=1000), "flat"),
    # the loop waits on a store at its bandwidth cap already: more in flight cannot help (noise and drift)
    "bandwidth-capped": (World(step=0.005, noise=0.1, drift=0.1, w0=0.02, x_bw=200.0, nb=1500), "flat"),
    # S3 with +100 ms: far below the store's knee, too few downloads in flight
    "latency-bound": (World(step=0.005, noise=0.05, drift=0.05, w0=0.1, nb=3000, seconds=600.0), "bound"),
    # a store with a knee at 24 in flight, past which it loses throughput (noise and drift)
    "at-the-knee": (
        World(step=0.005, noise=0.05, drift=0.1, w0=0.04, knee=24.0, pen=0.5, nb=3000, seconds=600.0),
        "bound",
    ),
    # S3 with +100 ms and epochs of 2-4 s, each starting with 0.5 s without batches (bench_autotune.py's rig: 20,000
    # samples in 1 MB chunks, a 10 ms step): a window holds an epoch's start or not by chance (the simulator's
    # epochs last whole steps: see world.py)
    "short-epochs": (
        World(
            step=0.01,
            noise=0.05,
            drift=0.05,
            w0=0.1,
            dpb=1.6,
            nb=156,
            start_s=0.3,
            start_per_worker=0.1,
            cores=2,
            seconds=600.0,
        ),
        "bound",
    ),
    # local, decode-heavy, num_workers=0: workers must come (at an epoch's start)
    "decode-bound-w0": (
        World(step=0.005, noise=0.05, drift=0.05, u=0.012, cores=4, dpb=0.0, workers=0, nb=1000, seconds=600.0),
        "bound",
    ),
}
