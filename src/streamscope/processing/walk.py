"""walk(): threaded directory listing with LitData's interface."""

from __future__ import annotations

import concurrent.futures
import os
from collections import deque
from collections.abc import Iterator

__all__ = ["walk"]


def _listdir(folder: str) -> tuple[str, list[str], list[str]]:
    dirs: list[str] = []
    files: list[str] = []
    with os.scandir(folder) as it:
        for entry in it:
            (files if entry.is_file() else dirs).append(entry.name)
    return folder, sorted(dirs), sorted(files)


class walk:  # noqa: N801 - LitData's name (a class there too)
    """Iterate ``(folder, dirnames, filenames)`` for ``folder`` and every folder below it.

    Listings run in a thread pool of ``max_workers`` threads (useful on network filesystems). Unlike LitData,
    the yield order is deterministic: breadth-first, in submission order, with names sorted. It is not
    depth-first and, like LitData, pruning ``dirnames`` has no effect. Anything that is not a regular file
    (directories, and symlinks to directories) is listed in ``dirnames`` and descended into.
    """

    def __init__(self, folder: str, max_workers: int | None = os.cpu_count()) -> None:
        self.folder = folder
        self.max_workers = max_workers or 1

    def __iter__(self) -> Iterator[tuple[str, list[str], list[str]]]:
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            pending: deque[concurrent.futures.Future[tuple[str, list[str], list[str]]]] = deque()
            todo: deque[str] = deque([self.folder])
            while todo or pending:
                while todo and len(pending) < self.max_workers * 2:
                    pending.append(pool.submit(_listdir, todo.popleft()))
                folder, dirs, files = pending.popleft().result()
                todo.extend(os.path.join(folder, d) for d in dirs)
                yield folder, dirs, files
