"""The attributes of LitData's objects that client code reads exist on ours with the same meaning (issue 31, item 10).

Which attributes: those of LitData's ``StreamingDataset`` and ``StreamingDataLoader`` instances that are public (no
leading underscore, set by the constructor or iteration) and that code outside LitData reads, found by reading
LitGPT (``litgpt/data/*.py``, ``pretrain.py``: builds the objects, then hands the loader to Lightning/Fabric) and
Lightning (``fabric/utilities/data.py``, ``pytorch/utilities/data.py``, ``trainer/connectors/data_connector.py``,
``loops/training_epoch_loop.py``: a loader's ``dataset``, ``sampler``, ``batch_sampler``, ``num_workers``,
``persistent_workers``, ``pin_memory``, ``batch_size``, ``len()``, ``state_dict``/``load_state_dict``), plus
the dataset attributes LitData documents or user code assigns (``distributed_env``, set to simulate a rank, as
LitData's own tests do). LitData's internals (``cache``, ``shuffler``, ``worker_chunks``, ``upcoming_indexes``, the
loader's ``rng_state``, ...) are not listed: no client reads them.

Each test builds the LitData object (0.2.68 in the first pass, 0.2.76 in ``./run.sh test``'s interop pass) and ours
on the same dataset and checks every listed attribute on both: LitData must have it (else this list is stale) and
ours must hold the same value. Known differences, kept listed so they stay visible:

* ``input_dir``: LitData's is a ``Dir`` (``.path``, ``.url``); ours is the resolved string.
* ``global_index``: LitData's is the int position of its iterator; ours is a method (chunk, item) -> index.
* ``item_loader``: LitData keeps the argument (None when not given, its reader makes the default); ours holds the
  loader in use (``PyTreeLoader()`` by default). Given explicitly, both hold the given loader's kind.
* the loader's ``batch_sampler``: LitData's is torch's ``BatchSampler``; ours is None, as for a torch
  ``DataLoader(batch_size=None)``: batches are cut inside the dataset (the plan's batches, for exact resume), and
  ``batch_size`` still says their size. Lightning reads ``batch_sampler`` only for map-style datasets
  (``_is_dataloader_shuffled`` returns first for an ``IterableDataset``) and for ``set_epoch`` on its sampler.

``storage_options`` and ``session_options`` are compared as mappings: LitData 0.2.68 keeps ``{}`` when none is
given, 0.2.76 keeps None; ours is ``{}``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.compat.conftest import engine
from tests.support.litdata_version import LITDATA_076

pytestmark = pytest.mark.interop

#: StreamingDataset attributes compared by value (``(name, since_076)``: only LitData 0.2.76 has the latter).
DATASET_VALUES = [
    ("shuffle", False),
    ("drop_last", False),
    ("seed", False),
    ("current_epoch", False),
    ("batch_size", False),
    ("max_pre_download", False),
    ("max_cache_size", False),
    ("storage_options", False),
    ("session_options", False),
    ("serializers", False),
    ("subsampled_files", False),
    ("region_of_interest", False),
    ("on_demand_bytes", False),
    ("batch_decode", True),
    ("item_shuffle_window", True),
    ("num_canonical_nodes", True),
    ("window_direct_io", True),
]

#: StreamingDataLoader attributes compared by value (torch DataLoader's, which Lightning reads, and LitData's own).
LOADER_VALUES = [
    "batch_size",
    "num_workers",
    "pin_memory",
    "pin_memory_device",
    "persistent_workers",
    "prefetch_factor",
    "timeout",
    "drop_last",
    "multiprocessing_context",
    "generator",
    "worker_init_fn",
    "in_order",
    "current_epoch",
    "restore",
]

#: Known differences (see the module docstring): LitData has them; ours differ in meaning.
KNOWN_DIFFERENT = ["input_dir", "global_index", "item_loader"]

#: Compared as mappings (None and {} alike: LitData's versions differ).
MAPPINGS = {"storage_options", "session_options"}


def _values(names: list[tuple[str, bool]]) -> list[str]:
    return [n for n, since_076 in names if LITDATA_076 or not since_076]


def _pair(data_dir: str, tmp_path: Any, **kw: Any) -> tuple[Any, Any]:
    """The LitData dataset and ours over ``data_dir`` with the same arguments (their own cache folders)."""
    lit = engine("litdata").StreamingDataset(data_dir, cache_dir=str(tmp_path / "c-lit"), **kw)
    ours = engine("streamscope").StreamingDataset(data_dir, cache_dir=str(tmp_path / "c-ours"), **kw)
    return lit, ours


def test_distributed_env_is_litdatas_with_the_launchers_values(
    data_dir: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("GLOBAL_RANK", "2")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("NNODES", "2")
    lit, ours = _pair(data_dir, tmp_path)
    a, b = lit.distributed_env, ours.distributed_env
    assert type(b).__name__ == type(a).__name__ == "_DistributedEnv"
    assert (b.world_size, b.global_rank, b.num_nodes) == (a.world_size, a.global_rank, a.num_nodes) == (4, 2, 2)
    assert repr(b) == repr(a) and str(b) == str(a)
    assert len(ours) == len(lit)  # this rank's share, as the environment says

    # LitData's classes live at litdata.utilities.env; ours at the same path, with the same equality and hash
    lit_cls = engine("litdata").utilities.env._DistributedEnv
    from streamscope.utilities.env import _DistributedEnv

    assert _DistributedEnv(4, 2, 2) == b and _DistributedEnv(4, 1, 2) != b
    if "__hash__" in vars(lit_cls):  # LitData 0.2.76 hashes the three fields (0.2.68 by identity)
        assert hash(_DistributedEnv(4, 2, 2)) == hash(lit_cls(4, 2, 2))
        assert lit_cls(4, 2, 2) == a


def test_assigning_distributed_env_moves_the_dataset_to_that_rank(data_dir: str, tmp_path: Any) -> None:
    """LitData's clients (and its tests) set a rank by assigning ``distributed_env``: both datasets then read that
    rank's share of the same size."""
    lit, ours = _pair(data_dir, tmp_path, drop_last=True)
    lit_cls = engine("litdata").utilities.env._DistributedEnv
    from streamscope.utilities.env import _DistributedEnv

    lit.distributed_env = lit_cls(world_size=3, global_rank=1, num_nodes=1)
    ours.distributed_env = _DistributedEnv(world_size=3, global_rank=1, num_nodes=1)
    assert (ours.world_size, ours.rank) == (3, 1)
    assert len(ours) == len(lit) == 50 // 3
    ours.distributed_env = lit_cls(world_size=2, global_rank=0, num_nodes=1)  # LitData's own object works too
    assert ours.distributed_env == _DistributedEnv(2, 0, 1) and len(ours) == 25
    ours.distributed_env.global_rank = 1  # a field set on the dataset's env moves the dataset, as on LitData's
    assert ours.rank == 1
    from streamscope._core.errors import DatasetError

    with pytest.raises(DatasetError, match="global_rank=2, world_size=2"):
        ours.distributed_env = _DistributedEnv(2, 2, 1)


