"""Optional packages: each feature's missing package is one error naming the extra that installs it, and the
core install (every optional package hidden) imports streamscope, streams a local dataset and runs the trace
tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from streamscope._core.errors import MissingDependencyError, StreamscopeError
from streamscope._core.optional import PACKAGES, available, install_hint, missing, require

#: every package an extra installs (import names), hidden from the "core install" subprocess
OPTIONAL = (
    "pyarrow",
    "cryptography",
    "PIL",
    "tifffile",
    "torchvision",
    "obstore",
    "boto3",
    "botocore",
    "matplotlib",
    "google.cloud",
    "azure",
    "ray",
)

HIDE = textwrap.dedent(
    """
    import importlib.abc, sys
    HIDDEN = set(%r)

    class _Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == h or name.startswith(h + ".") for h in HIDDEN):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _Hide())
    """
)


def test_require_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(MissingDependencyError) as info:
        require("pyarrow", "keyed lookup (get_by_key)", "keys")
    exc = info.value
    assert (
        str(exc) == 'keyed lookup (get_by_key) needs pyarrow, which is not installed: pip install "streamscope[keys]"'
    )
    assert isinstance(exc, ModuleNotFoundError) and isinstance(exc, StreamscopeError) and exc.name == "pyarrow"
    assert not available("pyarrow") and available("json")


def test_default_extra_and_distribution_names():
    assert install_hint("PIL.Image") == 'pip install "streamscope[image]"'
    assert install_hint("botocore.config") == 'pip install "streamscope[s3]"'
    assert install_hint("obstore", "gcs") == 'pip install "streamscope[gcs]"'
    assert install_hint("perfetto.trace_builder").startswith("pip install perfetto (a dependency of streamscope")
    assert install_hint("somepkg") == "pip install somepkg"
    assert install_hint("google.cloud.storage") == 'pip install "streamscope[gcs]"'
    assert install_hint("google.protobuf.message").startswith("pip install protobuf (a dependency")
    assert install_hint("azure.storage.blob") == 'pip install "streamscope[azure]"'
    assert "needs pillow" in str(missing("PIL.Image", "decoding a `pil` leaf"))


def test_a_broken_install_is_told_apart_from_a_missing_one():
    cause = ModuleNotFoundError("No module named 'google'", name="google")
    msg = str(missing("perfetto.protos", "writing .pftrace", cause=cause))
    assert "cannot be imported (ModuleNotFoundError: No module named 'google')" in msg


def test_every_extra_of_the_table_exists_in_pyproject():
    import tomllib

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    extras = project["optional-dependencies"]
    core = " ".join(project["dependencies"])
    for module, (dist, extra) in PACKAGES.items():
        if extra is None:
            assert dist in core, f"{dist} ({module}) should be a core dependency"
        else:
            assert any(r.startswith(dist) for r in extras[extra]), f"extra {extra!r} does not install {dist}"
    listed = extras["all"][0].split("[", 1)[1].rstrip("]").split(",")
    # not in `all` (docs/install.md): video (torchvision must match the installed torch) and otel-grpc (grpcio, for
    # OTLP over gRPC only; OTLP/HTTP is in `otel`)
    assert sorted(listed) == sorted(set(extras) - {"all", "test", "video", "otel-grpc"})


def _sample(i):
    return {"index": i, "name": f"k{i}"}


def _pil_sample(i):
    from PIL import Image

    return {"index": i, "img": Image.new("RGB", (4, 4), (i, 0, 0))}


@pytest.mark.slow
def test_core_install_works_and_every_extra_is_named(tmp_path):
    """A subprocess in which no optional package can be imported (a ``sitecustomize`` hides them)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("PIL")
    import pyarrow as pa
    import pyarrow.parquet as pq

    import streamscope as ld

    keyed, pil_ds, parquet_dir = (str(tmp_path / n) for n in ("keyed", "pil", "pq"))
    ld.optimize(
        fn=_sample,
        inputs=list(range(8)),
        output_dir=keyed,
        chunk_size=4,
        num_workers=1,
        verbose=False,
        key_fn=lambda s: s["name"],
    )
    ld.optimize(fn=_pil_sample, inputs=list(range(4)), output_dir=pil_ds, chunk_size=4, num_workers=1, verbose=False)
    os.makedirs(parquet_dir)
    pq.write_table(pa.table({"a": [1, 2]}), os.path.join(parquet_dir, "p.parquet"))

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE % (OPTIONAL,))
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), os.path.join(repo, "src"), repo])
    for k in [k for k in env if k.startswith(("STREAMSCOPE_", "LITDATA_"))]:
        del env[k]
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, os.path.join(here, "_core_only_scenario.py"), str(work), keyed, pil_ds, parquet_dir],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])

    assert r["import_everything"] == {"ok": True, "value": [], "seconds": r["import_everything"]["seconds"]}
    assert r["optimize_and_stream"]["value"] == 20
    for name in ("trace_validate", "trace_convert_json", "trace_convert_pftrace", "trace_summary_no_plots"):
        assert r[name]["ok"] and r[name]["value"]["code"] == 0, (name, r[name])
    plots = r["trace_summary_plots"]["value"]
    assert plots["code"] == 2 and plots["stderr"].count("\n") == 1, plots  # one line, no traceback
    assert 'needs matplotlib, which is not installed: pip install "streamscope[trace]"' in plots["stderr"]

    expected = {
        "optimize_key_fn": "keys",
        "get_by_key": "keys",
        "pil_leaf": "image",
        "index_parquet_dataset": "parquet",
        "parquet_reader": "parquet",
        "fernet": "encryption",
        "s3_download": "s3",
        "gs_get": "gcs",
        "azure_get": "azure",
        "optimize_ray": "ray",
    }
    for name, extra in expected.items():
        got = r[name]
        assert not got["ok"], (name, got)
        assert f'pip install "streamscope[{extra}]"' in got["msg"], (name, got)
        assert "ModuleNotFoundError" in got["mro"], (name, got)  # catchable as ImportError
    assert r["optimize_keys_wrote_nothing"]["value"]  # refused before the work
    assert r["optimize_ray_wrote_nothing"]["value"]
