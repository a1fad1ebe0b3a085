"""Encryption of optimized datasets, with LitData's framing (``litdata.utilities.encryption``).

Two levels, recorded in index.json as ``config["encryption"] = {"algorithm": ..., "level": ...}`` (never the
key or the salt):

- ``"sample"``: each item (its size header and leaves) is replaced by ``encrypt(item)`` before the chunk is
  assembled; the chunk header stays plaintext and addresses the ciphertexts.
- ``"chunk"``: the whole chunk (header and items) is one ciphertext; ``chunk_bytes`` is its length.

Compression comes after encryption (the ciphertext is zstd-compressed as a whole file).

Algorithms (both need the ``cryptography`` package, extra ``streamscope[encryption]``):

- :class:`FernetEncryption`: key = urlsafe-base64(PBKDF2-HMAC-SHA256(password, 16-byte random salt, 480000
  iterations, 32 bytes)); ciphertext = a standard Fernet token. The salt is random per instance, so a dataset
  is read back with ``FernetEncryption.load(path, password)`` after ``save(path)`` on the writing side.
- :class:`RSAEncryption`: a fresh 2048-bit key pair per instance, OAEP(MGF1-SHA256, SHA256); one ``encrypt``
  call takes at most 190 bytes, so only tiny samples/chunks fit (as in LitData).

Decryption failures raise :class:`~streamscope._core.errors.EncryptionError` naming what was being read. A
Fernet token that does not open with the key given (wrong password or salt, damaged data) raises
``WrongKeyError``, an ``EncryptionError`` that is also ``cryptography.fernet.InvalidToken``, the type LitData's
``FernetEncryption`` lets through: ``except InvalidToken`` still catches it.
"""

from __future__ import annotations

import base64
import json
import os
import struct
from typing import Any, Literal

from streamscope._core.errors import EncryptionError
from streamscope._core.optional import require
from streamscope.format.header import parse_header

__all__ = [
    "Encryption",
    "EncryptionLevel",
    "FernetEncryption",
    "RSAEncryption",
    "check_encryption",
    "decrypt_chunk",
    "decrypt_chunk_items",
]

EncryptionLevelType = Literal["sample", "chunk"]
_LEVELS = ("sample", "chunk")
_PBKDF2_ITERATIONS = 480_000
_RSA_MAX_PLAINTEXT = 190  # 2048-bit key, OAEP with SHA-256: 256 - 2*32 - 2


class EncryptionLevel:
    """The two encryption levels (LitData's constants)."""

    SAMPLE = "sample"
    CHUNK = "chunk"


def _crypto() -> Any:
    return require("cryptography", "encryption (FernetEncryption, RSAEncryption)", "encryption")


def _check_level(level: Any) -> str:
    if level not in _LEVELS:
        raise ValueError(f"The provided `level` should be either `sample` or `chunk`, got {level!r}")
    return str(level)


