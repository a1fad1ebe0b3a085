"""``litdata.utilities.encryption`` at the same path (implemented in :mod:`streamscope.format.encryption`)."""

from streamscope.format.encryption import (  # noqa: F401
    Encryption,
    EncryptionLevel,
    EncryptionLevelType,
    FernetEncryption,
    RSAEncryption,
)

__all__ = ["Encryption", "EncryptionLevel", "EncryptionLevelType", "FernetEncryption", "RSAEncryption"]
