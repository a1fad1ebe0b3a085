"""The tuner's thread: a controller that raises stops tuning with a crash event and a warning, and the loader
keeps the last good values."""

from __future__ import annotations

import time
import warnings

from streamscope import events as ev
from streamscope.tune import Reading, Resources, Tuner
from tests.support.tracing import clean_tracer  # noqa: F401
from tests.tune._sim import Pipeline, make_sim


class _SimSensors:
    """Readings of a simulated loader, advanced by one simulated second per read; fails once a move is on trial."""

    def __init__(self, sim, tuner_box):
        self.sim, self.box, self.reads = sim, tuner_box, 0

    def read(self, now: float) -> Reading:
        self.reads += 1
        tuner = self.box[0]
        if tuner is not None and tuner.controller._trial is not None:
            raise OSError("metrics directory vanished")
        self.sim.advance(1.0)
        r = self.sim.reading()
        return Reading(now, r.waits, r.wait_s, r.stages, downloads=r.downloads, download_s=r.download_s)

    def resources(self) -> Resources:
        return self.sim.resources()

    def cache_free(self, cache_dir):
        return None


def test_a_tuner_that_raises_stops_with_a_crash_event_and_keeps_the_last_good_values(clean_tracer):  # noqa: F811
    ev.configure(trace={"crash", "tune"})
    sim = make_sim(Pipeline(latency=0.1), workers=2)
    start = sim.knobs()
    box = [None]
    tuner = Tuner(sim.target, budgets=sim.controller.budgets, sensors=_SimSensors(sim, box), tick=0.005)
    box[0] = tuner
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuner.start()
        deadline = time.monotonic() + 10
        while tuner.running and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not tuner.running and isinstance(tuner.error, OSError)
    assert any(issubclass(w.category, RuntimeWarning) and "auto-tuner stopped" in str(w.message) for w in caught)
    assert sim.knobs() == start  # the move on trial went back: the last good values
    got = ev.drain()
    crashes = [e for e in got if e[2] == "crash" and e[1] == "tuner"]
    assert crashes and "metrics directory vanished" in str(crashes[0])
    abandoned = [f for n, f in tuner.events if n == "decision" and f["outcome"] == "abandoned"]
    assert abandoned and "the tuner failed" in abandoned[0]["reason"]
    assert tuner.controller.phase == "stopped"


class _IdleSensors(_SimSensors):
    def read(self, now: float) -> Reading:
        return Reading(now)


def test_started_says_which_knob_is_left_to_the_raw_file_governor(clean_tracer):  # noqa: F811
    for governed in (True, False):
        sim = make_sim(Pipeline(latency=0.1), workers=2, info={"kind": "raw", "raw_governed": governed})
        tuner = Tuner(sim.target, budgets=sim.controller.budgets, sensors=_IdleSensors(sim, [None]), tick=0.005)
        tuner.start()
        tuner.stop()
        started = [f for n, f in tuner.events if n == "started"]
        assert started and started[0]["kind"] == "raw"
        assert started[0].get("left_to_governor") == ("raw_concurrency" if governed else None)
