"""Run as a fresh process: the parent touches S3, then forked and spawned children read from it.

Prints one JSON line: {"parent": backend, "fork": [backend, ok], "spawn": [backend, ok], "loader": [...]}.
Usage: python _fork_scenario.py ENDPOINT_JSON BACKEND [loader]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys


def _child(store, key, expected, q) -> None:  # runs in the child
    from streamscope import events as ev

    ev.ACTIVE.add("download")
    data = store.get(key)
    fallbacks = [e for e in ev.drain() if e[1] == "backend_fallback"]
    q.put([store.backend_name, data == expected, len(fallbacks)])


class _DS:
    """A map-style dataset reading one object per index (what a chunk reader does per chunk)."""

    def __init__(self, store, keys):
        self.store = store
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int):
        import os

        return (self.keys[i], self.store.get(self.keys[i]), self.store.backend_name, os.getpid())


def main() -> None:
    ep = json.loads(sys.argv[1])
    backend = sys.argv[2]
    from streamscope.storage import open_store

    opts = dict(ep["options"], backend=backend)
    store = open_store(ep["url"], opts)
    keys = [f"obj-{i}" for i in range(8)]
    payload = {k: (k * 100).encode() for k in keys}
    for k in keys:
        store.put(k, payload[k])
    assert store.get(keys[0]) == payload[keys[0]]
    out: dict = {"parent": store.backend_name}
    for method in ("fork", "spawn"):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=_child, args=(store, keys[1], payload[keys[1]], q))
        p.start()
        p.join(60)
        if p.is_alive():
            p.kill()
            out[method] = ["HUNG", False, 0]
        else:
            out[method] = q.get(timeout=5) if p.exitcode == 0 else [f"exit {p.exitcode}", False, 0]
    if len(sys.argv) > 3 and sys.argv[3] == "loader":
        import torch.utils.data as tud

        seen = []
        backends = set()
        pids = set()
        for batch in tud.DataLoader(_DS(store, keys), batch_size=None, num_workers=2, timeout=60):
            key, data, bname, pid = batch
            assert data == payload[key]
            seen.append(key)
            backends.add(bname)
            pids.add(pid)
        out["loader"] = [sorted(seen) == sorted(keys) and len(seen) == len(keys), sorted(backends), len(pids)]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
