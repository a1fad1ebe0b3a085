"""The decrypted copy of an encrypted dataset: argument plumbing (the framing is in streamscope.format.encryption)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from streamscope.events import kinds

__all__ = ["decrypted_copy"]


def decrypted_copy(
    *,
    config: dict[str, Any],
    chunks: Sequence[dict[str, Any]],
    store: Any,
    encryption: Any,
    cache_root: str,
    what: str,
) -> str:
    """Decrypt every chunk into a fresh private directory under ``cache_root``; returns it (removed at exit).

    A fresh directory per dataset object: a decrypted copy is never reused by a later reader whose key was not
    checked. The plaintext is on local disk (mode 0700) while the process runs; LitData keeps it in memory.

    Raises:
        EncryptionError: no key, or one of another algorithm or level than ``config`` records.
    """
    import atexit
    import shutil
    import tempfile

    from streamscope.format.encryption import check_encryption
    from streamscope.format.v076 import decrypt_to_classic

    recorded: Any = config.get("encryption")
    check_encryption(recorded, encryption, what)  # it passed: the dataset is encrypted with this key's kind
    os.makedirs(cache_root, exist_ok=True)
    out = tempfile.mkdtemp(prefix="decrypted-", dir=cache_root)
    os.chmod(out, 0o700)
    owner = os.getpid()  # copies of the dataset (train_test_split, workers) share it: removed at exit, by its creator

    def remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(out, True)

    atexit.register(remove)
    for entry in chunks:
        name = entry["filename"]
        with kinds.decrypt(file=name):
            plain = decrypt_to_classic(store.get(name), encryption, recorded["level"], name, config)
        with open(os.path.join(out, name), "wb") as f:  # same name: the reader maps local_dir/filename
            f.write(plain)
    return out
