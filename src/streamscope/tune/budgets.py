"""The tuner's budgets: the RAM a rank may use (cgroup-aware), the CPU cores it may use, the cache's disk.

Memory: ``autotune_ram_budget`` when set, else ``autotune_ram_fraction`` of the memory limit divided by the ranks
of the node. The limit is the tightest of the cgroup limits on the way from this process's cgroup to the root
(v2 ``memory.max``, v1 ``memory.limit_in_bytes``; "max" or a huge v1 value means none) and physical memory. A
container reports the host's memory through ``/proc/meminfo`` (and psutil): the cgroup is the real limit.

CPU: the cores of this process's affinity mask, capped by a cgroup CPU quota (v2 ``cpu.max``, v1
``cpu.cfs_quota_us / cpu.cfs_period_us``), at least 1.

Usage: the resident set of the rank's main process and all its children (psutil). Shared pages count once per
process, so this over-counts forked workers: a budget is never exceeded because of the way it is measured.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from typing import Any

from streamscope._core import config

__all__ = [
    "Budgets",
    "cgroup_cpu_limit",
    "cgroup_memory_limit",
    "disk_free",
    "local_ranks",
    "memory_limit",
    "physical_memory",
    "resolve",
    "tree_rss",
    "usable_cpus",
]


#: A v1 cgroup reports "no limit" as a page-rounded 2**63 - 1; anything above this is no limit.
_NO_LIMIT = 2**60


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cgroup_paths(root: str, proc_cgroup: str) -> tuple[list[str], list[str]]:
    """Directories of this process's memory and cpu cgroups (v2 and v1) from ``/proc/self/cgroup`` text, each
    followed by its ancestors up to the hierarchy's root."""
    mem: list[str] = []
    cpu: list[str] = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, controllers, rel = parts
        ctrls = controllers.split(",") if controllers else []
        if not ctrls:  # the v2 unified hierarchy
            bases = [(root, mem), (root, cpu)]
            bases += [(os.path.join(root, "unified"), mem), (os.path.join(root, "unified"), cpu)]
        else:
            bases = []
            if "memory" in ctrls:
                bases.append((os.path.join(root, "memory"), mem))
            if "cpu" in ctrls:
                bases.append((os.path.join(root, ",".join(ctrls)), cpu))
                bases.append((os.path.join(root, "cpu"), cpu))
        for base, out in bases:
            d = os.path.join(base, rel.lstrip("/"))
            while True:
                out.append(d)
                if os.path.normpath(d) == os.path.normpath(base):
                    break
                d = os.path.dirname(d)
    return mem, cpu


def cgroup_memory_limit(root: str = "/sys/fs/cgroup", proc_cgroup: str | None = None) -> int | None:
    """The tightest memory limit of this process's cgroups (bytes), None when there is none."""
    text = proc_cgroup if proc_cgroup is not None else (_read("/proc/self/cgroup") or "")
    mem, _cpu = _cgroup_paths(root, text)
    best: int | None = None
    for d in mem:
        for name in ("memory.max", "memory.limit_in_bytes"):
            raw = _read(os.path.join(d, name))
            if raw is None or raw == "max":
                continue
            try:
                v = int(raw)
            except ValueError:
                continue
            if 0 < v < _NO_LIMIT and (best is None or v < best):
                best = v
    return best


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup", proc_cgroup: str | None = None) -> float | None:
    """The tightest CPU quota of this process's cgroups, in cores; None when there is none."""
    text = proc_cgroup if proc_cgroup is not None else (_read("/proc/self/cgroup") or "")
    _mem, cpu = _cgroup_paths(root, text)
    best: float | None = None
    for d in cpu:
        quota = period = None
        raw = _read(os.path.join(d, "cpu.max"))
        if raw is not None:
            q, _, p = raw.partition(" ")
            if q != "max":
                quota, period = q, p or "100000"
        else:
            quota, period = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
        try:
            cores = int(quota) / int(period) if quota is not None and period is not None else None  # type: ignore[arg-type]
        except (ValueError, ZeroDivisionError):
            cores = None
        if cores is not None and cores > 0 and (best is None or cores < best):
            best = cores
    return best


def physical_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def memory_limit() -> tuple[int, str]:
    """(bytes, where from): the cgroup limit when tighter than physical memory, else physical memory."""
    phys = physical_memory()
    cg = cgroup_memory_limit()
    if cg is not None and cg < phys:
        return cg, "cgroup memory limit"
    return phys, "physical memory"


def usable_cpus() -> int:
    """Cores this process may run on: its affinity mask, capped by a cgroup CPU quota (at least 1)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = cgroup_cpu_limit()
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return max(1, n)


def local_ranks() -> int:
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
    except ValueError:
        return 1


@dataclass(frozen=True)
class Budgets:
    """What one rank's loader may use."""

    ram: int  # bytes of resident memory (main process + workers)
    ram_source: str  # how ``ram`` was set, for messages
    cpus: int  # cores (the most workers that decode in parallel)
    max_workers: int  # the tuner's cap on num_workers (0: it leaves them)

    def describe(self) -> dict[str, Any]:
        return {"ram_budget": self.ram, "ram_from": self.ram_source, "cpus": self.cpus, "max_workers": self.max_workers}


def resolve() -> Budgets:
    """The budgets from the knobs and the machine (bad knob values raise ConfigError naming the variable)."""
    explicit = int(config.get("autotune_ram_budget"))
    if explicit > 0:
        found = config.explicit("autotune_ram_budget")
        where = found[1] if found else "autotune_ram_budget"
        ram, source = explicit, f"{where}={explicit}"
    else:
        limit, whence = memory_limit()
        frac = float(config.get("autotune_ram_fraction"))
        n = local_ranks()
        ram = int(limit * frac / n)
        source = f"autotune_ram_fraction {frac:g} of the {whence} ({limit / 1e9:.1f} GB)" + (
            f" / {n} ranks" if n > 1 else ""
        )
    cpus = usable_cpus()
    mw = int(config.get("autotune_max_workers"))
    return Budgets(ram, source, cpus, cpus if mw < 0 else mw)


def tree_rss(pid: int | None = None) -> tuple[int, int, int]:
    """(resident bytes of process ``pid`` and all its descendants, of ``pid`` alone, number of descendants)."""
    import psutil

    try:
        p = psutil.Process(pid or os.getpid())
        own = int(p.memory_info().rss)
        kids = p.children(recursive=True)
    except psutil.Error:
        return 0, 0, 0
    total = own
    n = 0
    for c in kids:
        try:
            total += int(c.memory_info().rss)
            n += 1
        except psutil.Error:
            continue
    return total, own, n


def disk_free(path: str) -> int | None:
    """Free bytes of the file system holding ``path`` (its nearest existing parent), None when unknown."""
    d = os.path.abspath(path)
    while d and not os.path.exists(d):
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    try:
        return int(shutil.disk_usage(d).free)
    except OSError:
        return None