def test_worker_env_is_none_until_iteration_then_the_workers_of_this_process(data_dir: str, tmp_path: Any) -> None:
    lit, ours = _pair(data_dir, tmp_path)
    assert lit.worker_env is None and ours.worker_env is None
    next(iter(lit))
    next(iter(ours))
    a, b = lit.worker_env, ours.worker_env
    assert type(b).__name__ == type(a).__name__ == "_WorkerEnv"
    assert (b.world_size, b.rank) == (a.world_size, a.rank) == (1, 0)
    assert repr(b) == repr(a)


@pytest.mark.parametrize("given", [True, False])
def test_cache_dir_is_the_argument_as_a_dir(data_dir: str, tmp_path: Any, given: bool) -> None:
    cache = str(tmp_path / "cache") if given else None
    lit = engine("litdata").StreamingDataset(data_dir, cache_dir=cache)
    ours = engine("streamscope").StreamingDataset(data_dir, cache_dir=cache)
    assert (ours.cache_dir.path, ours.cache_dir.url) == (lit.cache_dir.path, lit.cache_dir.url) == (cache, None)


def test_dataset_attributes_hold_litdatas_values(data_dir: str, tmp_path: Any) -> None:
    kw = dict(shuffle=True, seed=7, max_cache_size=10**9, max_pre_download=3, subsample=0.5)
    lit, ours = _pair(data_dir, tmp_path, **kw)
    for name in _values(DATASET_VALUES):
        assert hasattr(lit, name), f"LitData's StreamingDataset has no {name!r}: the list is stale"
        mine, theirs = getattr(ours, name), getattr(lit, name)
        if name in MAPPINGS:
            mine, theirs = mine or {}, theirs or {}
        assert mine == theirs, name
    # the same after a pass: the epoch moved on in both
    assert sorted(s["index"] for s in ours) == sorted(s["index"] for s in lit)
    for name in ("current_epoch", "subsampled_files", "region_of_interest"):
        assert getattr(ours, name) == getattr(lit, name), name
    for name in KNOWN_DIFFERENT:
        assert hasattr(lit, name) and hasattr(ours, name), name


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_attributes_hold_litdatas_values(data_dir: str, tmp_path: Any, workers: int) -> None:
    from torch.utils.data import DataLoader, IterableDataset

    lit_ds, ours_ds = _pair(data_dir, tmp_path, shuffle=True)
    kw: dict[str, Any] = dict(batch_size=4, num_workers=workers)
    if workers:
        kw.update(persistent_workers=True, prefetch_factor=3)
    lit = engine("litdata").StreamingDataLoader(lit_ds, **kw)
    ours = engine("streamscope").StreamingDataLoader(ours_ds, **kw)
    for name in LOADER_VALUES:
        assert hasattr(lit, name), f"LitData's StreamingDataLoader has no {name!r}: the list is stale"
        assert getattr(ours, name) == getattr(lit, name), name
    # what Lightning checks: a DataLoader over an IterableDataset (no sampler to replace), with a length, stateful
    assert isinstance(ours, DataLoader) and isinstance(lit, DataLoader)
    assert ours.dataset is ours_ds and isinstance(ours.dataset, IterableDataset)
    assert type(ours.sampler).__name__ == type(lit.sampler).__name__
    assert type(lit.batch_sampler).__name__ == "BatchSampler" and ours.batch_sampler is None  # (known difference)
    assert len(ours) == len(lit)
    assert callable(ours.state_dict) and callable(ours.load_state_dict)
    assert set(lit.state_dict()) <= set(ours.state_dict())  # LitData's keys, and our plan position beside them
    # one batch each: the same samples in the same batch shape (no shuffle across engines is compared here)
    assert sorted(len(b["index"]) for b in ours) == sorted(len(b["index"]) for b in lit)
