"""LitData 0.2.76's README code examples: what it adds or changes from 0.2.68's README, run on streamscope.

Each test runs one example with small sizes. Under LitData 0.2.76 (the second pass of ``./run.sh test``) the
same scenario runs on the real ``litdata`` too (``both076``) and the outcomes are compared as the compat suite
does; under 0.2.68 only streamscope runs, checked against what the README says. Examples the README repeats
unchanged from 0.2.68 are run by ``test_readme_examples.py`` (its ``interop`` tests also run in the 0.2.76
pass). Where streamscope cannot read what LitData 0.2.76 writes for an example, a strict xfail under 0.2.76
names the layout; features not provided are strict xfails naming them (``tests/compat/README.md`` lists every
README section and where it is run, or why it cannot run here).

README sections, in order, and where their examples run (this file unless named):

- Quick start / Option 1 raw files: ``test_readme_examples.py`` (raw dataset code is identical in 0.2.76).
- Option 2 step 1 with ``ld.Image(...)``: ``test_option2_typed_image_wrapper`` (not provided), and the same
  pipeline with the array as a plain leaf: ``test_option2_stream_with_custom_collate``.
- Keyed lookup and in-place patches, Transform datasets (map): ``test_readme_examples.py``.
- Modality: ``test_modality_wrappers_write`` (not provided), ``test_modality_numpy_leaf``,
  ``test_reads_litdata_076_typed_leaves``.
- Stream raw files, large cloud datasets, custom serializers, MDS, multi-GPU, cloud providers, queue input,
  LLM pre-training, filter, combine, parallel/cycle, transform while streaming, upsample, modify, access
  samples, data transforms, reduce memory, cache directory, networked drives, distributed optimize, encryption,
  tracer, resolve paths, walk: ``test_readme_examples.py``.
- Optimize images as JPEG (``Image``/``Jpeg`` wrappers): ``test_option2_typed_image_wrapper``.
- Shuffle (``item_shuffle_window``): ``test_shuffle_item_shuffle_window``.
- StreamingDataset & StreamingDataLoader knobs: ``test_knobs_table``.
- Pause/resume (``num_canonical_nodes``, another ``num_workers``): ``test_resume_with_other_workers``.
- Shared queue (new default): ``test_shared_queue_default``.
- Merge datasets + ``complete_dataset``: ``test_merge_then_complete_dataset``.
- Split / subset / load a subset: ``test_subset_and_split``.
- Stream parquet (index built automatically): ``test_parquet_folder_without_index``.
- Use compression (the example, and its levels): ``test_compression_readme_example``, ``test_compression_levels``.
- Profile (cProfile): ``test_profile_cprofile``.
- Limit cache space: ``test_limit_cache_space``.
- Async prefetch & environment variables: ``test_async_prefetch_environment``.
- NUMA affinity: ``test_numa_affinity_as_worker_init``.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import numpy as np
import pytest

import streamscope
from tests.compat.conftest import both, engine, plain
from tests.support.litdata_version import LITDATA_076, xfail_076

pytestmark = pytest.mark.interop

_NO_WRAPPERS = "issue 22: typed media wrappers (ld.Image, ld.Text, ...) are not provided: writing their 0.2.76 leaves"


def both076(scenario: Any, *args: Any, errors_ok: bool = False) -> tuple[Any, Any]:
    """``(litdata's outcome, streamscope's)`` under LitData 0.2.76; under 0.2.68 ``(None, streamscope's)``: the
    example is 0.2.76's, which 0.2.68 cannot run."""
    if LITDATA_076:
        return both(scenario, *args, errors_ok=errors_ok)
    try:
        return None, plain(scenario(engine("streamscope"), *args))
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
        return None, ("raised", type(exc).__name__)


@pytest.fixture(autouse=True)
def _write_076_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """streamscope writes 0.2.76's layout here in both passes (these are 0.2.76's examples; the 0.2.68 pass would
    otherwise write 0.2.68's, see tests/conftest.py)."""
    monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", "0.2.76")


def same076(a: Any, b: Any) -> None:
    """LitData 0.2.76's outcome equals streamscope's (nothing to compare under 0.2.68)."""
    if a is not None:
        assert a == b


# --- functions handed to optimize() (module level: spawned workers import them) ------------------------------


def random_images_array(index: int) -> dict[str, Any]:
    """README "Option 2" step 1 with the image as a plain uint8 array (8x8, seeded)."""
    rng = np.random.RandomState(index)
    return {"index": index, "image": rng.randint(0, 256, (8, 8, 3), dtype=np.uint8), "class": rng.randint(10)}


def random_images_wrapped(engine_name: str, index: int) -> dict[str, Any]:
    """README "Option 2" step 1 as written: ``ld.Image(array=..., quality=95, format="jpeg")``."""
    ld = __import__(engine_name)
    sample = random_images_array(index)
    sample["image"] = ld.Image(array=sample["image"], quality=95, format="jpeg")
    return sample


def compress(index: int) -> tuple[int, int]:
    return index, index**2


def wrapped_sample(engine_name: str, kind: str, i: int) -> dict[str, Any]:
    """One sample per Modality row that needs no extra package: the wrapper the README shows for it."""
    import torch
    from PIL import Image as PILImage

    ld = __import__(engine_name)
    arr = np.random.RandomState(i).randint(0, 256, (8, 8, 3), dtype=np.uint8)
    make = {
        "Text": lambda: ld.Text(text=f"a caption {i}"),
        "File": lambda: ld.File(bytes=b"blob %d" % i),
        "Tensor": lambda: ld.Tensor(array=torch.arange(4) + i),
        "Pil": lambda: ld.Pil(image=PILImage.fromarray(arr)),
        "Jpeg": lambda: ld.Jpeg(array=arr, quality=95),
        "Image": lambda: ld.Image(array=arr, quality=95, format="jpeg"),
        "Tiff": lambda: ld.Tiff(array=np.full((3, 4), i, dtype=np.uint16)),
    }
    return {"x": make[kind](), "i": i}


def numpy_sample(i: int) -> dict[str, Any]:
    """Modality "Numpy": ``np.zeros((3, 4, 4))`` as a leaf."""
    return {"x": np.zeros((3, 4, 4)) + i, "i": i}


# --- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compress_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``compress`` over range(100), chunks of 16, written by streamscope (both engines read it)."""
    out = str(tmp_path_factory.mktemp("readme076-compress") / "data")
    streamscope.optimize(fn=compress, inputs=list(range(100)), output_dir=out, chunk_size=16, num_workers=1)
    return out


# --- Option 2 / Optimize images as JPEG / Modality ---------------------------------------------------------


@pytest.mark.xfail(strict=True, reason=_NO_WRAPPERS)
def test_option2_typed_image_wrapper(tmp_path: Any) -> None:
    streamscope.optimize(
        fn=partial(random_images_wrapped, "streamscope"),
        inputs=list(range(10)),
        output_dir=str(tmp_path / "fast_data"),
        num_workers=1,
        chunk_bytes="64MB",
    )
    ds = streamscope.StreamingDataset(str(tmp_path / "fast_data"))
    assert tuple(ds[0]["image"].shape) == (3, 8, 8)  # README: decoded to a CHW tensor


def test_option2_stream_with_custom_collate(tmp_path: Any) -> None:
    def collate_fn(batch: list[Any]) -> dict[str, Any]:
        return {"image": [sample["image"] for sample in batch], "class": [sample["class"] for sample in batch]}

    def scenario(ld: Any) -> Any:
        out = str(tmp_path / f"fast_data-{ld.__name__}")
        ld.optimize(fn=random_images_array, inputs=list(range(40)), output_dir=out, num_workers=1, chunk_bytes="2KB")
        dataset = ld.StreamingDataset(out, shuffle=True, drop_last=True, seed=42)
        dataloader = ld.StreamingDataLoader(dataset, batch_size=8, collate_fn=collate_fn)
        got = [(int(c), img.tolist()) for batch in dataloader for img, c in zip(batch["image"], batch["class"])]
        return sorted(got), len(dataloader)

    a, b = both076(scenario)
    same076(a, b)
    assert b[1] == 5 and len(b[0]) == 40  # shuffled order is engine-specific: the sorted samples are compared
    assert b[0] == sorted((int(s["class"]), s["image"].tolist()) for s in map(random_images_array, range(40)))


@pytest.mark.xfail(strict=True, reason=_NO_WRAPPERS)
@pytest.mark.parametrize("kind", ["Text", "File", "Tensor", "Pil", "Jpeg", "Image", "Tiff"])
def test_modality_wrappers_write(tmp_path: Any, kind: str) -> None:
    out = str(tmp_path / kind)
    streamscope.optimize(
        fn=partial(wrapped_sample, "streamscope", kind), inputs=list(range(4)), output_dir=out, chunk_size=2
    )
    assert len(streamscope.StreamingDataset(out)) == 4


def test_modality_numpy_leaf(tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        out = str(tmp_path / ld.__name__)
        ld.optimize(fn=numpy_sample, inputs=list(range(5)), output_dir=out, chunk_size=2, num_workers=1)
        return [(s["i"], s["x"]) for s in ld.StreamingDataset(out)]

    a, b = both076(scenario)
    same076(a, b)
    assert b == [(i, ("ndarray", "float64", (np.zeros((3, 4, 4)) + i).tolist())) for i in range(5)]


# What LitData 0.2.76 writes for the Modality rows it can also read back here (no torchvision for JPEG/Image
# decoding; its Tiff wrapper fails to read back in 0.2.76 itself: KeyError 'tiff').
_TYPED_076 = {
    "Text": "needs reading 0.2.76 layouts: the 'text' leaf",
    "File": None,
    "Tensor": None,
    "Pil": None,
}


@pytest.mark.skipif(not LITDATA_076, reason="LitData 0.2.76 writes the typed leaves")
@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=[xfail_076(why)] if why else []) for k, why in _TYPED_076.items()]
)
def test_reads_litdata_076_typed_leaves(tmp_path: Any, kind: str) -> None:
    """A dataset a 0.2.76 user wrote with the Modality wrappers opens in streamscope with the same samples."""
    import litdata

    out = str(tmp_path / kind)
    litdata.optimize(
        fn=partial(wrapped_sample, "litdata", kind), inputs=list(range(4)), output_dir=out, chunk_size=2, num_workers=1
    )
    want = plain([_comparable(s) for s in litdata.StreamingDataset(out)])
    assert plain([_comparable(s) for s in streamscope.StreamingDataset(out)]) == want


