"""The real Prometheus (Debian's 2.42 package) for tests, and PromQL syntax checks with promtool.

Usage::

    with PrometheusServer(["127.0.0.1:9464"]) as prom:        # scrapes every 1 s
        series = prom.wait_for_series('streamscope_loader_wait_seconds_total', timeout=20)
        assert prom.query('sum(up)')[0].value == 1

    errors = promtool_check_rules(['rate(x_total[$__rate_interval])', 'sum by (job (x)'])
    # -> {'sum by (job (x)': 'could not parse expression: 1:13: parse error: ...'}

Prometheus runs in a temporary directory (its cwd, holding the config, the TSDB and its log), listens on a
free loopback port and stops at the end. Its first sample becomes queryable about 6 s after start even with a
1 s scrape interval (the 2.x scrape manager applies new target sets on a 5 s tick), so start one per test
module, not one per test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.components import require_program

DEFAULT_JOB = "streamscope"
_READY_TIMEOUT = 15.0


@dataclass(frozen=True)
class Sample:
    """One series of an instant-query result: its labels (``__name__`` included when present) and value."""

    labels: dict[str, str]
    value: float
    time: float


class PromQLError(RuntimeError):
    """Prometheus refused a query (bad syntax, unknown function, ...); the message is its error."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _targets_by_job(targets: Sequence[str] | Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    if isinstance(targets, Mapping):
        return {job: list(ts) for job, ts in targets.items()}
    return {DEFAULT_JOB: list(targets)} if targets else {}


def scrape_config(targets: Sequence[str] | Mapping[str, Sequence[str]], scrape_interval: str = "1s") -> str:
    """A prometheus.yml scraping ``targets`` ("host:port" each; a mapping gives one job per key).

    Written as JSON, which is YAML too, so the values need no YAML quoting.
    """
    jobs = [
        {
            "job_name": job,
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "static_configs": [{"targets": ts}],
        }
        for job, ts in _targets_by_job(targets).items()
    ]
    cfg = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": jobs,
    }
    return json.dumps(cfg, indent=1) + "\n"


