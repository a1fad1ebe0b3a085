"""LitData 0.2.68's README code examples, in README order, run on streamscope with ``ld = streamscope``.

Each test runs one README example with small sizes (local directories, or the moto ``s3_server`` for
``s3://`` with ``storage_options``) and checks what the README says it does. Where it is cheap, the same
scenario runs on the real ``litdata`` too (``both``) and the outcomes are compared. Functions handed to
optimize()/map() live at module level (worker processes import this module).

Examples NOT run here, and why:

- Lightning platform only: ``optimize``/``map`` with ``num_nodes=32, machine=Machine.DATA_PREP`` (multi-machine
  jobs; ``Machine`` also needs ``lightning_sdk``, not installed), the ``/teamspace/...`` paths, the
  ``litdata cache path/clear`` CLI (a bash block).
- Internet: every ``hf://`` example (``StreamingDataset("hf://...")``, ``index_hf_dataset``,
  ``index_parquet_dataset("hf://...")``), ``gs://`` / ``azure://`` / ``r2://`` storage options (no emulator
  here), the unsigned ``botocore.UNSIGNED`` S3 example (needs a public bucket), the Litracer Go tool.
- LitData itself fails here: the upper-case ``AWS_ACCESS_KEY_ID``/``S3_ENDPOINT_URL`` storage_options spelling
  (LitData 0.2.68 hands them to boto3: ``Session.client() got an unexpected keyword argument``).
- Needs a package that is not installed, so a stand-in is used and the rest of the example runs:
  ``tokenizer.Tokenizer`` (byte-level tokenizer), ``torchvision`` transforms (an equivalent torch function),
  ``pandas`` (``batch.to_pandas()`` -> ``batch.column(...)``), MosaicML ``streaming`` (MDS shards are written
  by hand). ``viztracer`` (``profile_batches``): only the documented ``num_workers >= 1`` check is tested.
- GPUs / multi-node: ``pin_memory=True`` runs, nothing checks device placement; DDP is not run.

Not compared with LitData: shuffled orders (each engine's own permutation; both are checked for being
permutations and for seed-determinism) and JPEG samples (LitData needs torchvision to decode them).
"""

from __future__ import annotations

import io
import json
import os
import time
from functools import partial
from multiprocessing import Process, Queue
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamscope
from tests.compat.conftest import both, installed_layout
from tests.support.litdata_version import LITDATA_076

ld = streamscope


# --- functions the README hands to optimize()/map() (module level: worker processes import them) -------------


