"""Type-check Grafana dashboard JSON against ``@grafana/schema`` 11.6.0 with the TypeScript compiler.

No Grafana server is installable for the tests, but Grafana publishes its dashboard model as TypeScript types.
Embedding the JSON as an object literal typed ``Dashboard`` makes ``tsc`` check it: excess-property checks
catch misspelled keys (``gridPoss``) and wrong types (``refresh: 5``, ``targets: "x"``). Usage::

    errors = tsc_check_dashboard("dashboards/streamscope.json")   # [] when it type-checks
    assert errors == [], "\\n".join(errors)

Each error reads ``line N: <tsc message> | <that line of the checked JSON>``; line N counts in the JSON as
re-serialized with 2-space indents (after dropping the allow-listed keys below), not in the file on disk.

Allow-list: grafana-foundation-sdk 11.6 writes ``auto``, ``auto_count`` and ``auto_min`` into every template
variable (Grafana's interval-variable settings), which the 11.6 ``VariableModel`` type does not declare. They
are dropped from ``templating.list`` entries before the check, and nothing else is.

``@grafana/schema`` and ``typescript`` live in ``.cache/grafana-schema`` of the checkout (``./run.sh test``
installs them; ``STREAMSCOPE_GRAFANA_SCHEMA_DIR`` points elsewhere). When missing and npm is present they are
installed on first use; without npm the test skips (fails under CI=true).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.components import missing

SCHEMA_VERSION = "11.6.0"
TYPESCRIPT_MAJOR = "5"
ALLOWED_VARIABLE_KEYS = frozenset({"auto", "auto_count", "auto_min"})
_REPO = Path(__file__).resolve().parents[2]
_TSC_FLAGS = [
    "--noEmit",
    "--strict",
    "--skipLibCheck",
    "--module",
    "esnext",
    "--moduleResolution",
    "bundler",
    "--pretty",
    "false",
]
_HEADER = "import type { Dashboard } from '@grafana/schema';\n"  # the JSON's line 1 is the file's line 2
# tsc's "file(line,col): error TSnnnn: message" (continuation lines of a message are indented)
_ERROR = re.compile(r"^(?P<file>.+?)\((?P<line>\d+),(?P<col>\d+)\): error (?P<code>TS\d+): (?P<msg>.*)$")

Dashboard = Mapping[str, Any]


def schema_dir() -> Path:
    return Path(os.environ.get("STREAMSCOPE_GRAFANA_SCHEMA_DIR") or _REPO / ".cache" / "grafana-schema")


def _installed_version(d: Path, package: str) -> str | None:
    try:
        return json.loads((d / "node_modules" / package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def _ready(d: Path) -> bool:
    ts = _installed_version(d, "typescript") or ""
    return (
        _installed_version(d, "@grafana/schema") == SCHEMA_VERSION
        and ts.split(".")[0] == TYPESCRIPT_MAJOR
        and (d / "node_modules" / ".bin" / "tsc").exists()
    )


def ensure_tsc() -> Path:
    """The ``tsc`` next to ``@grafana/schema`` 11.6.0, installing both with npm if needed (skip/fail if not)."""
    d = schema_dir()
    if not _ready(d):
        npm = shutil.which("npm")
        if npm is None:
            missing(
                f"@grafana/schema {SCHEMA_VERSION} + typescript {TYPESCRIPT_MAJOR} are not in {d} and npm is "
                "not installed (./run.sh test installs them)"
            )
        from filelock import FileLock

        d.mkdir(parents=True, exist_ok=True)
        with FileLock(str(d.parent / f"{d.name}.lock")):  # xdist workers may arrive here together
            if not _ready(d):
                proc = subprocess.run(
                    [
                        npm,
                        "install",
                        "--prefix",
                        str(d),
                        "--no-audit",
                        "--no-fund",
                        "--loglevel=error",
                        f"@grafana/schema@{SCHEMA_VERSION}",
                        f"typescript@{TYPESCRIPT_MAJOR}",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    stdin=subprocess.DEVNULL,
                )
                if proc.returncode != 0 or not _ready(d):
                    missing(
                        f"npm could not install @grafana/schema {SCHEMA_VERSION} + typescript into {d} "
                        f"(rc={proc.returncode}): {(proc.stderr or proc.stdout).strip()[-500:]}"
                    )
    return d / "node_modules" / ".bin" / "tsc"


def prepare_dashboard(doc: Dashboard) -> dict[str, Any]:
    """A copy of ``doc`` without the allow-listed keys of its template variables."""
    out = copy.deepcopy(dict(doc))
    templating = out.get("templating")
    if isinstance(templating, dict) and isinstance(templating.get("list"), list):
        for var in templating["list"]:
            if isinstance(var, dict):
                for key in ALLOWED_VARIABLE_KEYS:
                    var.pop(key, None)
    return out


def _load(dashboard: str | os.PathLike[str] | Dashboard) -> tuple[str, Dashboard]:
    if isinstance(dashboard, Mapping):
        return "<dict>", dashboard
    path = Path(dashboard)
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{path} holds a JSON {type(doc).__name__}, not a dashboard object")
    return str(path), doc


def tsc_check_dashboards(dashboards: Sequence[str | os.PathLike[str] | Dashboard]) -> dict[str, list[str]]:
    """Type-check several dashboards with one ``tsc`` run; returns ``{name: errors}`` (name = path or "<dict>#i").

    Raises ``ValueError`` for a file that is not a JSON object and ``RuntimeError`` when tsc fails for a reason
    outside the dashboards (types not found, bad flags).
    """
    tsc = ensure_tsc()
    loaded = [_load(x) for x in dashboards]
    names = [n if n != "<dict>" else f"<dict>#{i}" for i, (n, _doc) in enumerate(loaded)]
    checks = schema_dir() / "checks"  # inside the npm folder so that '@grafana/schema' resolves
    checks.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=checks) as tmp:
        files: dict[str, tuple[str, list[str]]] = {}
        for i, (name, (_n, doc)) in enumerate(zip(names, loaded)):
            text = json.dumps(prepare_dashboard(doc), indent=2)
            ts = Path(tmp) / f"dashboard_{i}.ts"
            ts.write_text(f"{_HEADER}export const d: Dashboard = {text};\n")
            files[ts.name] = (name, text.splitlines())
        proc = subprocess.run(
            [str(tsc), *_TSC_FLAGS, *sorted(str(Path(tmp) / f) for f in files)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp,
            stdin=subprocess.DEVNULL,
        )
    errors: dict[str, list[str]] = {name: [] for name in names}
    current: list[str] | None = None
    stray: list[str] = []
    for line in proc.stdout.splitlines() + proc.stderr.splitlines():
        m = _ERROR.match(line)
        if m and Path(m["file"]).name in files:
            name, json_lines = files[Path(m["file"]).name]
            n = int(m["line"]) - 1  # line in the JSON
            src = json_lines[n - 1].strip() if 1 <= n <= len(json_lines) else ""
            errors[name].append(f"line {n}: {m['code']}: {m['msg']} | {src}")
            current = errors[name]
        elif line.startswith((" ", "\t")) and current is not None:
            current[-1] += " " + line.strip()
        elif line.strip():
            stray.append(line)
            current = None
    if stray or (proc.returncode != 0 and not any(errors.values())):
        raise RuntimeError(f"tsc failed outside the dashboards (rc={proc.returncode}):\n" + "\n".join(stray))
    return errors


def tsc_check_dashboard(dashboard: str | os.PathLike[str] | Dashboard) -> list[str]:
    """tsc's errors for one dashboard (a JSON file or an already loaded dict); ``[]`` when it type-checks."""
    (errors,) = tsc_check_dashboards([dashboard]).values()
    return errors