class PrometheusServer:
    """A Prometheus process scraping ``targets`` every ``scrape_interval`` on 127.0.0.1:<free port>.

    ``targets`` is a list of "host:port" (job ``streamscope``) or a mapping ``{job: [host:port, ...]}``;
    :meth:`set_targets` changes them while it runs. A missing ``prometheus`` binary skips the test
    (fails under CI=true).
    """

    def __init__(
        self,
        targets: Sequence[str] | Mapping[str, Sequence[str]] = (),
        *,
        scrape_interval: str = "1s",
        workdir: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
    ):
        self.binary = require_program("prometheus", "prometheus")
        self.scrape_interval = scrape_interval
        self._own_dir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="prometheus-"))
        self.config_path = self.workdir / "prometheus.yml"
        self.log_path = self.workdir / "prometheus.log"
        self.config_path.write_text(scrape_config(targets, scrape_interval))
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._start(list(extra_args))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- lifetime ---------------------------------------------------------------------------------

    def _start(self, extra_args: list[str]) -> None:
        last_log = ""
        for _attempt in range(3):  # the free port can be taken between probing it and Prometheus binding it
            self.port = free_port(self.host)
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    [
                        self.binary,
                        f"--config.file={self.config_path}",
                        f"--storage.tsdb.path={self.workdir / 'data'}",
                        f"--web.listen-address={self.host}:{self.port}",
                        "--log.level=warn",
                        "--web.enable-lifecycle",
                        *extra_args,
                    ],
                    cwd=self.workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if self._wait_ready():
                return
            last_log = self.log_tail()
            self._kill()
            if "address already in use" not in last_log:
                break
        self._cleanup_dir()
        raise RuntimeError(f"Prometheus ({self.binary}) did not become ready on {self.url}; its log:\n{last_log}")

    def _wait_ready(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + _READY_TIMEOUT
        delay = 0.01
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(delay)  # a process coming up offers nothing to wait on but its port
            delay = min(delay * 2, 0.2)
        return False

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _kill(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)

    def _cleanup_dir(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def stop(self) -> None:
        """Stop Prometheus (SIGTERM, then SIGKILL after 10 s) and remove its directory if it made it."""
        self._kill()
        self._cleanup_dir()

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- configuration ----------------------------------------------------------------------------

    def set_targets(self, targets: Sequence[str] | Mapping[str, Sequence[str]]) -> None:
        """Rewrite the scrape config and reload it (the new targets' first samples again take ~5 s)."""
        self.config_path.write_text(scrape_config(targets, self.scrape_interval))
        self._api("/-/reload", method="POST", raw=True)

    # -- HTTP API ---------------------------------------------------------------------------------

    def _api(
        self, path: str, params: Mapping[str, str] | None = None, *, method: str = "GET", raw: bool = False
    ) -> Any:
        url = f"{self.url}{path}"
        data = None
        if params:
            if method == "GET":
                url += "?" + urllib.parse.urlencode(params)
            else:
                data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(url, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                body = r.read()
        except urllib.error.HTTPError as e:  # 400/422 carry Prometheus's error in a JSON body
            body = e.read()
            if raw:
                raise RuntimeError(f"{method} {path}: HTTP {e.code}: {body.decode(errors='replace')}") from e
        if raw:
            return body
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise PromQLError(f"{doc.get('errorType', 'error')}: {doc.get('error', doc)} (query {params})")
        return doc["data"]

    def query_data(self, expr: str, at: float | None = None) -> dict[str, Any]:
        """The raw ``data`` of ``/api/v1/query`` (``resultType`` and ``result``)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._api("/api/v1/query", params, method="POST")

    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """Evaluate ``expr`` now (or at unix time ``at``); an instant vector or a scalar as :class:`Sample` s.

        Raises :class:`PromQLError` with Prometheus's message when it refuses the expression.
        """
        data = self.query_data(expr, at)
        kind, result = data["resultType"], data["result"]
        if kind == "vector":
            return [Sample(dict(r["metric"]), float(r["value"][1]), float(r["value"][0])) for r in result]
        if kind == "scalar":
            return [Sample({}, float(result[1]), float(result[0]))]
        raise PromQLError(f"query {expr!r} returned a {kind}, not an instant vector or scalar")

    def wait_for_series(
        self, expr: str, timeout: float = 20.0, predicate: Callable[[list[Sample]], Any] = bool
    ) -> list[Sample]:
        """Poll ``expr`` until ``predicate(samples)`` holds (default: any series), then return the samples.

        Prometheus offers nothing to block on, so this polls every 0.25 s. Raises ``TimeoutError`` with the
        last result and the state of the scrape targets.
        """
        deadline = time.monotonic() + timeout
        samples: list[Sample] = []
        while True:
            samples = self.query(expr)
            if predicate(samples):
                return samples
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"Prometheus at {self.url}: {expr!r} did not match within {timeout:g} s; "
                    f"last result {samples}; targets {self.targets()}"
                )
            time.sleep(0.25)

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets: job, scrape URL, health ("up"/"down"/"unknown") and last error."""
        data = self._api("/api/v1/targets", {"state": "active"})
        return [
            {
                "job": t["labels"].get("job", t.get("scrapePool", "")),
                "instance": t["labels"].get("instance", ""),
                "scrape_url": t["scrapeUrl"],
                "health": t["health"],
                "last_error": t["lastError"],
                "last_scrape": t["lastScrape"],
            }
            for t in data["activeTargets"]
        ]


# --------------------------------------------------------------------------------------------------
# PromQL syntax checks (promtool)
# --------------------------------------------------------------------------------------------------

# Grafana's built-in interval variables, each with a value that keeps the expression valid PromQL
_GRAFANA_BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1m",
    "__interval_ms": "60000",
    "__range_s": "60",
    "__range_ms": "60000",
}
# $name, ${name} and ${name:format}; longest names first is not needed: \w+ is greedy
_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")


def substitute_grafana_vars(expr: str, values: Mapping[str, str] | None = None) -> str:
    """``expr`` with Grafana's template variables replaced, so Prometheus can parse or run it.

    ``$__rate_interval``/``$__interval``/``$__range`` -> ``1m`` (and their ``_ms``/``_s`` forms -> numbers);
    every other variable (``$job``, ``${rank}``, ``${dataset:regex}``) -> ``values[name]``, default ``.*``,
    which suits the ``=~`` matchers dashboards use for multi-value variables.
    """
    values = values or {}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in values:
            return values[name]
        if name in _GRAFANA_BUILTINS:
            return _GRAFANA_BUILTINS[name]
        if name.startswith("__"):
            raise ValueError(f"Grafana variable ${name} in {expr!r} has no substitute for a syntax check")
        return ".*"

    return _VARIABLE.sub(repl, expr)


def promtool_check_rules(exprs: Iterable[str], *, substitute: bool = True) -> dict[str, str]:
    """Check each PromQL expression with ``promtool check rules``; returns ``{expr: error}`` for the bad ones.

    Each expression (after :func:`substitute_grafana_vars` unless ``substitute=False``) becomes one
    recording rule of a generated rules file; an empty result means every expression parses. Skips (fails
    under CI=true) when promtool is missing.
    """
    promtool = require_program("promtool", "prometheus")
    exprs = list(exprs)
    if not exprs:
        return {}
    promql = [substitute_grafana_vars(e) if substitute else e for e in exprs]
    # JSON is YAML: no quoting of the expressions' quotes, braces and colons to get wrong
    doc = {
        "groups": [
            {"name": "streamscope_check", "rules": [{"record": f"check_{i}", "expr": q} for i, q in enumerate(promql)]}
        ]
    }
    with tempfile.TemporaryDirectory(prefix="promtool-") as d:
        path = Path(d) / "rules.yml"
        path.write_text(json.dumps(doc, indent=1))
        proc = subprocess.run(
            [promtool, "check", "rules", "--lint=none", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    out = proc.stdout + proc.stderr
    errors: dict[str, str] = {}
    for m in re.finditer(r'"check_(\d+)": (.*)', out):
        i = int(m.group(1))
        errors[exprs[i]] = m.group(2).strip() + (f" (as checked: {promql[i]!r})" if promql[i] != exprs[i] else "")
    if proc.returncode != 0 and not errors:
        raise RuntimeError(f"promtool check rules failed (rc={proc.returncode}) without naming a rule:\n{out}")
    if proc.returncode == 0 and errors:
        raise RuntimeError(f"promtool passed but printed rule errors:\n{out}")
    return errors
