"""Resuming from EVERY checkpoint a worker records gives the chunks of the uninterrupted run (in-process)."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope.processing import worker as worker_mod
from streamscope.processing.worker import Resume, WorkerJob
from tests.processing import _fns


def _job(out: str, staging: str, fn, n: int, limit: dict, layout: str, resume: Resume | None = None) -> WorkerJob:
    return WorkerJob(
        kind="optimize",
        worker=0,
        num_workers=1,
        fn=fn,
        inputs=list(range(n)),
        offset=0,
        output_dir=out,
        storage_options={},
        staging_dir=staging,
        writer_kwargs={
            "chunk_size": None,
            "chunk_bytes": None,
            **limit,
            "compression": None,
            "item_loader": None,
            "write_format": layout,
        },
        use_checkpoint=True,
        resume=resume or Resume(),
        parent_pid=os.getppid(),  # run in this process: its "main process" is our parent
    )


def _files(path: str) -> dict[str, bytes]:
    out = {}
    for name in os.listdir(path):
        if name.startswith("chunk-"):
            with open(os.path.join(path, name), "rb") as f:
                out[name] = f.read()
    return out


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=30),
    st.one_of(
        st.integers(1, 6).map(lambda n: {"chunk_size": n}), st.integers(10, 120).map(lambda n: {"chunk_bytes": n})
    ),
    st.sampled_from(["0.2.68", "0.2.76"]),
)
def test_resume_from_every_checkpoint(counts, limit, layout):
    """In LitData 0.2.76's layout the samples are Arrow rows, counted by their payload and then by the bytes per
    row of the chunks before: the resumed writer must carry that (and the fused schema) over."""
    fn = functools.partial(_fns.counted, counts)
    root = tempfile.mkdtemp(prefix="resume-points-")
    records: list[dict] = []
    real_save = worker_mod._save_checkpoint

    def recording_save(store, rank, chunks, config, inputs_done, skip, next_chunk, finished, writer_state=None):
        records.append(
            {
                "chunks": list(chunks),
                "config": config,
                "inputs_done": inputs_done,
                "skip_samples": skip,
                "next_chunk_index": next_chunk,
                "finished": finished,
                "writer_state": writer_state,
            }
        )
        real_save(store, rank, chunks, config, inputs_done, skip, next_chunk, finished, writer_state)

    try:
        ref, staging = os.path.join(root, "ref"), os.path.join(root, "staging")
        os.makedirs(staging)
        worker_mod._save_checkpoint = recording_save
        try:
            ref_chunks, ref_config = worker_mod._run_optimize(_job(ref, staging, fn, len(counts), limit, layout), [0])
        finally:
            worker_mod._save_checkpoint = real_save
        ref_files = _files(ref) if os.path.isdir(ref) else {}
        assert sum(c["chunk_size"] for c in ref_chunks) == sum(counts)
        for r, rec in enumerate(records):
            out = os.path.join(root, f"resume-{r}")
            os.makedirs(out)
            for c in rec["chunks"]:  # what a killed run left behind: the chunks its checkpoint lists
                shutil.copy(os.path.join(ref, c["filename"]), os.path.join(out, c["filename"]))
            chunks, config = worker_mod._run_optimize(
                _job(out, staging, fn, len(counts), limit, layout, Resume.from_record(rec)), [0]
            )
            assert chunks == ref_chunks
            assert config == ref_config
            assert _files(out) == ref_files
    finally:
        shutil.rmtree(root, ignore_errors=True)