def random_images_jpeg(index: int) -> dict[str, Any]:
    """README "Optimize for maximum performance" step 1 (8x8 instead of 32x32, seeded)."""
    from PIL import Image

    rng = np.random.RandomState(index)
    img = Image.fromarray(rng.randint(0, 256, (8, 8, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="JPEG", quality=95)
    buf.seek(0)
    jpeg_image = Image.open(buf)
    fake_labels = rng.randint(10)
    return {"index": index, "image": jpeg_image, "class": fake_labels}


def random_images(index: int) -> dict[str, Any]:
    """README "Use shared queue" / "Merge datasets" (PIL image, seeded)."""
    from PIL import Image

    rng = np.random.RandomState(index)
    fake_images = Image.fromarray(rng.randint(0, 256, (8, 8, 3), dtype=np.uint8))
    return {"index": index, "image": fake_images, "class": rng.randint(10)}


def load_image(path: str) -> dict[str, Any]:
    """README "Optimize images as JPEG (not raw PIL)"."""
    from PIL import Image

    img = Image.open(path)
    if not str(path).lower().endswith((".jpg", ".jpeg")):
        buf = io.BytesIO()
        img.convert("RGB").save(buf, format="JPEG", quality=95)
        buf.seek(0)
        img = Image.open(buf)
    return {"image": img, "path": path}


def resize_image(image_path: str, output_dir: str) -> None:
    """README "Transform datasets" / "Parallelize data transformations (map)"."""
    from PIL import Image

    output_image_path = os.path.join(output_dir, os.path.basename(image_path))
    Image.open(image_path).resize((224, 224)).save(output_image_path)


def identity(index: Any) -> Any:
    """README "Use a Queue as input": ``fn`` is the identity."""
    return index


def data_producer(q: Any, n: int) -> None:
    """README "Use a Queue as input": the producer process."""
    from streamscope.processing.data_processor import ALL_DONE

    for i in range(n):
        q.put((i, i**2))
    q.put(ALL_DONE)


def should_keep(index: int) -> bool:
    return index % 2 == 0


def keep_even(data: int) -> Any:
    """README "Filter illegal data" (first example)."""
    if should_keep(data):
        yield data


def inverse(data: int) -> Any:
    """README "Filter illegal data" (try/except example)."""
    try:
        yield 1 / data
    except ZeroDivisionError:
        pass


def entity(i: int) -> dict[str, Any]:
    """README "Keyed lookup": samples with an ``id`` key."""
    return {"id": f"e{i}", "x": i}


def entity_key(sample: dict[str, Any]) -> str:
    return sample["id"]


def compress(index: int) -> tuple[int, int]:
    """README "Easily modify optimized cloud datasets" / "Use compression"."""
    return index, index**2


class ByteTokenizer:
    """Stand-in for the README's ``tokenizer.Tokenizer`` (not installed): UTF-8 bytes, optional EOS token 0."""

    def encode(self, text: str, bos: bool = False, eos: bool = True) -> Any:
        import torch

        ids = list(text.encode("utf-8")) + ([0] if eos else [])
        return torch.tensor(ids, dtype=torch.int32)


def tokenize_jsonl_zst(filepath: str, tokenizer: Any = None) -> Any:
    """README "LLM Pre-training" step 1 (zstd-compressed jsonl, skipping RedPajamaGithub rows)."""
    import zstandard as zstd

    # the README passes zstd.open an open(filepath, "rb") that nothing closes (a ResourceWarning): given the path,
    # zstd.open closes its file
    with zstd.open(filepath, "rt", encoding="utf-8") as f:
        for row in f:
            text = json.loads(row)["text"]
            if json.loads(row)["meta"]["redpajama_set_name"] == "RedPajamaGithub":
                continue
            yield tokenizer.encode(text, bos=False, eos=True)


def tokenize_parquet(filepath: str, tokenizer: Any = None) -> Any:
    """README "Reduce memory use for large files": yield per row from parquet batches."""
    import pyarrow.parquet as pq

    parquet_file = pq.ParquetFile(filepath)
    for batch in parquet_file.iter_batches(batch_size=4, columns=["content"]):
        for text in batch.column("content").to_pylist():  # README: batch.to_pandas()["content"] (no pandas here)
            yield tokenizer.encode(text, bos=False, eos=True)


def count_rows(pq_file: Any, output_dir: str) -> None:
    """README "Reshard parquet for map / optimize": fn receives a pyarrow ParquetFile."""
    table = pq_file.read()
    first = table.column("id")[0].as_py()
    with open(os.path.join(output_dir, f"shard-{first:04d}.json"), "w") as f:
        json.dump({"rows": table.num_rows, "ids": table.column("id").to_pylist()}, f)


def rows_of(pq_file: Any) -> Any:
    """optimize() over a ParquetReader: one sample per row."""
    for row in pq_file.read().to_pylist():
        yield row["id"], row["content"]


# --- helpers ---------------------------------------------------------------------------------------------


def _write_images(folder: str, n: int, ext: str = "png", size: tuple[int, int] = (12, 10)) -> list[str]:
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(n):
        rng = np.random.RandomState(i)
        p = os.path.join(folder, f"img_{i:03d}.{ext}")
        Image.fromarray(rng.randint(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(p)
        paths.append(p)
    return paths


def _optimize(fn: Any, inputs: Any, output_dir: str, **kw: Any) -> None:
    kw.setdefault("num_workers", 1)
    kw.setdefault("verbose", False)
    if "chunk_size" not in kw:
        kw.setdefault("chunk_bytes", "64MB")
    ld.optimize(fn=fn, inputs=inputs, output_dir=output_dir, **kw)


@pytest.fixture(scope="module")
def compress_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``compress`` over range(100) in chunks of 16 (several chunks, so shuffling and subsets mean something)."""
    out = str(tmp_path_factory.mktemp("readme-compress") / "data")
    with installed_layout():  # both engines read it
        _optimize(compress, list(range(100)), out, chunk_size=16, num_workers=2)
    return out


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """README step 1 (JPEG images) written by streamscope: 40 samples, 2 workers, small chunks."""
    out = str(tmp_path_factory.mktemp("readme-jpeg") / "fast_data")
    with installed_layout():  # both engines read it
        ld.optimize(
            fn=random_images_jpeg,
            inputs=list(range(40)),
            output_dir=out,
            num_workers=2,
            chunk_bytes="4KB",
            verbose=False,
        )
    return out


# --- Option 1: Stream existing files as-is (StreamingRawDataset) ------------------------------------------


def test_option1_raw_files_with_transform_and_dataloader(tmp_path: Any) -> None:
    from PIL import Image
    from torch.utils.data import DataLoader

    folder = str(tmp_path / "raw-images")
    _write_images(folder, 10)
    dataset = ld.StreamingRawDataset(folder, transform=lambda b: Image.open(io.BytesIO(b)).convert("RGB"))
    loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=lambda xs: xs)
    batches = list(loader)
    assert [len(b) for b in batches] == [4, 4, 2]
    images = [img for b in batches for img in b]
    assert all(img.mode == "RGB" and img.size == (12, 10) for img in images)
    # pixels compared as bytes: Image.getdata is deprecated in Pillow 13, get_flattened_data not in Pillow 10
    on_disk = sorted(Image.open(os.path.join(folder, f)).convert("RGB").tobytes() for f in os.listdir(folder))
    assert sorted(img.tobytes() for img in images) == on_disk


@pytest.mark.interop
def test_raw_quick_start_default_bytes_and_storage_options(tmp_path: Any) -> None:
    folder = str(tmp_path / "images")
    paths = _write_images(folder, 5)

    def scenario(eng: Any) -> Any:
        dataset = eng.StreamingRawDataset(folder, storage_options={}, cache_dir=str(tmp_path / f"c-{eng.__name__}"))
        raw = dataset[0]
        return len(dataset), type(raw).__name__, sorted(dataset[i] for i in range(len(dataset)))

    a, b = both(scenario)
    assert a == b
    assert a[0] == 5 and a[1] == "bytes"
    assert a[2] == sorted(Path(p).read_bytes() for p in paths)


def test_raw_setup_groups_image_and_mask(tmp_path: Any) -> None:
    from collections import defaultdict

    from streamscope.raw.indexer import FileMetadata

    folder = tmp_path / "seg"
    folder.mkdir()
    for i in range(4):
        (folder / f"img_{i:03d}.jpg").write_bytes(b"J%d" % i)
        if i != 2:  # img_002 has no mask: it must be dropped by setup
            (folder / f"img_{i:03d}.png").write_bytes(b"M%d" % i)

    class SegmentationRawDataset(ld.StreamingRawDataset):
        def setup(self, files: list[FileMetadata]) -> list[list[FileMetadata]]:
            by_stem: dict[str, dict[str, FileMetadata]] = defaultdict(dict)
            for f in files:
                name = f.path.rsplit("/", 1)[-1]
                stem, _, ext = name.rpartition(".")
                by_stem[stem][ext.lower()] = f
            items = []
            for _stem, parts in sorted(by_stem.items()):
                if "jpg" in parts and "png" in parts:
                    items.append([parts["jpg"], parts["png"]])
            return items

    from torch.utils.data import DataLoader

    dataset = SegmentationRawDataset(str(folder), transform=lambda pair: (pair[0], pair[1]))
    assert len(dataset) == 3
    loader = DataLoader(dataset, batch_size=16, num_workers=0, collate_fn=lambda xs: list(zip(*xs, strict=True)))
    (images, masks), *rest = list(loader)
    assert rest == []
    assert list(images) == [b"J0", b"J1", b"J3"] and list(masks) == [b"M0", b"M1", b"M3"]


def test_raw_recompute_index_sees_new_files(tmp_path: Any) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(3):
        (folder / f"f{i}.bin").write_bytes(bytes([i]))
    cache = str(tmp_path / "cache")
    assert len(ld.StreamingRawDataset(str(folder), cache_dir=cache)) == 3
    (folder / "f3.bin").write_bytes(b"\x03")
    dataset = ld.StreamingRawDataset(str(folder), cache_dir=cache, recompute_index=True)
    assert len(dataset) == 4
    assert sorted(dataset[i] for i in range(4)) == [bytes([i]) for i in range(4)]


# --- Option 2: optimize, then stream -------------------------------------------------------------------


def test_option2_optimize_jpeg_then_stream_with_collate(image_dir: str) -> None:
    dataset = ld.StreamingDataset(image_dir, shuffle=True, drop_last=True, seed=42)
    assert len(dataset) == 40

    def collate_fn(batch: list[dict[str, Any]]) -> dict[str, Any]:
        return {"image": [sample["image"] for sample in batch], "class": [sample["class"] for sample in batch]}

    dataloader = ld.StreamingDataLoader(dataset, batch_size=8, collate_fn=collate_fn)
    seen = 0
    for sample in dataloader:
        img, cls = sample["image"], sample["class"]
        assert len(img) == len(cls) == 8
        # a stored JpegImageFile is decoded to a CHW uint8 tensor (LitData: torchvision.io.decode_jpeg)
        assert all(tuple(i.shape) == (3, 8, 8) and str(i.dtype) == "torch.uint8" for i in img)
        assert all(0 <= int(c) < 10 for c in cls)
        seen += len(img)
    assert seen == 40
    # the stored class is the one random_images_jpeg drew for that index
    for i in (0, 17, 39):
        s = dataset[i]
        assert s["class"] == random_images_jpeg(s["index"])["class"]


def test_option2_keyed_lookup_and_patch(tmp_path: Any) -> None:
    out = str(tmp_path / "fast_data")
    ld.optimize(fn=entity, inputs=list(range(10)), output_dir=out, chunk_bytes="64MB", key_fn=entity_key)
    ds = ld.StreamingDataset(out)
    assert ds["e3"]["x"] == 3
    with ld.dataset_update(out) as update:
        update["e3"] = {"id": "e3", "x": 100}
        update.commit()
    assert ld.StreamingDataset(out)["e3"]["x"] == 100


# --- Transform datasets (map) ----------------------------------------------------------------------------


def test_transform_datasets_map_resizes_every_image(tmp_path: Any) -> None:
    from PIL import Image

    input_dir = str(tmp_path / "my_large_images")
    _write_images(input_dir, 6)
    inputs = [os.path.join(input_dir, f) for f in os.listdir(input_dir)]
    output_dir = str(tmp_path / "my_resized_images")
    ld.map(fn=resize_image, inputs=inputs, output_dir=output_dir, num_workers=2)
    assert sorted(os.listdir(output_dir)) == sorted(os.listdir(input_dir))
    for name in os.listdir(output_dir):
        with Image.open(os.path.join(output_dir, name)) as img:  # closed: .size alone reads only the header
            assert img.size == (224, 224)


def test_map_to_s3(tmp_path: Any, s3_server: Any) -> None:
    from streamscope.storage import open_store

    input_dir = str(tmp_path / "imgs")
    _write_images(input_dir, 4)
    inputs = [os.path.join(input_dir, f) for f in os.listdir(input_dir)]
    url, opts = s3_server.url("my_resized_images"), s3_server.storage_options()
    ld.map(fn=resize_image, inputs=inputs, output_dir=url, num_workers=2, storage_options=opts)
    store = open_store(url, opts)
    assert sorted(m.key for m in store.list("")) == sorted(os.listdir(input_dir))


# --- Stream large cloud datasets / multiple cloud providers (s3 via moto) ----------------------------------


@pytest.fixture
def s3_dataset(compress_dir: str, s3_server: Any) -> tuple[str, dict[str, Any], Any]:
    """``compress_dir`` uploaded to the moto bucket under ``my-data``."""
    store_opts = s3_server.storage_options()
    client = s3_server.boto3_client()
    for name in os.listdir(compress_dir):
        client.upload_file(os.path.join(compress_dir, name), s3_server.bucket, f"my-data/{name}")
    return s3_server.url("my-data"), store_opts, s3_server


def test_stream_large_cloud_dataset(s3_dataset: Any, tmp_path: Any) -> None:
    url, storage_options, _ = s3_dataset
    dataset = ld.StreamingDataset(url, shuffle=True, storage_options=storage_options, cache_dir=str(tmp_path / "c"))
    dataloader = ld.StreamingDataLoader(dataset, batch_size=64)
    rows = []
    for batch in dataloader:
        a, b = batch
        rows += list(zip(a.tolist(), b.tolist(), strict=True))
    assert sorted(rows) == [(i, i**2) for i in range(100)]


def test_s3_custom_cache_dir(s3_dataset: Any, tmp_path: Any) -> None:
    url, storage_options, _ = s3_dataset
    cache = tmp_path / "my-cache"
    dataset = ld.StreamingDataset(url, cache_dir=str(cache), storage_options=storage_options)
    assert dataset[42] == (42, 42**2)
    assert any(name.endswith(".bin") for _, _, files in os.walk(cache) for name in files)


def test_s3_storage_options_spellings(s3_dataset: Any, tmp_path: Any) -> None:
    url, _, srv = s3_dataset
    boto = {
        "endpoint_url": srv.endpoint_url,
        "aws_access_key_id": srv.access_key,
        "aws_secret_access_key": srv.secret_key,
    }
    session_options = {"region_name": srv.region}
    ds = ld.StreamingDataset(url, storage_options=boto, session_options=session_options, cache_dir=str(tmp_path / "a"))
    assert len(ds) == 100 and ds[7] == (7, 49)


# --- Optimize images as JPEG ------------------------------------------------------------------------------


def test_optimize_images_as_jpeg(tmp_path: Any) -> None:
    pngs = _write_images(str(tmp_path / "png"), 3, "png")
    jpgs = _write_images(str(tmp_path / "jpg"), 2, "jpg")
    list_of_paths = pngs + jpgs
    out = str(tmp_path / "fast_data")
    ld.optimize(fn=load_image, inputs=list_of_paths, output_dir=out, chunk_bytes="64MB", num_workers=2, verbose=False)
    ds = ld.StreamingDataset(out)
    assert [s["path"] for s in ds] == list_of_paths
    assert {tuple(s["image"].shape) for s in ds} == {(3, 10, 12)}  # JPEG decoded to a CHW tensor
    index = json.loads(Path(os.path.join(out, "index.json")).read_text())
    assert "jpeg" in index["config"]["data_format"] and "pil" not in index["config"]["data_format"]


# --- Custom serializers ----------------------------------------------------------------------------------


class MyType:
    def __init__(self, v: int) -> None:
        self.v = v

    def to_bytes(self) -> bytes:
        return self.v.to_bytes(4, "little")

    @classmethod
    def from_bytes(cls, data: bytes) -> MyType:
        return cls(int.from_bytes(data, "little"))


def test_custom_serializer_is_accepted_when_streaming(compress_dir: str) -> None:
    from streamscope.streaming.serializers import Serializer

    class MyTypeSerializer(Serializer):
        def serialize(self, item: Any) -> tuple[bytes, str | None]:
            return item.to_bytes(), None

        def deserialize(self, data: bytes) -> Any:
            return MyType.from_bytes(data)

        def can_serialize(self, item: Any) -> bool:
            return isinstance(item, MyType)

    dataset = ld.StreamingDataset(compress_dir, serializers={"my_type": MyTypeSerializer()})
    assert dataset[5] == (5, 25) and len(dataset) == 100


# --- Multi-GPU example (single process), shuffle/seed/drop_last -----------------------------------------


@pytest.mark.interop
def test_train_and_val_loaders(compress_dir: str) -> None:
    def scenario(eng: Any) -> Any:
        train_dataset = eng.StreamingDataset(compress_dir, shuffle=True, drop_last=True)
        train = [row for a, b in eng.StreamingDataLoader(train_dataset, batch_size=64) for row in a.tolist()]
        val_dataset = eng.StreamingDataset(compress_dir, shuffle=False, drop_last=False)
        val = [row for a, b in eng.StreamingDataLoader(val_dataset, batch_size=64) for row in a.tolist()]
        return train, val

    a, b = both(scenario)
    assert a[1] == b[1] == list(range(100))  # validation: unshuffled, in order, in both engines
    for train, val in (a, b):  # (the shuffled order itself is each engine's own)
        # drop_last=True with batch_size=64: one full batch of distinct samples, not in order
        assert len(train) == 64 and len(set(train)) == 64 and set(train) <= set(val) and train != val[:64]


@pytest.mark.interop
def test_shuffle_seed_and_loader_overrides(compress_dir: str) -> None:
    def scenario(eng: Any) -> Any:
        train = eng.StreamingDataset(compress_dir, shuffle=True, drop_last=True, seed=42)
        loader = eng.StreamingDataLoader(train, batch_size=8, num_workers=2)
        first = [x for a, _ in loader for x in a.tolist()]
        again = [
            x
            for a, _ in eng.StreamingDataLoader(
                eng.StreamingDataset(compress_dir, shuffle=True, drop_last=True, seed=42), batch_size=8, num_workers=2
            )
            for x in a.tolist()
        ]
        plain = eng.StreamingDataset(compress_dir)
        over = eng.StreamingDataLoader(plain, batch_size=8, shuffle=True, drop_last=True)
        overridden = [x for a, _ in over for x in a.tolist()]
        return first, again, overridden

    for first, again, overridden in both(scenario):
        assert first == again  # same seed, same settings -> same order
        assert sorted(overridden) != overridden  # the loader's shuffle=True overrides the dataset's False
        assert len(overridden) % 8 == 0 and len(first) % 8 == 0 and len(set(first)) == len(first)


# --- Pause, resume ------------------------------------------------------------------------------------


def test_pause_resume_with_torch_save(compress_dir: str, tmp_path: Any) -> None:
    import torch

    state_path = str(tmp_path / "dataloader_state.pt")

    def run(stop_after: int | None) -> list[int]:
        dataset = ld.StreamingDataset(compress_dir, shuffle=True)
        dataloader = ld.StreamingDataLoader(dataset, num_workers=2, batch_size=4)
        if os.path.isfile(state_path):
            dataloader.load_state_dict(torch.load(state_path))
        seen = []
        for batch_idx, batch in enumerate(dataloader):
            seen += batch[0].tolist()
            if stop_after is not None and batch_idx == stop_after:
                torch.save(dataloader.state_dict(), state_path)
                break
        return seen

    full = run(None)
    first = run(4)
    assert first == full[: len(first)]
    rest = run(None)
    assert first + rest == full


# --- Shared queue / Queue as input ------------------------------------------------------------------------


@pytest.mark.interop
def test_shared_queue_keep_data_ordered_false(tmp_path: Any) -> None:
    out = str(tmp_path / "fast_data")
    ld.optimize(
        fn=random_images,
        inputs=list(range(60)),
        output_dir=out,
        num_workers=2,
        chunk_bytes="2KB",
        keep_data_ordered=False,
        verbose=False,
    )
    ds = ld.StreamingDataset(out)
    assert len(ds) == 60
    samples = list(ds)
    assert sorted(s["index"] for s in samples) == list(range(60))  # every input exactly once
    for s in samples[::13]:
        assert s["class"] == random_images(s["index"])["class"]
    # LitData reads it too
    import litdata

    assert sorted(s["index"] for s in litdata.StreamingDataset(out)) == list(range(60))


def test_shared_queue_map(tmp_path: Any) -> None:
    from tests.compat import _fns

    out = str(tmp_path / "mapped")
    ld.map(fn=_fns.write_text, inputs=list(range(12)), output_dir=out, num_workers=2, keep_data_ordered=False)
    assert sorted(os.listdir(out)) == sorted(f"item-{i}.txt" for i in range(12))


def test_queue_as_input_with_all_done(tmp_path: Any) -> None:
    from streamscope.processing.data_processor import ALL_DONE

    assert ALL_DONE == "ALL_DONE"
    out = str(tmp_path / "fast_data")
    os.makedirs(out)
    q: Any = Queue(maxsize=100)
    producer = Process(target=data_producer, args=(q, 120))
    producer.start()
    ld.optimize(fn=identity, queue=q, output_dir=out, num_workers=2, chunk_size=100, mode="overwrite", verbose=False)
    producer.join(timeout=30)
    assert producer.exitcode == 0
    ds = ld.StreamingDataset(out)
    assert len(ds) == 120
    assert sorted(ds[i] for i in range(120)) == [(i, i**2) for i in range(120)]


def test_queue_and_inputs_are_exclusive(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="either inputs or queue"):
        ld.optimize(fn=identity, inputs=[1], queue=Queue(), output_dir=str(tmp_path / "x"), chunk_size=2)
    with pytest.raises(ValueError, match="inputs or queue"):
        ld.optimize(fn=identity, output_dir=str(tmp_path / "x"), chunk_size=2)


# --- LLM pre-training (TokensLoader) -------------------------------------------------------------------


def _slimpajama(root: str) -> list[str]:
    import zstandard as zstd

    folder = os.path.join(root, "slimpajama-raw", "SlimPajama-627B", "train")
    os.makedirs(folder)
    sets = ["RedPajamaC4", "RedPajamaGithub", "RedPajamaBook"]
    for f in range(3):
        rows = [
            json.dumps({"text": f"document {f}-{r} " * (4 * r + 8), "meta": {"redpajama_set_name": sets[(f + r) % 3]}})
            for r in range(4)
        ]
        with open(os.path.join(folder, f"chunk_{f}.jsonl.zst"), "wb") as fh:
            fh.write(zstd.ZstdCompressor().compress(("\n".join(rows) + "\n").encode()))
    return sorted(os.path.join(folder, n) for n in os.listdir(folder))


def test_llm_pretraining_tokens(tmp_path: Any) -> None:
    from streamscope import TokensLoader

    inputs = _slimpajama(str(tmp_path))
    out = str(tmp_path / "slimpajama-optimized")
    outputs = ld.optimize(
        fn=partial(tokenize_jsonl_zst, tokenizer=ByteTokenizer()),
        inputs=inputs,
        output_dir=out,
        chunk_size=(33 * 8),
        item_loader=TokensLoader(),
        num_workers=2,
        verbose=False,
    )
    assert outputs is None
    expected = [t for p in inputs for seq in tokenize_jsonl_zst(p, ByteTokenizer()) for t in seq.tolist()]
    block = 32 + 1
    dataset = ld.StreamingDataset(input_dir=out, item_loader=TokensLoader(block_size=block), shuffle=False)
    blocks = [dataset[i].tolist() for i in range(len(dataset))]
    assert all(len(b) == block for b in blocks)
    # blocks tile the token stream chunk by chunk (a chunk's tail shorter than a block is not served)
    assert len(dataset) >= len(expected) // block - 4
    flat = [t for b in blocks for t in b]
    assert flat[:block] == expected[:block]
    shuffled = ld.StreamingDataset(
        input_dir=out, item_loader=TokensLoader(block_size=block), shuffle=True, drop_last=True
    )
    loader = ld.StreamingDataLoader(shuffled, batch_size=8, pin_memory=True, num_workers=2)
    got = sorted(tuple(row) for batch in loader for row in batch.tolist())
    assert len(got) == (len(dataset) // 8) * 8 or len(got) <= len(dataset)
    assert set(got) <= {tuple(b) for b in blocks}


# --- Filter illegal data --------------------------------------------------------------------------------


@pytest.mark.interop
def test_filter_keep_even(tmp_path: Any) -> None:
    def scenario(eng: Any) -> Any:
        out = str(tmp_path / f"only_even_index_optimized-{eng.__name__}")
        eng.optimize(fn=keep_even, inputs=list(range(40)), output_dir=out, chunk_bytes="64MB", num_workers=1)
        return list(eng.StreamingDataset(out))

    a, b = both(scenario)
    assert a == b == list(range(0, 40, 2))


def test_filter_with_try_except(tmp_path: Any) -> None:
    out = str(tmp_path / "only_defined_ratio_optimized")
    ld.optimize(fn=inverse, inputs=[0, 0, 0, 1, 2, 4, 0], output_dir=out, chunk_bytes="64MB", num_workers=1)
    assert list(ld.StreamingDataset(out)) == [1.0, 0.5, 0.25]


# --- Combine datasets -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    from streamscope import TokensLoader

    root = tmp_path_factory.mktemp("readme-tokens")
    outs = []
    for name, base in (("slimpajama", 0), ("starcoder", 10_000)):
        out = str(root / name)
        with installed_layout():  # both engines read it
            _optimize(_token_seq, [base + i for i in range(20)], out, chunk_size=64, item_loader=TokensLoader())
        outs.append(out)
    return outs[0], outs[1]


def _token_seq(i: int) -> Any:
    import torch

    return torch.arange(i * 10, i * 10 + 10, dtype=torch.int64)


@pytest.mark.interop
def test_combine_weighted_token_datasets(token_dirs: tuple[str, str]) -> None:
    def scenario(eng: Any) -> Any:
        train_datasets = [
            eng.StreamingDataset(
                input_dir=d, item_loader=eng.TokensLoader(block_size=4 + 1), shuffle=True, drop_last=True
            )
            for d in token_dirs
        ]
        combined = eng.CombinedStreamingDataset(
            datasets=train_datasets, seed=42, weights=(0.693584, 0.306416), iterate_over_all=False
        )
        loader = eng.StreamingDataLoader(combined, batch_size=8, pin_memory=True, num_workers=0)
        return [batch.tolist() for batch in loader]

    for batches in both(scenario):  # (which samples are drawn is each engine's own random stream)
        rows = [r for batch in batches for r in batch]
        assert all(len(r) == 5 and r == list(range(r[0], r[0] + 5)) for r in rows)
        from_first = sum(r[0] < 10_000 * 10 for r in rows)
        assert 0 < from_first < len(rows) and from_first / len(rows) > 0.5  # the first dataset dominates


@pytest.mark.interop
@pytest.mark.parametrize("batching_method", ["stratified", "per_stream"])
def test_combine_batching_methods(compress_dir: str, image_dir: str, batching_method: str) -> None:
    def scenario(eng: Any) -> Any:
        dataset1 = eng.StreamingDataset(compress_dir)
        dataset2 = eng.StreamingDataset(compress_dir)
        combined = eng.CombinedStreamingDataset(datasets=[dataset1, dataset2], batching_method=batching_method)
        loader = eng.StreamingDataLoader(combined, batch_size=5)
        return [b[0].tolist() for b in loader]

    for batches in both(scenario):  # (the interleaving is each engine's own random stream)
        assert sorted(x for batch in batches for x in batch) == sorted(list(range(100)) * 2)
        assert all(len(b) == 5 for b in batches[:-1])


# --- Parallel streaming / cycle ----------------------------------------------------------------


def test_parallel_streaming(compress_dir: str) -> None:
    parallel_dataset = ld.ParallelStreamingDataset(
        [ld.StreamingDataset(input_dir=compress_dir), ld.StreamingDataset(input_dir=compress_dir)]
    )
    pairs = [(b1, b2) for b1, b2 in ld.StreamingDataLoader(parallel_dataset)]
    assert len(pairs) == 100

    def transform(samples: Any) -> Any:
        sample_1, sample_2 = samples
        return sample_1[0] + sample_2[0]

    ds = ld.ParallelStreamingDataset(
        [ld.StreamingDataset(compress_dir), ld.StreamingDataset(compress_dir)], transform=transform
    )
    assert sorted(int(x) for x in ld.StreamingDataLoader(ds)) == [2 * i for i in range(100)]


def test_cycle_dataset(compress_dir: str) -> None:
    dataset = ld.StreamingDataset(input_dir=compress_dir)
    cycled_dataset = ld.ParallelStreamingDataset([dataset], length=250)
    assert len(cycled_dataset) == 250
    batches = list(ld.StreamingDataLoader(cycled_dataset))
    assert len(batches) == 250


# --- Merge datasets ---------------------------------------------------------------------------------------


def test_merge_datasets(tmp_path: Any) -> None:
    out_dirs = [str(tmp_path / f"fast_data_{i}") for i in range(1, 5)]
    for out_dir in out_dirs:
        ld.optimize(
            fn=random_images,
            inputs=list(range(25)),
            output_dir=out_dir,
            num_workers=2,
            chunk_bytes="64MB",
            verbose=False,
        )
    merged_out_dir = str(tmp_path / "merged_fast_data")
    ld.merge_datasets(input_dirs=out_dirs, output_dir=merged_out_dir)
    dataset = ld.StreamingDataset(merged_out_dir)
    assert len(dataset) == 100
    assert [s["index"] for s in dataset] == list(range(25)) * 4


# --- Transform while streaming ------------------------------------------------------------------------


def _resize_normalize(img: Any) -> Any:
    """Stand-in for the README's torchvision Compose (Resize + Normalize) on a decoded CHW uint8 image tensor."""
    import torch

    t = torch.nn.functional.interpolate(img[None].float() / 255.0, size=(16, 16), mode="bilinear")[0]
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    return (t - mean) / std


def test_transform_list_and_subclass(image_dir: str, tmp_path: Any) -> None:
    def transform_fn(x: Any, *args: Any, **kwargs: Any) -> Any:
        return {**x, "image": _resize_normalize(x["image"])}

    dataset = ld.StreamingDataset(image_dir, cache_dir=str(tmp_path / "c1"), shuffle=False, transform=[transform_fn])
    s = dataset[3]
    assert tuple(s["image"].shape) == (3, 16, 16) and s["index"] == 3


def test_transform_method_of_subclass(image_dir: str, tmp_path: Any) -> None:
    def transform_fn(x: Any) -> Any:
        return {**x, "image": _resize_normalize(x["image"])}

    s = ld.StreamingDataset(image_dir, shuffle=False, transform=[transform_fn])[3]

    class StreamingDatasetWithTransform(ld.StreamingDataset):
        def transform(self, x: Any, *args: Any, **kwargs: Any) -> Any:
            return {**x, "image": _resize_normalize(x["image"])}

    sub = StreamingDatasetWithTransform(image_dir, cache_dir=str(tmp_path / "c2"), shuffle=False)
    assert all(tuple(x["image"].shape) == (3, 16, 16) for x in sub)
    assert bool((sub[3]["image"] == s["image"]).all())


# --- Split / subset / upsample ------------------------------------------------------------------------


@pytest.mark.interop
def test_train_test_split(compress_dir: str) -> None:
    def scenario(eng: Any) -> Any:
        dataset = eng.StreamingDataset(compress_dir)
        train_dataset, val_dataset, test_dataset = eng.train_test_split(dataset, splits=[0.3, 0.2, 0.5])
        parts = [sorted(x[0] for x in d) for d in (train_dataset, val_dataset, test_dataset)]
        return [len(d) for d in (train_dataset, val_dataset, test_dataset)], parts

    a, b = both(scenario)
    assert a == b
    lens, parts = a
    assert lens == [30, 20, 50]
    assert sorted(x for p in parts for x in p) == list(range(100))


@pytest.mark.interop
def test_subsample_and_upsample(compress_dir: str) -> None:
    def scenario(eng: Any) -> Any:
        sub = eng.StreamingDataset(compress_dir, subsample=0.1)
        up = eng.StreamingDataset(compress_dir, subsample=2.5, shuffle=True)
        return len(sub), len(up), sorted(x[0] for x in sub), sorted(x[0] for x in up)

    a, b = both(scenario)
    assert a == b
    assert a[0] == 10 and a[1] == 250
    from collections import Counter

    counts = Counter(a[3])
    assert set(counts) <= set(range(100)) and min(counts.values()) >= 2  # floor(2.5) full copies, then a part


# --- Modify datasets (append / overwrite), compression ----------------------------------------------------


@pytest.mark.interop
def test_append_then_overwrite(tmp_path: Any) -> None:
    def scenario(eng: Any) -> Any:
        out = str(tmp_path / f"my_optimized_dataset-{eng.__name__}")
        eng.optimize(fn=compress, inputs=list(range(100)), output_dir=out, chunk_bytes="64MB", num_workers=1)
        eng.optimize(
            fn=compress, inputs=list(range(100, 200)), output_dir=out, chunk_bytes="64MB", num_workers=1, mode="append"
        )
        ds = eng.StreamingDataset(out)
        appended = (len(ds), ds[:] == [(i, i**2) for i in range(200)])
        eng.optimize(
            fn=compress, inputs=list(range(5)), output_dir=out, chunk_bytes="64MB", num_workers=1, mode="overwrite"
        )
        return appended, eng.StreamingDataset(out)[:]

    a, b = both(scenario)
    assert a == b
    assert a[0] == (200, True)
    assert a[1] == [(i, i**2) for i in range(5)]


@pytest.mark.interop
def test_compression_zstd(tmp_path: Any) -> None:
    sizes = {}
    for compression in (None, "zstd"):
        out = str(tmp_path / f"my_optimized_dataset-{compression}")
        ld.optimize(
            fn=compress,
            inputs=list(range(100)),
            output_dir=out,
            chunk_bytes="64MB",
            num_workers=1,
            compression=compression,
        )
        sizes[compression] = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".bin"))
        assert ld.StreamingDataset(out)[:] == [(i, i**2) for i in range(100)]
    assert sizes["zstd"] * 2 < sizes[None]  # README: ~4.3x smaller for this example
    import litdata

    assert litdata.StreamingDataset(str(tmp_path / "my_optimized_dataset-zstd"))[:] == [(i, i**2) for i in range(100)]


# --- Parquet ---------------------------------------------------


def _parquet_files(folder: str, rows: tuple[int, ...] = (10, 3)) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    paths, start = [], 0
    for k, n in enumerate(rows):
        p = os.path.join(folder, f"part-{k}.parquet")
        ids = list(range(start, start + n))
        pq.write_table(pa.table({"id": ids, "content": [f"text {i}" for i in ids]}), p)
        paths.append(p)
        start += n
    return paths


def test_index_and_stream_parquet(tmp_path: Any) -> None:
    from streamscope.streaming.item_loader import ParquetLoader

    folder = str(tmp_path / "pq")
    _parquet_files(folder)
    ld.index_parquet_dataset(folder, cache_dir=None, storage_options={}, num_workers=2)
    dataset = ld.StreamingDataset(folder, item_loader=ParquetLoader(low_memory=True))
    assert dataset[0] == {"id": 0, "content": "text 0"}
    assert len(dataset) == 13


def test_index_and_stream_parquet_on_s3_with_wildcard(tmp_path: Any, s3_server: Any) -> None:
    from streamscope.streaming.item_loader import ParquetLoader

    folder = str(tmp_path / "pq")
    paths = _parquet_files(folder, rows=(6, 4, 3))
    client = s3_server.boto3_client()
    for p in paths:
        client.upload_file(p, s3_server.bucket, f"my-parquet-data/train-{os.path.basename(p)}")
    uri, opts = s3_server.url("my-parquet-data"), s3_server.storage_options()
    ld.index_parquet_dataset(uri, cache_dir=None, storage_options=opts, num_workers=2)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_server.bucket)["Contents"]]
    assert "my-parquet-data/index.json" in keys  # README: s3 index is uploaded to {url}/index.json
    dataset = ld.StreamingDataset(
        uri, item_loader=ParquetLoader(low_memory=True), storage_options=opts, cache_dir=str(tmp_path / "c")
    )
    assert len(dataset) == 13 and dataset[0] == {"id": 0, "content": "text 0"}
    dataloader = ld.StreamingDataLoader(dataset, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    ids = sorted(i for batch in dataloader for i in batch["id"].tolist())
    assert ids == list(range(13))
    wild = ld.StreamingDataset(
        f"{uri}/train-part-0.parquet".replace("part-0", "part-*"),
        item_loader=ParquetLoader(),
        storage_options=opts,
        cache_dir=str(tmp_path / "c2"),
    )
    assert sorted(wild[i]["id"] for i in range(len(wild))) == list(range(13))


def test_parquet_reader_reshards_for_map(tmp_path: Any) -> None:
    from streamscope.processing.readers import BaseReader, ParquetReader

    list_of_parquet_paths = _parquet_files(str(tmp_path / "pq"))
    out = str(tmp_path / "out")
    reader = ParquetReader(cache_folder=str(tmp_path / "pq-shards"), num_rows=4)
    assert isinstance(reader, BaseReader)
    ld.map(fn=count_rows, inputs=list_of_parquet_paths, output_dir=out, reader=reader, num_workers=2)
    shards = sorted(os.listdir(tmp_path / "pq-shards" / "4"))
    assert shards == ["0_3_part-1.parquet", "0_4_part-0.parquet", "4_8_part-0.parquet", "8_10_part-0.parquet"]
    results = [json.loads(Path(os.path.join(out, f)).read_text()) for f in sorted(os.listdir(out))]
    assert [r["rows"] for r in results] == [4, 4, 2, 3]
    assert [i for r in results for i in r["ids"]] == list(range(13))


@pytest.mark.interop
def test_parquet_reader_for_optimize_matches_litdata(tmp_path: Any) -> None:
    paths = _parquet_files(str(tmp_path / "pq"), rows=(7, 5))

    def scenario(eng: Any) -> Any:
        readers = __import__(f"{eng.__name__}.processing.readers", fromlist=["ParquetReader"])
        out = str(tmp_path / f"out-{eng.__name__}")
        # LitData 0.2.76's read() returns a pandas DataFrame when to_pandas (its default; pandas is not installed
        # here) where 0.2.68 returned the ParquetFile this fn expects; to_pandas=False gives the file in both
        reader = readers.ParquetReader(
            cache_folder=str(tmp_path / f"shards-{eng.__name__}"),
            num_rows=3,
            **({"to_pandas": False} if LITDATA_076 else {}),
        )
        eng.optimize(fn=rows_of, inputs=paths, output_dir=out, chunk_size=4, num_workers=1, reader=reader)
        return eng.StreamingDataset(out)[:]

    a, b = both(scenario)
    assert a == b
    assert a == [(i, f"text {i}") for i in range(12)]


def test_reduce_memory_tokenize_parquet(tmp_path: Any) -> None:
    from streamscope import TokensLoader

    inputs = _parquet_files(str(tmp_path / "starcoderdata"), rows=(6, 5))
    out = str(tmp_path / "starcoderdata-opt")
    ld.optimize(
        fn=partial(tokenize_parquet, tokenizer=ByteTokenizer()),
        inputs=inputs,
        output_dir=out,
        chunk_size=(9 * 8),
        item_loader=TokensLoader(),
        num_workers=1,
        verbose=False,
    )
    expected = [t for p in inputs for seq in tokenize_parquet(p, ByteTokenizer()) for t in seq.tolist()]
    ds = ld.StreamingDataset(out, item_loader=TokensLoader(block_size=9))
    first = [t for i in range(len(ds)) for t in ds[i].tolist()]
    assert first[:9] == expected[:9] and len(ds) >= 1


# --- Access samples without full download, data transforms --------------------------------------------


def test_access_single_sample_from_s3(s3_dataset: Any, tmp_path: Any) -> None:
    url, opts, _ = s3_dataset
    dataset = ld.StreamingDataset(url, storage_options=opts, cache_dir=str(tmp_path / "c"))
    assert len(dataset) == 100
    assert dataset[42] == (42, 42**2)
    cached = [f for _, _, fs in os.walk(tmp_path / "c") for f in fs if f.endswith(".bin")]
    assert len(cached) == 1  # only the chunk holding sample 42 was downloaded


def test_subclass_getitem_transform(image_dir: str) -> None:
    class ImagenetStreamingDataset(ld.StreamingDataset):
        def __getitem__(self, index: Any) -> Any:
            image = super().__getitem__(index)["image"]
            return _resize_normalize(image)

    dataset = ImagenetStreamingDataset(image_dir)
    dataloader = ld.StreamingDataLoader(dataset, batch_size=4)
    shapes = {tuple(batch.shape) for batch in dataloader}
    assert shapes == {(4, 3, 16, 16)}


# --- Cache size, prefetch, cache directory, network drive -----------------------------------------------


def test_max_cache_size_and_pre_download(s3_dataset: Any, tmp_path: Any) -> None:
    url, opts, _ = s3_dataset
    dataset = ld.StreamingDataset(
        url, max_cache_size="10GB", max_pre_download=4, storage_options=opts, cache_dir=str(tmp_path / "c")
    )
    rows = [
        x[0]
        for batch in ld.StreamingDataLoader(dataset, batch_size=16, num_workers=2)
        for x in zip(*batch, strict=True)
    ]
    assert sorted(int(r) for r in rows) == list(range(100))


def test_async_prefetch_env_off(s3_dataset: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    url, opts, _ = s3_dataset
    monkeypatch.setenv("LITDATA_ASYNC_CHUNK_PREFETCH", "0")
    monkeypatch.setenv("LITDATA_ASYNC_MIN_PRE_DOWNLOAD", "0")
    dataset = ld.StreamingDataset(url, storage_options=opts, cache_dir=str(tmp_path / "c"))
    got = sorted(
        int(x) for batch in ld.StreamingDataLoader(dataset, batch_size=64, num_workers=2) for x in batch[0].tolist()
    )
    assert got == list(range(100))


def test_cache_dir_argument(s3_dataset: Any, tmp_path: Any) -> None:
    url, opts, _ = s3_dataset
    a = ld.StreamingDataset(url, cache_dir=str(tmp_path / "cache-a"), storage_options=opts)
    assert a[:] == [(i, i**2) for i in range(100)]
    assert any(f.endswith(".bin") for _, _, fs in os.walk(tmp_path / "cache-a") for f in fs)


def test_dir_object_path_is_the_cache(s3_dataset: Any, tmp_path: Any) -> None:
    from streamscope.streaming.cache import Dir
    from streamscope.streaming.resolver import Dir as ResolverDir

    url, opts, _ = s3_dataset
    b = ld.StreamingDataset(input_dir=Dir(path=str(tmp_path / "cache-b"), url=url), storage_options=opts)
    c = ld.StreamingDataset(ResolverDir(path=str(tmp_path / "cache-c"), url=url), storage_options=opts)
    assert b[:] == c[:] == [(i, i**2) for i in range(100)]
    for name in ("cache-b", "cache-c"):
        assert any(f.endswith(".bin") for _, _, fs in os.walk(tmp_path / name) for f in fs)


def test_litdata_cache_dir_env(s3_dataset: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    url, opts, _ = s3_dataset
    monkeypatch.setenv("LITDATA_CACHE_DIR", str(tmp_path / "global-cache"))
    ds = ld.StreamingDataset(url, storage_options=opts)
    assert ds[99] == (99, 99**2)
    assert any(f.endswith(".bin") for _, _, fs in os.walk(tmp_path / "global-cache") for f in fs)


def test_network_drive_local_prefix(compress_dir: str, tmp_path: Any) -> None:
    dataset = ld.StreamingDataset(input_dir=f"local:{compress_dir}", cache_dir=str(tmp_path / "c"))
    assert dataset[:] == [(i, i**2) for i in range(100)]


def test_platform_args_raise_outside_studio(tmp_path: Any) -> None:
    with pytest.raises(Exception, match="num_nodes|machine|Studio|platform"):
        ld.optimize(
            fn=compress,
            inputs=list(range(10)),
            num_workers=1,
            output_dir=str(tmp_path / "o"),
            chunk_bytes="64MB",
            num_nodes=32,
        )


# --- Encryption ------------------------------------------------------------------------------


def enc_fn(index: int) -> dict[str, int]:
    """README "Encrypt, decrypt data": the sample function."""
    return {"index": index, "value": index**2}


@pytest.mark.parametrize("level", ["sample", "chunk"])
def test_encrypt_decrypt_fernet(tmp_path: Any, s3_server: Any, level: str) -> None:
    from streamscope.utilities.encryption import FernetEncryption

    fernet = FernetEncryption(password="your_secure_password", level=level)
    data_dir, opts = s3_server.url("optimized_data"), s3_server.storage_options()
    ld.optimize(
        fn=enc_fn,
        inputs=list(range(5)),
        num_workers=1,
        output_dir=data_dir,
        chunk_bytes="64MB",
        encryption=fernet,
        storage_options=opts,
    )
    pem = str(tmp_path / "fernet.pem")
    fernet.save(pem)
    fernet = FernetEncryption.load(pem, password="your_secure_password")
    ds = ld.StreamingDataset(input_dir=data_dir, encryption=fernet, storage_options=opts, cache_dir=str(tmp_path / "c"))
    assert ds[:] == [{"index": i, "value": i**2} for i in range(5)]


def test_encrypt_decrypt_rsa(tmp_path: Any) -> None:
    from streamscope.utilities.encryption import RSAEncryption

    data_dir = str(tmp_path / "optimized_data")
    rsa = RSAEncryption(password="your_secure_password", level="sample")
    ld.optimize(
        fn=enc_fn, inputs=list(range(5)), output_dir=data_dir, chunk_bytes="64MB", encryption=rsa, num_workers=1
    )
    pem = str(tmp_path / "rsa.pem")
    rsa.save(pem)
    rsa = RSAEncryption.load(pem, password="your_secure_password")
    ds = ld.StreamingDataset(input_dir=data_dir, encryption=rsa)
    assert ds[:] == [{"index": i, "value": i**2} for i in range(5)]


# --- Tracing ---------------------------------------------------------------------------------------------


def test_enable_tracer_writes_log(compress_dir: str, tmp_path: Any) -> None:
    from streamscope.debugger import enable_tracer

    log = str(tmp_path / "litdata_debug.log")
    from streamscope.api.tracing import flush_tracer

    enable_tracer(level="chunk", log_file=log)
    try:
        dataset = ld.StreamingDataset(compress_dir, shuffle=True)
        n = sum(len(b[0]) for b in ld.StreamingDataLoader(dataset, batch_size=16, num_workers=0))
        flush_tracer()
    finally:
        enable_tracer(level="off")
    assert n == 100
    assert os.path.getsize(log) > 0
    assert "read" in Path(log).read_text()


# --- Resolve paths: date templates ------------------------------------------------------------------


def test_output_dir_date_template(tmp_path: Any) -> None:
    template = str(tmp_path / "datasets" / "run_{%Y-%m-%d}")
    ld.optimize(fn=compress, inputs=list(range(5)), output_dir=template, chunk_bytes="64MB", num_workers=1)
    expected = str(tmp_path / "datasets" / f"run_{time.strftime('%Y-%m-%d')}")
    assert ld.StreamingDataset(expected)[:] == [(i, i**2) for i in range(5)]


# --- walk / optimize -------------------------------------------------------------------------------------


def test_walk_then_optimize(tmp_path: Any) -> None:
    raw = tmp_path / "raw"
    _write_images(str(raw / "a"), 2, "jpg")
    _write_images(str(raw / "b" / "c"), 2, "jpg")
    (raw / "b" / "notes.txt").write_text("x")
    inputs = []
    for root, _dirs, files in ld.walk(str(raw), max_workers=4):
        for name in files:
            if name.endswith(".jpg"):
                inputs.append(f"{root}/{name}")
    assert len(inputs) == 4
    out = str(tmp_path / "fast")
    ld.optimize(fn=load_image, inputs=inputs, output_dir=out, chunk_bytes="64MB", num_workers=1, verbose=False)
    assert sorted(s["path"] for s in ld.StreamingDataset(out)) == sorted(inputs)


# --- Profile data loading speed (viztracer is not installed: only the documented num_workers check) -------


def test_profile_batches_needs_workers(compress_dir: str, tmp_path: Any) -> None:
    # README: "Profiling requires num_workers >= 1 (raises otherwise)". (LitData here raises
    # ModuleNotFoundError first: viztracer is not installed, so only streamscope is checked.)
    dataset = ld.StreamingDataset(compress_dir, shuffle=True, drop_last=True)
    with pytest.raises((ValueError, RuntimeError)):
        loader = ld.StreamingDataLoader(
            dataset, batch_size=8, num_workers=0, profile_batches=2, profile_dir=str(tmp_path / "profiles")
        )
        list(loader)


# --- Stream MosaicML MDS datasets (shards written by hand in MDS layout: MosaicML streaming is not installed) --


def _write_mds(folder: str, rows: list[tuple[str, int]], per_shard: int) -> None:
    import struct

    os.makedirs(folder, exist_ok=True)
    shards = []
    for s, start in enumerate(range(0, len(rows), per_shard)):
        part = rows[start : start + per_shard]
        samples = []
        for text, number in part:
            t = text.encode()
            samples.append(struct.pack("<I", len(t)) + t + np.int64(number).tobytes())  # str: u32 size prefix
        header = 4 + 4 * (len(samples) + 1)
        offsets, pos = [], header
        for smp in samples:
            offsets.append(pos)
            pos += len(smp)
        offsets.append(pos)
        blob = struct.pack("<I", len(samples)) + struct.pack(f"<{len(offsets)}I", *offsets) + b"".join(samples)
        name = f"shard.{s:05d}.mds"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(blob)
        shards.append(
            {
                "column_encodings": ["str", "int"],
                "column_names": ["text", "number"],
                "column_sizes": [None, 8],
                "compression": None,
                "format": "mds",
                "hashes": [],
                "raw_data": {"basename": name, "bytes": len(blob), "hashes": {}},
                "samples": len(samples),
                "size_limit": 1 << 26,
                "version": 2,
                "zip_data": {"basename": name, "bytes": len(blob), "hashes": {}},
            }
        )
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump({"shards": shards, "version": 2}, f)


@pytest.mark.interop
def test_mds_shards_written_here_read_in_litdata(tmp_path: Any) -> None:
    mds_dataset_uri = str(tmp_path / "my-mds-data")
    _write_mds(mds_dataset_uri, [(f"row {i}", i * 3) for i in range(10)], per_shard=4)
    import litdata

    dataset = litdata.StreamingDataset(mds_dataset_uri)
    assert dataset[0] == {"text": "row 0", "number": 0} and dataset[9] == {"text": "row 9", "number": 27}


@pytest.mark.interop
def test_stream_mds_dataset(tmp_path: Any) -> None:
    mds_dataset_uri = str(tmp_path / "my-mds-data")
    rows = [(f"row {i}", i * 3) for i in range(10)]
    _write_mds(mds_dataset_uri, rows, per_shard=4)

    def scenario(eng: Any) -> Any:
        dataset = eng.StreamingDataset(mds_dataset_uri)
        first = dataset[0]
        batches = [b for b in eng.StreamingDataLoader(dataset, batch_size=4)]
        return first, len(dataset), [(list(b["text"]), b["number"].tolist()) for b in batches]

    a, b = both(scenario)
    assert a == b
    assert a[0] == {"text": "row 0", "number": 0} and a[1] == 10
    assert [t for texts, _ in a[2] for t in texts] == [r[0] for r in rows]


# --- optimize arguments reference: inputs may be a StreamingDataLoader -------------------------------------


def test_optimize_inputs_from_a_streaming_dataloader(compress_dir: str, tmp_path: Any) -> None:
    out = str(tmp_path / "from-loader")
    loader = ld.StreamingDataLoader(ld.StreamingDataset(compress_dir), batch_size=10)
    ld.optimize(fn=_batch_sum, inputs=loader, output_dir=out, chunk_size=4, num_workers=2, verbose=False)
    got = sorted(ld.StreamingDataset(out)[:])
    assert got == sorted(sum(range(k, k + 10)) for k in range(0, 100, 10))


def _batch_sum(batch: Any) -> int:
    return int(batch[0].sum())
