"""Fixtures shared by every test package: a real S3 server (http and https) and a fault-injecting proxy.

* ``s3_server``: an :class:`~tests.support.s3server.S3Endpoint` for a fresh bucket on a moto server
  (plain http, SigV4 checked) started once per test session on 127.0.0.1.
* ``s3_https_server``: the same over https; ``ca_file`` is the throw-away CA that signed the certificate.
* ``fault_proxy``: a :class:`~tests.support.faultproxy.FaultProxy` in front of the http server, no faults
  until configured; ``fault_proxy.s3`` is an endpoint for the same bucket as ``s3_server`` through it.
* ``litdata_version`` and the ``interop`` marker guard come from ``tests/support/interop_plugin.py``: every test
  that uses the real LitData must carry ``pytest.mark.interop`` (``./run.sh test`` runs those tests a second time
  against LitData 0.2.76).
* A test that compares streamscope's output with the real LitData (marked ``interop``) writes the layout of the
  LitData it meets: ``STREAMSCOPE_WRITE_FORMAT`` is set to "0.2.68" or "0.2.76"
  after the installed ``litdata`` (streamscope's own default is 0.2.76's layout).
* ``gcs_server``: a :class:`~tests.support.gcsserver.GCSEndpoint` for a fresh bucket on the GCS emulator
  (gcp-storage-emulator), and ``azurite_server``: an :class:`~tests.support.azurite.AzureEndpoint` for a fresh
  container on Azurite; each emulator is started once per test session on 127.0.0.1. A missing emulator
  skips its tests loudly, and fails them under CI (``tests/support/servers.py``).
* Every test leaves multiprocessing's start method as it found it: LitData's ``optimize``, run in-process by
  the compat tests, sets it to ``spawn`` for the whole process, and a later test in the same xdist worker
  would then start its DataLoader workers by spawn instead of fork.

Subsystems add their own fixtures in their own ``tests/<subsystem>/conftest.py``.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator

import hypothesis
import pytest

from tests.support import azurite, gcsserver
from tests.support.faultproxy import FaultProxy
from tests.support.litdata_version import LITDATA_076, LITDATA_VERSION
from tests.support.s3server import S3Endpoint, S3Server
from tests.support.servers import emulator_unavailable

pytest_plugins = ["tests.support.interop_plugin", "tests.tune.gate_report"]  # gate_report: the tuner gate's table

# Property tests judge results, not speed: on a shared 2-core machine a wall-clock deadline fails examples that
# only waited for a core. Tests that set their own settings keep them.
hypothesis.settings.register_profile(
    "streamscope", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.load_profile("streamscope")

# The OTLP tests import OpenTelemetry into the test process: streamscope would then wire itself to it at the first
# dataset some test builds, adding its span exporter to that test's sinks. The tests of that wiring run in fresh
# processes (tests/telemetry), with it on.
os.environ.setdefault("STREAMSCOPE_OTEL_AUTO", "0")
# LitData 0.2.68 reads this once, when litdata.constants is first imported (a test module or fixture of any
# package may be first); left on, each StreamingDataset asks PyPI for a newer version and warns when there is one
# (0.2.76 checks only with LITDATA_CHECK_UPDATES=1). tests/compat/conftest.py also sets it per test: too late for an earlier import.
os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")


@pytest.fixture(autouse=True)
def _keep_start_method() -> Iterator[None]:
    before = multiprocessing.get_start_method(allow_none=True)
    yield
    if multiprocessing.get_start_method(allow_none=True) != before:
        multiprocessing.set_start_method(before, force=True)


# the layout written by tests that meet the real LitData: the installed one's
_LITDATA_LAYOUT = None if LITDATA_VERSION is None else "0.2.76" if LITDATA_076 else "0.2.68"


@pytest.fixture(autouse=True)
def _write_installed_litdata_layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # every test that meets LitData carries the interop marker (tests/support/interop_plugin.py enforces it)
    meets_litdata = request.node.get_closest_marker("interop") is not None
    if _LITDATA_LAYOUT is not None and "STREAMSCOPE_WRITE_FORMAT" not in os.environ and meets_litdata:
        monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", _LITDATA_LAYOUT)


@pytest.fixture(scope="session")
def _s3_http_process() -> Iterator[S3Server]:
    with S3Server(https=False) as srv:
        yield srv


@pytest.fixture(scope="session")
def _s3_https_process() -> Iterator[S3Server]:
    with S3Server(https=True) as srv:
        yield srv


@pytest.fixture
def s3_server(_s3_http_process: S3Server) -> S3Endpoint:
    """A fresh bucket on the session's moto S3 server over http."""
    return _s3_http_process.endpoint(_s3_http_process.new_bucket())


@pytest.fixture
def s3_https_server(_s3_https_process: S3Server) -> S3Endpoint:
    """A fresh bucket on the session's moto S3 server over https (private CA in ``ca_file``)."""
    return _s3_https_process.endpoint(_s3_https_process.new_bucket())


@pytest.fixture
def fault_proxy(s3_server: S3Endpoint) -> Iterator[FaultProxy]:
    """A fault proxy in front of ``s3_server``'s bucket; ``.s3`` is the endpoint through the proxy."""
    proxy = FaultProxy(s3_server.endpoint_url, seed=1234)
    proxy.s3 = S3Endpoint(  # type: ignore[attr-defined]
        endpoint_url=proxy.url,
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        bucket=s3_server.bucket,
        region=s3_server.region,
    )
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(scope="session")
def _gcs_process() -> Iterator[gcsserver.GCSServer | str]:
    why = gcsserver.available()
    if why is not None:
        yield why
        return
    try:
        srv = gcsserver.GCSServer().start()
    except RuntimeError as exc:
        yield f"it did not start: {exc}"
        return
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def gcs_server(_gcs_process: gcsserver.GCSServer | str) -> gcsserver.GCSEndpoint:
    """A fresh bucket on the session's GCS emulator."""
    if isinstance(_gcs_process, str):
        emulator_unavailable("GCS emulator (gcp-storage-emulator)", _gcs_process)
    assert not isinstance(_gcs_process, str)
    return _gcs_process.endpoint(_gcs_process.new_bucket())


@pytest.fixture(scope="session")
def _azurite_process() -> Iterator[azurite.AzuriteServer | str]:
    why = azurite.available()
    if why is not None:
        yield why
        return
    try:
        srv = azurite.AzuriteServer().start()
    except RuntimeError as exc:
        yield f"it did not start: {exc}"
        return
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def azurite_server(_azurite_process: azurite.AzuriteServer | str) -> azurite.AzureEndpoint:
    """A fresh container on the session's Azurite."""
    if isinstance(_azurite_process, str):
        emulator_unavailable("Azure emulator (Azurite)", _azurite_process)
    assert not isinstance(_azurite_process, str)
    return _azurite_process.endpoint(_azurite_process.new_container())
