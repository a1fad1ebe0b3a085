"""A local directory as an :class:`~streamscope._core.protocols.ObjectStore`.

Plain paths are read in place (``local_path`` returns the file's real path so readers can mmap it);
``local:`` URLs keep LitData's meaning (files are copied into the cache), so ``local_path`` returns None.
Every write is atomic: data goes to a temporary file next to the destination, then ``os.replace``.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterator
from typing import Any

from streamscope._core.errors import (
    InvalidRangeError,
    ObjectNotFoundError,
    StorageAuthError,
    StorageError,
    UnsupportedURLError,
)
from streamscope._core.protocols import ObjectMeta
from streamscope.storage import retry
from streamscope.storage.async_twins import AsyncTwins
from streamscope.storage.redact import redact
from streamscope.storage.url import StoreURL, normalize_key, parse_url

__all__ = ["LocalStore", "atomic_copy", "atomic_write_bytes", "tmp_path_for"]


# Temporary files written by this module: "<name>.sstmp-<pid>-<hex8>". Listing skips them.
_TMP_RE = re.compile(r"\.sstmp-\d+-[0-9a-f]{8}$")
# Local reads fail for good (missing file, permissions): one attempt, traced like remote ones.
_ONE_ATTEMPT = retry.RetryPolicy(max_attempts=1)


def tmp_path_for(dest: str) -> str:
    """A unique temporary name next to ``dest`` (same directory, so ``os.replace`` is atomic)."""
    return f"{dest}.sstmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _map_os_error(exc: OSError, what: str) -> StorageError:
    msg = redact(f"{what}: {exc.strerror or exc}")
    if isinstance(exc, FileNotFoundError | NotADirectoryError) or exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return ObjectNotFoundError(msg)
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        return StorageAuthError(msg)
    if isinstance(exc, IsADirectoryError):
        return ObjectNotFoundError(f"{msg} (it is a directory, not an object)")
    return StorageError(msg)


def atomic_write_bytes(dest: str, data: bytes | memoryview) -> None:
    """Write ``data`` to ``dest`` through a temporary file and ``os.replace``; no partial file is ever visible."""
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    tmp = tmp_path_for(dest)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        _silent_unlink(tmp)
        raise


def atomic_copy(src: str, dest: str) -> int:
    """Copy file ``src`` to ``dest`` atomically; return the number of bytes copied."""
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    tmp = tmp_path_for(dest)
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            size = fout.tell()
        os.replace(tmp, dest)
    except BaseException:
        _silent_unlink(tmp)
        raise
    return size


def _silent_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class LocalStore(AsyncTwins):
    """Objects are files under a root directory; keys are paths relative to it.

    Args:
        url: A local path, ``file://`` URL or ``local:`` URL (see :mod:`streamscope.storage.url`).
    """

    def __init__(self, url: str | StoreURL) -> None:
        parsed = url if isinstance(url, StoreURL) else parse_url(url)
        if parsed.kind != "local":
            raise StorageError(f"LocalStore cannot serve {parsed.url!r}")
        self._parsed = parsed
        self.url: str = parsed.url
        self.root: str = parsed.prefix
        self.in_place: bool = parsed.in_place

    def __repr__(self) -> str:
        return f"LocalStore({self.url!r})"

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *normalize_key(key, self.url).split("/"))

    def _where(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key.strip('/')}"

    def get(self, key: str) -> bytes:
        """Read the whole object."""
        path = self._path(key)
        where = self._where(key)

        def attempt(f: dict[str, Any]) -> bytes:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                raise _map_os_error(exc, f"cannot read {where!r}") from None
            f["bytes"] = len(data)
            return data

        return retry.call("get", where, attempt, policy=_ONE_ATTEMPT)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Read bytes ``[start, end)``. The range must lie inside the object."""
        path = self._path(key)
        where = self._where(key)
        if start < 0 or end < start:
            raise InvalidRangeError(f"invalid byte range [{start}, {end}) for {where!r}")

        def attempt(f: dict[str, Any]) -> bytes:
            try:
                with open(path, "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    if end > size:
                        raise InvalidRangeError(
                            f"byte range [{start}, {end}) reaches past the end of {where!r} ({size} bytes)"
                        )
                    fh.seek(start)
                    data = fh.read(end - start)
            except InvalidRangeError:
                raise
            except OSError as exc:
                raise _map_os_error(exc, f"cannot read {where!r}") from None
            f["bytes"] = len(data)
            return data

        return retry.call("get_range", where, attempt, policy=_ONE_ATTEMPT, start=start, end=end)

    def head(self, key: str) -> ObjectMeta:
        """Size and modification time of the object."""
        path = self._path(key)
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _map_os_error(exc, f"cannot stat {self._where(key)!r}") from None
        if not os.path.isfile(path):
            raise ObjectNotFoundError(f"{self._where(key)!r} is a directory, not an object")
        return ObjectMeta(key=normalize_key(key, self.url), size=st.st_size, mtime=st.st_mtime)

    def exists(self, key: str) -> bool:
        """True when the object exists (directories are not objects)."""
        return os.path.isfile(self._path(key))

    def put(self, key: str, data: bytes) -> None:
        """Write the object atomically (tmp + rename)."""
        path = self._path(key)
        try:
            atomic_write_bytes(path, data)
        except OSError as exc:
            raise _map_os_error(exc, f"cannot write {self._where(key)!r}") from None

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Every object whose key starts with ``prefix`` (a plain string prefix), sorted by key, recursively.

        Symlinked directories are followed (once each: cycles are cut); only regular files are objects.
        """
        prefix = prefix.lstrip("/")
        if any(seg in (".", "..") for seg in prefix.split("/")[:-1]) or prefix.split("/")[-1] in (".", ".."):
            raise UnsupportedURLError(f"list prefix {prefix!r} is not a plain relative prefix (store {self.url})")
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = os.path.join(self.root, *base_dir.split("/")) if base_dir else self.root
        if not os.path.isdir(start):
            return iter(())
        found: list[ObjectMeta] = []
        # (dev, inode) of every directory on the path from ``start``: meeting one again is a symlink cycle
        ancestors: dict[str, frozenset[tuple[int, int]]] = {}
        for dirpath, dirnames, filenames in os.walk(start, followlinks=True):
            try:
                st_dir = os.stat(dirpath)
            except OSError:
                dirnames[:] = []
                continue
            ident = (st_dir.st_dev, st_dir.st_ino)
            above = ancestors.pop(dirpath, frozenset())
            if ident in above:
                dirnames[:] = []
                continue
            chain = above | {ident}
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            # descend only into directories that can hold keys under the prefix
            dirnames[:] = sorted(
                d
                for d in dirnames
                if (p := f"{rel_dir}/{d}/" if rel_dir else f"{d}/").startswith(prefix) or prefix.startswith(p)
            )
            for d in dirnames:
                ancestors[os.path.join(dirpath, d)] = chain
            for name in filenames:
                if _TMP_RE.search(name):
                    continue
                key = f"{rel_dir}/{name}" if rel_dir else name
                if not key.startswith(prefix):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except OSError:
                    continue  # deleted while listing, or a dangling symlink
                if stat.S_ISREG(st.st_mode):
                    found.append(ObjectMeta(key=key, size=st.st_size, mtime=st.st_mtime))
        found.sort(key=lambda m: m.key)
        return iter(found)

    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing object is not an error (as on S3)."""
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _map_os_error(exc, f"cannot delete {self._where(key)!r}") from None

    def download_file(self, key: str, dest: str) -> int:
        """Copy the object to local path ``dest`` atomically; return its size."""
        src = self._path(key)
        where = self._where(key)

        def attempt(f: dict[str, Any]) -> int:
            try:
                size = atomic_copy(src, dest)
            except OSError as exc:
                if not os.path.exists(src):
                    raise ObjectNotFoundError(f"cannot read {where!r}: no such object") from None
                raise _map_os_error(exc, f"cannot copy {where!r} to {dest!r}") from None
            f["bytes"] = size
            return size

        return retry.call("download_file", where, attempt, policy=_ONE_ATTEMPT)

    def upload_file(self, src: str, key: str) -> None:
        """Copy local file ``src`` to ``key`` atomically."""
        dest = self._path(key)
        try:
            atomic_copy(src, dest)
        except OSError as exc:
            if not os.path.exists(src):
                raise ObjectNotFoundError(f"cannot upload {src!r}: no such file") from None
            raise _map_os_error(exc, f"cannot write {self._where(key)!r}") from None

    def local_path(self, key: str) -> str | None:
        """The object's real path when the store is read in place (plain paths); None for ``local:`` URLs."""
        return self._path(key) if self.in_place else None