class Encryption:
    """Base of the encryption algorithms: ``encrypt``/``decrypt`` bytes, ``state_dict``, ``save``/``load``."""

    level: str

    @property
    def algorithm(self) -> str:
        """The name recorded in index.json."""
        raise NotImplementedError

    def encrypt(self, data: bytes) -> bytes:
        """Ciphertext of ``data``."""
        raise NotImplementedError

    def decrypt(self, data: bytes) -> bytes:
        """Plaintext of ``data``."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """``{"algorithm": ..., "level": ...}`` (what index.json records; no secrets)."""
        return {"algorithm": self.algorithm, "level": self.level}

    def save(self, file_path: str) -> None:
        """Write what a reader needs (with the password) to rebuild this key."""
        raise NotImplementedError

    @classmethod
    def load(cls, file_path: str, password: str) -> Any:
        """Rebuild the key written by :meth:`save`."""
        raise NotImplementedError


class FernetEncryption(Encryption):
    """Fernet (AES-128-CBC + HMAC-SHA256) with a password-derived key.

    Args:
        password: the password the key is derived from.
        level: ``"sample"`` (default) or ``"chunk"``.
    """

    def __init__(self, password: str, level: EncryptionLevelType = "sample") -> None:
        _crypto()
        self.level = _check_level(level)
        self.password = password
        self._use_salt(os.urandom(16))

    def _use_salt(self, salt: bytes) -> None:
        from cryptography.fernet import Fernet  # noqa: PLC0415

        self.salt = salt
        self.key = self._derive_key(self.password, salt)
        self.fernet = Fernet(self.key)

    @property
    def algorithm(self) -> str:
        """``"fernet"``."""
        return "fernet"

    @staticmethod
    def _derive_key(password: str, salt: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes  # noqa: PLC0415
        from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC  # noqa: PLC0415

        kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=salt, iterations=_PBKDF2_ITERATIONS)
        return base64.urlsafe_b64encode(kdf.derive(password.encode()))

    def encrypt(self, data: bytes) -> bytes:
        """A Fernet token for ``data``."""
        return self.fernet.encrypt(bytes(data))

    def decrypt(self, data: bytes) -> bytes:
        """The plaintext of a Fernet token.

        Raises:
            EncryptionError: wrong key (password or salt) or a damaged token.
        """
        from cryptography.fernet import InvalidToken  # noqa: PLC0415

        try:
            return self.fernet.decrypt(bytes(data))
        except InvalidToken:
            raise _wrong_key_error()(
                f"cannot decrypt {len(data)} bytes with this FernetEncryption: wrong password or salt "
                "(load the writer's key with FernetEncryption.load(path, password)) or damaged data"
            ) from None

    def save(self, file_path: str) -> None:
        """Write ``{"algorithm", "level", "salt"}`` as JSON (the password is not stored)."""
        state = self.state_dict()
        state["salt"] = base64.urlsafe_b64encode(self.salt).decode("utf-8")
        with open(file_path, "wb") as f:
            f.write(json.dumps(state).encode("utf-8"))

    @classmethod
    def load(cls, file_path: str, password: str) -> FernetEncryption:
        """The key saved at ``file_path`` (by streamscope or LitData), with ``password``."""
        with open(file_path, "rb") as f:
            state = json.load(f)
        if state.get("algorithm", "fernet") != "fernet":
            raise EncryptionError(f"{file_path!r} holds a {state.get('algorithm')!r} key, not a fernet one")
        inst = cls.__new__(cls)
        inst.level = _check_level(state["level"])
        inst.password = password
        inst._use_salt(base64.urlsafe_b64decode(state["salt"]))
        return inst

    def __getstate__(self) -> dict[str, Any]:
        return {"password": self.password, "level": self.level, "salt": self.salt}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.password = state["password"]
        self.level = state["level"]
        self._use_salt(state["salt"])


class RSAEncryption(Encryption):
    """RSA-OAEP with a 2048-bit key pair made per instance (only plaintexts up to 190 bytes fit).

    Args:
        password: protects the private key when saved.
        level: ``"sample"`` (default) or ``"chunk"``.
    """

    def __init__(self, password: str, level: EncryptionLevelType = "sample") -> None:
        _crypto()
        from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

        self.level = _check_level(level)
        self.password = password
        self.private_key: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_key: Any = self.private_key.public_key()

    @property
    def algorithm(self) -> str:
        """``"rsa"``."""
        return "rsa"

    @staticmethod
    def _padding() -> Any:
        from cryptography.hazmat.primitives import hashes  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import padding  # noqa: PLC0415

        return padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)

    def encrypt(self, data: bytes) -> bytes:
        """RSA-OAEP ciphertext (256 bytes) of at most 190 bytes of ``data``."""
        if self.public_key is None:
            raise EncryptionError("this RSAEncryption has no public key")
        if len(data) > _RSA_MAX_PLAINTEXT:
            raise EncryptionError(
                f"RSA-OAEP encrypts at most {_RSA_MAX_PLAINTEXT} bytes per call, got {len(data)}: use "
                "FernetEncryption for larger samples or chunks"
            )
        return self.public_key.encrypt(bytes(data), self._padding())

    def decrypt(self, data: bytes) -> bytes:
        """The plaintext of an RSA-OAEP ciphertext (needs the private key)."""
        if self.private_key is None:
            raise EncryptionError("this RSAEncryption has no private key")
        try:
            return self.private_key.decrypt(bytes(data), self._padding())
        except ValueError:
            raise EncryptionError(
                f"cannot decrypt {len(data)} bytes with this RSA key: wrong key or damaged data"
            ) from None

    def __getstate__(self) -> dict[str, Any]:
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        protect = (
            serialization.BestAvailableEncryption(self.password.encode())
            if self.password
            else serialization.NoEncryption()
        )
        return {
            "private_key": self.private_key.private_bytes(
                encoding=serialization.Encoding.PEM,
                format=serialization.PrivateFormat.TraditionalOpenSSL,
                encryption_algorithm=protect,
            ).decode("utf-8")
            if self.private_key is not None
            else None,
            "public_key": self.public_key.public_bytes(
                encoding=serialization.Encoding.PEM, format=serialization.PublicFormat.SubjectPublicKeyInfo
            ).decode("utf-8")
            if self.public_key is not None
            else None,
            "password": self.password,
            "level": self.level,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        self.password = state.get("password") or ""
        self.level = _check_level(state["level"])
        secret = self.password.encode() if self.password else None
        priv, pub = state.get("private_key"), state.get("public_key")
        self.private_key = serialization.load_pem_private_key(priv.encode("utf-8"), password=secret) if priv else None
        self.public_key = serialization.load_pem_public_key(pub.encode("utf-8")) if pub else None

    def save(self, file_path: str) -> None:
        """Write the PEM keys (private key protected by the password), the password and the level as JSON."""
        with open(file_path, "wb") as f:
            f.write(json.dumps(self.__getstate__()).encode("utf-8"))

    @classmethod
    def load(cls, file_path: str, password: str) -> RSAEncryption:
        """The key pair saved at ``file_path`` (by streamscope or LitData)."""
        with open(file_path, "rb") as f:
            state = json.load(f)
        state["password"] = password
        inst = cls.__new__(cls)
        inst.__setstate__(state)
        return inst


def _wrong_key_error() -> type[EncryptionError]:
    """``WrongKeyError``: an :class:`EncryptionError` that is also ``cryptography.fernet.InvalidToken``.

    Built at its first use (``cryptography`` is an optional extra and takes ~17 ms to import), kept as this
    module's attribute ``WrongKeyError`` so it pickles by name (a DataLoader worker's error reaches the main
    process pickled); the module's ``__getattr__`` builds it there too.
    """
    cls = globals().get("WrongKeyError")
    if cls is None:
        from cryptography.fernet import InvalidToken  # noqa: PLC0415

        cls = type(
            "WrongKeyError",
            (EncryptionError, InvalidToken),
            {
                "__module__": __name__,
                "__doc__": "A token that does not open with the key given (wrong key or damaged).",
            },
        )
        globals()["WrongKeyError"] = cls
    return cls


def __getattr__(name: str) -> Any:
    if name == "WrongKeyError":
        return _wrong_key_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_encryption(recorded: dict[str, Any] | None, encryption: Any, where: str) -> None:
    """Check an encryption object against index.json's ``config["encryption"]`` (``recorded``).

    Raises:
        EncryptionError: the dataset is encrypted and no key was given, or algorithm/level differ.
    """
    if not recorded:
        if encryption is not None:
            raise EncryptionError(f"{where} is not encrypted but encryption={encryption!r} was given")
        return
    # Each message starts with LitData's sentence for the case, for code that matches on it.
    if encryption is None:
        raise EncryptionError(
            f"Data is encrypted but no encryption object was provided. {where} is encrypted "
            f"({recorded.get('algorithm')}, level {recorded.get('level')}): pass encryption="
        )
    if getattr(encryption, "algorithm", None) != recorded.get("algorithm"):
        raise EncryptionError(
            f"Encryption algorithm mismatch. {where} is encrypted with {recorded.get('algorithm')!r} but the key "
            f"given is {getattr(encryption, 'algorithm', None)!r}"
        )
    if getattr(encryption, "level", None) != recorded.get("level"):
        raise EncryptionError(
            f"Encryption level mismatch. {where} is encrypted at level {recorded.get('level')!r} but the key given "
            f"is for level {getattr(encryption, 'level', None)!r}"
        )


def _decrypt(encryption: Any, data: bytes, what: str) -> bytes:
    try:
        return encryption.decrypt(data)
    except EncryptionError as exc:
        raise type(exc)(f"{what}: {exc}") from None  # a WrongKeyError stays one
    except Exception as exc:  # noqa: BLE001 - a LitData-style key object raises its own types
        raise EncryptionError(f"{what}: cannot decrypt: {type(exc).__name__}: {exc}") from exc


def decrypt_chunk(data: bytes, encryption: Any, level: str, name: str) -> bytes:
    """Plain (classic layout) chunk bytes from the bytes of an encrypted, already decompressed chunk file.

    Args:
        data: the chunk file's bytes (after zstd decompression when the dataset is compressed).
        encryption: the key object (``decrypt(bytes) -> bytes``).
        level: index.json's ``config["encryption"]["level"]``.
        name: the chunk's file name, for messages.
    """
    if level == EncryptionLevel.CHUNK:
        return _decrypt(encryption, data, f"chunk {name!r}")
    if level == EncryptionLevel.SAMPLE:
        return b"".join(decrypt_chunk_items(data, encryption, name))
    raise EncryptionError(f"chunk {name!r}: unknown encryption level {level!r}")


def decrypt_chunk_items(data: bytes, encryption: Any, name: str) -> list[bytes]:
    """A sample-level encrypted chunk re-assembled plain: ``[header, item_0, ..., item_{N-1}]``."""
    offsets = parse_header(data, name).tolist()
    n = len(offsets) - 1
    items = [_decrypt(encryption, data[offsets[i] : offsets[i + 1]], f"chunk {name!r} item {i}") for i in range(n)]
    head = 4 * (n + 2)
    new = [head]
    for it in items:
        new.append(new[-1] + len(it))
    return [struct.pack(f"<I{n + 1}I", n, *new), *items]
