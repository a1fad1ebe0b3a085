"""Run LitData (whichever ``import litdata`` loads) on the layout cases: ``python -m tests.processing._layout_script
OPS.json`` where OPS.json is a list of operations, run in order in this one process (LitData's optimize is slow
to start, so each test starts as few of these as it can):

* ``["optimize", out_dir, case, layout, start, end, mode, workers]``: ``litdata.optimize`` of the case's samples
  ``start..end-1`` (``mode`` None, "append" or "overwrite") with ``workers`` workers, each taking a contiguous
  range of the inputs (``keep_data_ordered=True``), started by fork;
* ``["read", dataset_dir, result.json]``: every sample of the dataset read with ``litdata.StreamingDataset``,
  written as :func:`~tests.processing._layout_fns.plain` JSON.
"""

from __future__ import annotations

import json
import sys

import litdata

from tests.processing import _layout_fns


def main(ops_file: str) -> None:
    with open(ops_file) as f:
        ops = json.load(f)
    for op in ops:
        if op[0] == "optimize":
            _, out, case, layout, start, end, mode, workers = op
            litdata.optimize(
                fn=_layout_fns.fn_of(case, layout),
                inputs=list(range(start, end)),
                output_dir=out,
                num_workers=workers,
                keep_data_ordered=True,
                start_method="fork",  # spawned workers would import torch and LitData again, each time
                mode=mode,
                verbose=False,
                **_layout_fns.CASES[case][1],
            )
        elif op[0] == "read":
            _, src, result = op
            ds = litdata.StreamingDataset(src)
            samples = [_layout_fns.plain(ds[i]) for i in range(len(ds))]
            with open(result, "w") as f:
                json.dump({"version": litdata.__version__, "samples": samples}, f)
        else:
            raise ValueError(op)


if __name__ == "__main__":
    main(sys.argv[1])
