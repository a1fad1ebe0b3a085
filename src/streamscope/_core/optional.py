"""Optional packages: one import helper whose error names the extra that installs a missing package.

The core install (numpy, torch, zstandard, psutil, tqdm, filelock, and perfetto + protobuf for the trace tools)
writes and streams optimized datasets on local disk and runs ``streamscope-trace``. Each other feature needs an
extra, and every import of an optional package goes through :func:`require`, so a missing one is a single
:class:`~streamscope._core.errors.MissingDependencyError` naming the feature and the ``pip install`` line, e.g.::

    keyed lookup (optimize(key_fn=...), get_by_key) needs pyarrow, which is not installed:
    pip install "streamscope[keys]"

Extras (``pyproject.toml``; docs/install.md says what each enables):

==========  =========================  ===============================================================
extra       packages                   enables
==========  =========================  ===============================================================
s3          obstore, boto3             ``s3://`` and ``r2://`` datasets and outputs
gcs         obstore, google-cloud-...  ``gs://`` (google-cloud-storage: LitData's client)
azure       obstore, azure-storage...  ``azure://`` / ``az://`` (azure-storage-blob: LitData's client)
parquet     pyarrow                    Parquet datasets (``index_parquet_dataset``, ``ParquetLoader``)
keys        pyarrow                    keyed lookup (``optimize(key_fn=...)``, ``get_by_key``, ...)
arrow       pyarrow                    LitData 0.2.76 chunks whose dict samples are Arrow rows
image       pillow, tifffile           PIL/JPEG leaves, TIFF leaves
video       torchvision                decoding ``video`` leaves (must match the installed torch)
encryption  cryptography               ``FernetEncryption`` / ``RSAEncryption``
trace       matplotlib                 the PNG plots of ``streamscope-trace summary``
otel        opentelemetry-sdk, -expo.  ``enable_telemetry()``: OTLP/HTTP export (``otel-grpc``: OTLP/gRPC too)
prometheus  prometheus_client          the Prometheus endpoint (``STREAMSCOPE_PROMETHEUS_PORT``)
ray         ray                        ``optimize(executor="ray")`` / ``map(executor="ray")``: workers as Ray tasks
hf          huggingface_hub            ``hf://datasets/...`` (Hugging Face Hub datasets, read-only)
all         every extra but ``video``
==========  =========================  ===============================================================
"""

from __future__ import annotations

import importlib
from types import ModuleType

from streamscope._core.errors import MissingDependencyError

__all__ = ["PACKAGES", "available", "install_hint", "missing", "require"]


#: import name (the longest dotted prefix that matches wins) -> (distribution to install, the extra that installs
#: it; None: a core dependency)
PACKAGES: dict[str, tuple[str, str | None]] = {
    "pyarrow": ("pyarrow", "parquet"),
    "cryptography": ("cryptography", "encryption"),
    "PIL": ("pillow", "image"),
    "tifffile": ("tifffile", "image"),
    "torchvision": ("torchvision", "video"),
    "obstore": ("obstore", "s3"),
    "boto3": ("boto3", "s3"),
    "botocore": ("boto3", "s3"),
    "google.cloud": ("google-cloud-storage", "gcs"),
    "azure": ("azure-storage-blob", "azure"),
    "matplotlib": ("matplotlib", "trace"),
    "opentelemetry": ("opentelemetry-api", None),
    "opentelemetry.sdk": ("opentelemetry-sdk", "otel"),
    "opentelemetry.exporter.otlp.proto.http": ("opentelemetry-exporter-otlp-proto-http", "otel"),
    "opentelemetry.exporter.otlp.proto.grpc": ("opentelemetry-exporter-otlp-proto-grpc", "otel-grpc"),
    "prometheus_client": ("prometheus_client", "prometheus"),
    "ray": ("ray", "ray"),
    "huggingface_hub": ("huggingface_hub", "hf"),
    "perfetto": ("perfetto", None),
    "google.protobuf": ("protobuf", None),
}


def _entry(module: str) -> tuple[str, tuple[str, str | None] | None]:
    """The :data:`PACKAGES` key that names ``module`` (its longest matching prefix) and its entry."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in PACKAGES:
            return key, PACKAGES[key]
    return parts[0], None


def install_hint(module: str, extra: str | None = None) -> str:
    """The ``pip install`` line for ``module`` (an import name): its extra, or the package itself."""
    key, entry = _entry(module)
    dist, default_extra = entry or (key, None)
    extra = extra or default_extra
    if extra:
        return f'pip install "streamscope[{extra}]"'
    return f"pip install {dist} (a dependency of streamscope: reinstall it)" if entry else f"pip install {dist}"


def missing(
    module: str, feature: str, extra: str | None = None, cause: BaseException | None = None
) -> MissingDependencyError:
    """The error for ``feature`` when ``module`` cannot be imported (``cause``: the ImportError, if any)."""
    key, entry = _entry(module)
    dist = (entry or (key, None))[0]
    top = module.split(".", 1)[0]
    name = getattr(cause, "name", None)
    if cause is None or name is None or name == top or name.startswith(top + "."):
        why = "which is not installed"
    else:  # installed, but something it imports is broken or missing
        why = f"which cannot be imported ({type(cause).__name__}: {cause})"
    return MissingDependencyError(f"{feature} needs {dist}, {why}: {install_hint(module, extra)}", name=top)


def require(module: str, feature: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` (e.g. ``"pyarrow.parquet"``) for ``feature`` (what the user asked for, in words).

    Args:
        module: the dotted import name.
        feature: names what needs it, e.g. ``"keyed lookup (get_by_key)"``.
        extra: the extra to name when it is not the package's usual one (obstore for ``gs://`` is ``gcs``).

    Raises:
        MissingDependencyError: the package (or something it needs) cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(module, feature, extra, exc) from None


def available(module: str) -> bool:
    """True when ``module`` imports (a probe for code that has a fallback)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
