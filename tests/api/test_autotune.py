"""The auto-tuner on a real StreamingDataLoader: the switch, correctness with the tuner on (every sample once per
epoch, the same order, exact resume, workers 0 and 2), the tuned values in state_dict, bad budgets, tune events."""

from __future__ import annotations

import sys
import time

import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope._core.errors import ConfigError, TuneBudgetError
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401


def _slow(sample):
    time.sleep(0.0015)  # a decode-heavy transform: the loop waits on decoding
    return sample


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("at") / "src"), 800, chunk_size=20, compression="zstd")


def _loader(src, cache, workers, autotune, transform=_slow, **kw):
    ds = StreamingDataset(src, cache_dir=cache, shuffle=True, seed=5, transform=transform, **kw)
    return StreamingDataLoader(ds, batch_size=8, num_workers=workers, autotune=autotune)


def _order(batches):
    return [i for b in batches for i in b["index"].tolist()]


def test_off_nothing_changes(src, tmp_path, clean_tracer, monkeypatch):  # noqa: F811
    monkeypatch.delenv("STREAMSCOPE_AUTOTUNE", raising=False)
    sys.modules.pop("streamscope.api.autotune", None)
    dl = _loader(src, str(tmp_path / "c"), 0, None, transform=None)
    assert dl.tuner is None and "autotune" not in dl.state_dict()
    assert len(_order(dl)) == 800
    assert "streamscope.api.autotune" not in sys.modules  # nothing of the tuner was even imported
    assert not recording.RECORDER.metric_cats  # nor were metrics switched on


def test_the_environment_switches_it_on_and_the_argument_wins(src, tmp_path, clean_tracer, monkeypatch):  # noqa: F811
    monkeypatch.setenv("STREAMSCOPE_AUTOTUNE", "1")
    assert _loader(src, str(tmp_path / "a"), 0, None, transform=None).tuner is not None
    assert _loader(src, str(tmp_path / "b"), 0, False, transform=None).tuner is None
    monkeypatch.setenv("STREAMSCOPE_AUTOTUNE", "perhaps")
    with pytest.raises(ConfigError, match="STREAMSCOPE_AUTOTUNE"):
        _loader(src, str(tmp_path / "c"), 0, None, transform=None)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # torch: more workers than cores, on purpose
@pytest.mark.parametrize("workers", [0, 2])
def test_tuned_loader_same_order_every_sample_once_exact_resume(src, tmp_path, clean_tracer, monkeypatch, workers):  # noqa: F811
    """The tuner moves workers between epochs (and may move live knobs within one); the order of every epoch and a
    resume from mid-epoch are those of an untuned loader, and the resumed run starts with the tuned values."""
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "0.1")
    monkeypatch.setenv("STREAMSCOPE_AUTOTUNE_MAX_WORKERS", str(workers + 2))
    log = str(tmp_path / "trace.log")
    from streamscope.api.tracing import enable_tracer

    enable_tracer(categories=["tune", "crash"], log_file=log, flush_interval=0.2)
    ref = _loader(src, str(tmp_path / "ref"), 0, False, transform=None)
    want = [_order(ref) for _ in range(3)]
    assert all(sorted(e) == list(range(800)) for e in want) and want[0] != want[1]

    dl = _loader(src, str(tmp_path / "c"), workers, True)
    got = [_order(dl) for _ in range(2)]
    assert got == want[:2]
    assert dl.tuner.decisions, "the tuner made no move"
    moved = [d for d in dl.tuner.decisions if d.move.workers is not None]
    assert moved and moved[0].move.workers > workers
    it = iter(dl)
    head = _order(next(it) for _ in range(40))
    state = dl.state_dict()
    del it
    assert head == want[2][:320]
    tuned = dl.tuner.values()
    assert state["autotune"]["values"] == tuned
    dl.tuner.close()

    again = _loader(src, str(tmp_path / "c"), workers, True)
    again.load_state_dict(state)
    rest = _order(again)
    assert head + rest == want[2]
    if "num_workers" in tuned:
        assert again.num_workers == tuned["num_workers"]  # the resumed run starts tuned
    board = again.knobs
    for knob, value in tuned.items():
        if knob != "num_workers":
            assert board.value(knob) == value
    again.tuner.close()

    ev.flush()
    with open(log) as f:
        text = f.read()
    assert "name: decision;" in text and "knob: num_workers;" in text and "wait_before_ms" in text


