"""How litdata_real.log was made: the real LitData 0.2.68 tracer, two runs appended to one log.

    python make_litdata_real_log.py DATA_DIR LOG CACHE 0    # run 1: num_workers=0 (every event in the main process)
    python make_litdata_real_log.py DATA_DIR2 LOG CACHE 2   # run 2: num_workers=2 (forked workers' lines are lost)

Run 2 shows a LitData limitation the tools must cope with: forked workers inherit the log handler but not its
flusher thread, and exit without flushing, so only the main process's batch/dataloader spans reach the log.
"""

import logging
import sys
import time

from litdata import StreamingDataLoader, StreamingDataset, optimize
from litdata.debugger import enable_tracer


def fn(i):
    return {"x": i, "s": f"sample-{i}"}


if __name__ == "__main__":
    out, log, cache, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    optimize(fn, list(range(64)), output_dir=out, chunk_size=8, num_workers=1, mode="overwrite")
    enable_tracer(level="debug", log_file=log, flush_interval=1)
    ds = StreamingDataset(input_dir="local:" + out, cache_dir=cache, max_cache_size="1MB")
    dl = StreamingDataLoader(ds, batch_size=4, num_workers=workers)
    n = 0
    for _epoch in range(2):
        for _batch in dl:
            n += 1
            time.sleep(0.002)
    logging.shutdown()
    print("batches", n)