def _comparable(sample: dict[str, Any]) -> dict[str, Any]:
    x = sample["x"]
    if hasattr(x, "tobytes") and hasattr(x, "mode"):  # a PIL image
        x = (x.mode, x.size, x.tobytes())
    return {"x": x, "i": sample["i"]}


# --- Shuffle, knobs, resume ----------------------------------------------------------------------------


@pytest.mark.parametrize("window", [256, 0, "full"])
def test_shuffle_item_shuffle_window(compress_dir: str, window: Any) -> None:
    def scenario(ld: Any) -> Any:
        train = ld.StreamingDataset(compress_dir, shuffle=True, drop_last=True, seed=42, item_shuffle_window=window)
        loader = ld.StreamingDataLoader(train, batch_size=8, num_workers=0)
        order = [int(x) for batch in loader for x in batch[0]]
        again = list(ld.StreamingDataLoader(train, batch_size=8, shuffle=True, drop_last=True))
        return len(set(order)), set(order) <= set(range(100)), order != sorted(order), len(again)

    a, b = both076(scenario)
    # orders, and so which 4 samples drop_last leaves out, are engine-specific: counts, distinct samples from
    # the dataset, and that the order is shuffled are compared
    same076(a, b)
    assert b == (96, True, True, 12)


def test_knobs_table(compress_dir: str, tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        out = []
        for size in (None, "100G", "50GB", 0.9):
            ds = ld.StreamingDataset(compress_dir, max_cache_size=size, max_pre_download=2, subsample=0.5, seed=42)
            out.append(len(ds))
        loader = ld.StreamingDataLoader(
            ld.StreamingDataset(compress_dir), batch_size=10, num_workers=2, multiprocessing_context="spawn"
        )
        return out, sum(len(batch[0]) for batch in loader)

    a, b = both076(scenario)
    same076(a, b)
    assert b == ([50, 50, 50, 50], 100)


@pytest.mark.parametrize("workers", [(2, 1), (1, 2)])
def test_resume_with_other_workers(compress_dir: str, tmp_path: Any, workers: tuple[int, int]) -> None:
    """README "Pause, resume": same seed and shuffle; ``num_workers`` may change between save and resume, and
    ``num_canonical_nodes`` is frozen in the checkpoint."""
    import torch

    def scenario(ld: Any) -> Any:
        state_path = str(tmp_path / f"dataloader_state-{ld.__name__}-{workers}.pt")
        before, after = workers
        dataset = ld.StreamingDataset(compress_dir, shuffle=True, num_canonical_nodes=1)
        dataloader = ld.StreamingDataLoader(dataset, num_workers=before, batch_size=4)
        first: list[int] = []
        for batch_idx, batch in enumerate(dataloader):
            first += batch[0].tolist()
            if batch_idx == 5:
                torch.save(dataloader.state_dict(), state_path)
                break
        dataset = ld.StreamingDataset(compress_dir, shuffle=True, num_canonical_nodes=1)
        dataloader = ld.StreamingDataLoader(dataset, num_workers=after, batch_size=4)
        dataloader.load_state_dict(torch.load(state_path))
        rest = [x for batch in dataloader for x in batch[0].tolist()]
        state = torch.load(state_path)["dataset"]
        return len(first), sorted(first + rest), state["num_canonical_nodes"], state["state_version"]

    a, b = both076(scenario)
    same076(a, b)  # which samples came first is engine-specific; every sample exactly once after the resume
    assert b == (24, list(range(100)), 1, 2)


# --- Shared queue, merge, subset ----------------------------------------------------------------------------


def test_shared_queue_default(tmp_path: Any) -> None:
    """README "Use shared queue": 0.2.76 defaults ``keep_data_ordered`` to None, a shared queue. streamscope keeps
    True (the input order, deterministic output), one of the orders a shared queue allows: the samples are the
    same, only their order in the chunks may differ (tests/compat/README.md)."""

    def scenario(ld: Any) -> Any:
        import inspect

        out = str(tmp_path / f"fast_data-{ld.__name__}")
        ld.optimize(fn=compress, inputs=list(range(40)), output_dir=out, num_workers=2, chunk_size=2)
        default = inspect.signature(ld.optimize).parameters["keep_data_ordered"].default
        return sorted(ld.StreamingDataset(out)[:]), default

    a, b = both076(scenario)
    assert b == ([(i, i**2) for i in range(40)], True)
    if a is not None:
        assert a == (b[0], None)


def test_merge_then_complete_dataset(tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        root = tmp_path / ld.__name__
        out_dirs = [str(root / f"fast_data_{k}") for k in range(3)]
        for k, out_dir in enumerate(out_dirs):
            ld.optimize(fn=compress, inputs=list(range(10 * k, 10 * k + 10)), output_dir=out_dir, chunk_size=4)
        merged_out_dir = str(root / "merged_fast_data")
        ld.merge_datasets(input_dirs=out_dirs, output_dir=merged_out_dir)
        merged = len(ld.StreamingDataset(merged_out_dir))
        # chunks written by hand (Cache/BinaryWriter, no merge): complete_dataset finishes the folder
        chunks = str(root / "my_chunks")
        writer = __import__(f"{ld.__name__}.streaming.writer", fromlist=["BinaryWriter"]).BinaryWriter(
            chunks, chunk_size=3
        )
        for i in range(7):
            writer[i] = {"i": i, "sq": i * i}
        writer.done()
        before = ld.is_complete_dataset(chunks)
        ld.complete_dataset(chunks)
        return merged, before, ld.is_complete_dataset(chunks), [s["sq"] for s in ld.StreamingDataset(chunks)]

    a, b = both076(scenario)
    same076(a, b)
    assert b == (30, False, True, [i * i for i in range(7)])


def test_subset_and_split(compress_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        dataset = ld.StreamingDataset(compress_dir)
        train_dataset, val_dataset, test_dataset = ld.train_test_split(dataset, splits=[0.3, 0.2, 0.5])
        train = dataset.subset(range(0, 30))
        first = dataset.subset(slice(0, 10))
        small = ld.StreamingDataset(compress_dir, subsample=0.5).subset([0, 10, 20])
        return (
            [len(train_dataset), len(val_dataset), len(test_dataset)],
            [s[0] for s in train],
            [first[i][0] for i in range(len(first))],
            len(small),
        )

    a, b = both076(scenario)
    same076(a, b)
    assert b == ([30, 20, 50], list(range(30)), list(range(10)), 3)


# --- Parquet, compression --------------------------------------------------------------------------------


def test_parquet_folder_without_index(tmp_path: Any) -> None:
    """README "Stream with ParquetLoader": a folder that looks like parquet and has no index.json gets its index
    built by StreamingDataset; ``ParquetLoader(columns=...)`` reads only those columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def scenario(ld: Any) -> Any:
        ParquetLoader = __import__(f"{ld.__name__}.streaming.item_loader", fromlist=["x"]).ParquetLoader  # noqa: N806
        folder = tmp_path / f"my-parquet-data-{ld.__name__}"
        folder.mkdir()
        for f in range(2):
            table = pa.table({"id": list(range(5 * f, 5 * f + 5)), "text": [f"t{i}" for i in range(5)]})
            pq.write_table(table, folder / f"p{f}.parquet")
        dataset = ld.StreamingDataset(str(folder), item_loader=ParquetLoader(low_memory=True))
        only = ld.StreamingDataset(str(folder), item_loader=ParquetLoader(columns=["id"]))
        return dataset[0], len(dataset), (folder / "index.json").exists(), [only[i] for i in (0, 9)]

    a, b = both076(scenario)
    same076(a, b)
    assert b == ({"id": 0, "text": "t0"}, 10, True, [{"id": 0}, {"id": 9}])


def test_compression_readme_example(tmp_path: Any) -> None:
    """README "Use compression" as written: tuples of ints with compression="zstd"."""

    def scenario(ld: Any) -> Any:
        out = str(tmp_path / f"my_optimized_dataset-{ld.__name__}")
        ld.optimize(
            fn=compress, inputs=list(range(100)), output_dir=out, chunk_bytes="64MB", num_workers=1, compression="zstd"
        )
        return ld.StreamingDataset(out)[:]

    # LitData 0.2.76 cannot read back its own README example: its index says compression_level "batch" but the
    # chunk it wrote is not framed ("missing LDFZ01 magic"); streamscope's run is checked alone
    a, b = both076(scenario, errors_ok=True)
    if LITDATA_076:
        assert a == ("raised", "RuntimeError"), "LitData reads its README compression example now: compare again"
    assert b == [(i, i**2) for i in range(100)]


@pytest.mark.parametrize("level", ["batch", "chunk", "sample"])
def test_compression_levels(tmp_path: Any, level: str) -> None:
    """README "Use compression": compression_level and compression_batch_size (numpy samples, which LitData 0.2.76
    reads back in every level)."""

    def scenario(ld: Any) -> Any:
        out = str(tmp_path / f"levels-{ld.__name__}")
        ld.optimize(
            fn=numpy_sample, inputs=list(range(20)), output_dir=out, chunk_bytes="64MB", num_workers=1,
            compression="zstd", compression_level=level, compression_batch_size=8,
        )  # fmt: skip
        names = sorted(n for n in os.listdir(out) if n.endswith(".bin"))
        return [(s["i"], s["x"]) for s in ld.StreamingDataset(out)], names

    a, b = both076(scenario)
    same076(a, b)
    assert [i for i, _ in b[0]] == list(range(20))
    # "chunk" wraps each pytree chunk as a whole-file .zstd.bin; "batch" and "sample" keep the .bin name
    assert b[1] == (["chunk-0-0.zstd.bin"] if level == "chunk" else ["chunk-0-0.bin"])


@pytest.mark.skipif(not LITDATA_076, reason="LitData 0.2.76 writes the framed zstd layout")
def test_reads_litdata_076_default_zstd(tmp_path: Any) -> None:
    import litdata

    out = str(tmp_path / "my_optimized_dataset")
    # numpy samples: framed chunks LitData reads back itself (see test_compression_levels for its tuples)
    litdata.optimize(
        fn=numpy_sample, inputs=list(range(30)), output_dir=out, chunk_bytes="64MB", num_workers=1, compression="zstd"
    )
    want = plain(list(litdata.StreamingDataset(out)))
    assert plain(list(streamscope.StreamingDataset(out))) == want


# --- Profile, cache space, async prefetch, NUMA ----------------------------------------------------------


def test_profile_cprofile(compress_dir: str, tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        profile_dir = str(tmp_path / f"profiles-{ld.__name__}")
        loader = ld.StreamingDataLoader(
            ld.StreamingDataset(compress_dir),
            batch_size=8,
            num_workers=2,
            profile_cprofile=True,
            profile_dir=profile_dir,
        )
        n = sum(len(batch[0]) for batch in loader)
        if ld.__name__ == "streamscope":
            from streamscope.engine.dataloader import join_worker_shutdowns

            join_worker_shutdowns()  # worker 0 writes its profile when it exits
        return n, sorted(os.listdir(profile_dir))

    a, b = both076(scenario)
    same076(a, b)
    assert b == (100, ["cprofile_main.prof", "cprofile_main.txt", "cprofile_worker0.prof", "cprofile_worker0.txt"])


def test_limit_cache_space(compress_dir: str, tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        dataset = ld.StreamingDataset(
            f"local:{compress_dir}",
            cache_dir=str(tmp_path / f"cache-{ld.__name__}"),
            max_cache_size="10GB",
            max_pre_download=4,
        )
        return [s[0] for s in dataset]

    a, b = both076(scenario)
    same076(a, b)
    assert b == list(range(100))


def test_async_prefetch_environment(compress_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's variables are accepted (streamscope's prefetch has its own knobs; the samples are the same)."""
    monkeypatch.setenv("LITDATA_ASYNC_CHUNK_PREFETCH", "0")
    monkeypatch.setenv("LITDATA_ASYNC_MIN_PRE_DOWNLOAD", "0")
    monkeypatch.setenv("LITDATA_ASYNC_DOWNLOAD_CONCURRENCY", "4")
    monkeypatch.setenv("LITDATA_ITEM_SHUFFLE_WINDOW", "0")

    def scenario(ld: Any) -> Any:
        return sorted(
            int(x)
            for batch in ld.StreamingDataLoader(
                ld.StreamingDataset(compress_dir, shuffle=True), batch_size=64, num_workers=2
            )
            for x in batch[0]
        )

    a, b = both076(scenario)
    same076(a, b)
    assert b == list(range(100))


def test_numa_affinity_as_worker_init(compress_dir: str) -> None:
    """README "GPU-local CPU and NUMA memory affinity", with ``get_numa_affinity`` (its documented form for a
    known node; ``get_gpu_affinity`` needs a GPU). CPU-only binding: no memory policy is changed in the test."""
    if not os.path.isdir("/sys/devices/system/node/node0"):
        pytest.skip("no NUMA topology")

    def scenario(ld: Any) -> Any:
        affinity = ld.get_numa_affinity(0, bind_memory=False)
        affinity.bind()
        loader = ld.StreamingDataLoader(
            ld.StreamingDataset(compress_dir),
            batch_size=32,
            num_workers=2,
            worker_init_fn=affinity,
            persistent_workers=True,
        )
        n = sum(len(batch[0]) for batch in loader)
        return (affinity.numa_node, list(affinity.cpus), affinity.bind_memory), n

    before = os.sched_getaffinity(0)
    try:
        a, b = both076(scenario)
    finally:
        os.sched_setaffinity(0, before)
    same076(a, b)
    cpus = sorted(before & {int(c) for c in _node0_cpus()})
    assert b == ((0, cpus, False), 100)


def _node0_cpus() -> list[int]:
    from streamscope.utilities.affinity import _id_list

    with open("/sys/devices/system/node/node0/cpulist") as f:
        return sorted(_id_list(f.read()))