def test_budgets_too_small_fail_before_the_first_batch(src, tmp_path, clean_tracer, monkeypatch):  # noqa: F811
    dl = _loader(src, str(tmp_path / "c"), 0, True, transform=None, max_cache_size=10)
    with pytest.raises(TuneBudgetError, match="max_cache_size=10 bytes.*raise max_cache_size"):
        next(iter(dl))
    monkeypatch.setenv("STREAMSCOPE_AUTOTUNE_RAM_BUDGET", "1MB")
    dl = _loader(src, str(tmp_path / "d"), 0, True, transform=None)
    with pytest.raises(TuneBudgetError, match="STREAMSCOPE_AUTOTUNE_RAM_BUDGET"):
        next(iter(dl))
    assert dl.batches_consumed == 0 and not dl.tuner.decisions


def _spin(seconds: float) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        pass


def _cpu_heavy(sample):
    _spin(0.0005)  # 0.5 ms of CPU a sample: 4 ms a batch of 8
    return sample


def test_without_workers_the_batches_cpu_and_each_epochs_exact_time_reach_the_tuner(src, tmp_path, clean_tracer):  # noqa: F811
    from streamscope.events.registry import M

    dl = _loader(src, str(tmp_path / "c"), 0, True, transform=_cpu_heavy)
    before = float(ev.metrics_view().value(M.LOADER_DECODE_CPU))
    for _epoch in range(2):
        for _batch in dl:
            _spin(0.004)  # the training step: 4 ms of the loop's own CPU a batch, which workers would not take
    cpu = float(ev.metrics_view().value(M.LOADER_DECODE_CPU)) - before
    decode = 2 * 800 * 0.0005
    # the production's CPU counted (the transform and the rest of the fetch), the step's not (it would add 0.8 s)
    assert decode * 0.9 <= cpu <= decode + 0.5 * (2 * 100 * 0.004), cpu
    target = dl.tuner.target
    for e in (1, 2):
        seconds, batches = target.epoch_record(e)
        assert batches == 100 and seconds >= 100 * (0.004 + 8 * 0.0005)
    assert target.epoch_record(3) is None


def test_the_waits_at_each_epochs_start_are_counted_apart(src, tmp_path, clean_tracer, monkeypatch):  # noqa: F811
    # two workers: the first START_WAITS x 2 waits of each epoch are its start (fresh workers, first downloads);
    # the tuner reads them apart so that a residual wait outside the starts decides whether downloads bind
    from streamscope.tune.signals import START_WAITS

    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "0.05")  # the tuner reads every 50 ms: no epoch missed
    dl = _loader(src, str(tmp_path / "c"), 2, True, transform=None)
    for _epoch in range(2):
        for _batch in dl:
            time.sleep(0.004)
    dl.tuner.close()  # its thread stops: the reads below are the last
    target = dl.tuner.target
    target.progress()
    n, seconds = target.starts()
    ring = dl._observer.wait_ring
    firsts = [0, ring.end_of(1)]  # generation 1 begins at wait 0, generation 2 where 1 ended
    per = START_WAITS * 2
    expect = 0
    for f in firsts:
        begins, ends = ring.waits(f, f + per)
        expect += int((ends - begins).sum())
    assert n == 2 * per
    assert seconds == pytest.approx(expect * 1e-9)
    _batches, wait = target.progress()
    assert 0 < seconds <= wait


def test_a_start_wait_under_way_counts_in_the_starts():
    # the tuner reads the wait under way (the ring's open wait) with the complete ones: a first batch's long wait
    # is a start's while it lasts, and the wait after the starts is not
    import time as _time
    from types import SimpleNamespace

    from streamscope.api.autotune import LoaderTarget
    from streamscope.recording.waits import WaitRing

    class _Loader:  # what LoaderTarget reads of a loader (held weakly: a class, not a SimpleNamespace)
        dataset = SimpleNamespace()
        batch_size, persistent_workers, batches_consumed, _live, num_workers = 8, False, 0, None, 2

    ring = WaitRing(workers=2)
    loader = _Loader()
    loader._observer = SimpleNamespace(wait_ring=ring)
    target = LoaderTarget(loader)
    ring.new_iteration(2)
    now = _time.monotonic_ns()
    for i in range(3):  # three complete start waits of 10 ms each
        ring.end(now + i * 20_000_000, now + i * 20_000_000 + 10_000_000)
    ring.begin(_time.monotonic_ns() - 50_000_000)  # the fourth (a start's) under way for 50 ms
    target.progress()
    n, seconds = target.starts()
    assert n == 3 and seconds >= 0.03 + 0.05
    t = _time.monotonic_ns()
    ring.end(t - 50_000_000, t)
    ring.begin(_time.monotonic_ns() - 80_000_000)  # the fifth, past the 4 start waits of 2 workers: steady
    _batches, wait = target.progress()
    n, seconds = target.starts()
    assert n == 4 and seconds < 0.03 + 0.05 + 0.01 and wait >= seconds + 0.08
