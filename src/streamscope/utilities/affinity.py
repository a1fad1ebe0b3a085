"""Pin a training rank and its DataLoader workers to the CPUs (and memory) of one NUMA node (LitData 0.2.76).

``get_numa_affinity(node)`` plans a binding to the CPUs of ``node`` that the calling thread may use;
``get_gpu_affinity(device)`` finds the node of a CUDA device from its PCI address. The plan, a
:class:`NumaAffinity`, binds when called: ``affinity.bind()`` in the rank, and the same object as a
DataLoader ``worker_init_fn`` (it pickles, and needs no CUDA in the worker).

Linux facts used: ``/sys/devices/system/node/node<N>/cpulist`` lists a node's CPUs, ``/proc/self/status``
(``Mems_allowed_list``) the memory nodes a process may use, ``/sys/bus/pci/devices/<addr>/numa_node`` a PCI
device's node. Memory binding sets the ``MPOL_BIND`` policy through ``set_mempolicy`` of ``libnuma.so.1``, and
both the CPU mask and the policy are read back: a binding the kernel did not apply in full raises, and the
previous mask and policy are restored.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["NumaAffinity", "get_gpu_affinity", "get_numa_affinity"]


_NODES = Path("/sys/devices/system/node")
_PCI = Path("/sys/bus/pci/devices")
_MPOL_BIND = 2
_WORD_BITS = ctypes.sizeof(ctypes.c_ulong) * 8


def _linux_only() -> None:
    if sys.platform != "linux" or not hasattr(os, "sched_setaffinity"):
        raise RuntimeError("NUMA affinity needs Linux (sched_setaffinity)")


def _id_list(text: str) -> set[int]:
    """``"0-3,8,10-11"`` -> ``{0, 1, 2, 3, 8, 10, 11}``."""
    ids: set[int] = set()
    for part in filter(None, (p.strip() for p in text.strip().split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise ValueError(f"not a CPU/node list entry: {part!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"not a CPU/node list entry: {part!r}")
        ids.update(range(first, last + 1))
    return ids


def _cpus_of_node(node: int) -> set[int]:
    if isinstance(node, bool) or not isinstance(node, int) or node < 0:
        raise ValueError(f"numa_node must be an int >= 0, got {node!r}")
    path = _NODES / f"node{node}" / "cpulist"
    try:
        return _id_list(path.read_text())
    except OSError:
        raise RuntimeError(f"no CPU list for NUMA node {node} ({path} is unreadable)") from None


def _memory_nodes_allowed() -> set[int]:
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "Mems_allowed_list":
            return _id_list(value)
    raise RuntimeError("/proc/self/status has no Mems_allowed_list: the allowed memory nodes are unknown")


class _Policy:
    """The calling thread's memory policy through libnuma's ``get_mempolicy``/``set_mempolicy``."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libnuma.so.1", use_errno=True)
        except OSError:
            raise RuntimeError("bind_memory=True needs libnuma.so.1 (the libnuma1 system package)") from None
        mask_ptr = ctypes.POINTER(ctypes.c_ulong)
        self.lib.get_mempolicy.argtypes = [
            ctypes.POINTER(ctypes.c_int),
            mask_ptr,
            ctypes.c_ulong,
            ctypes.c_void_p,
            ctypes.c_ulong,
        ]
        self.lib.get_mempolicy.restype = ctypes.c_int
        self.lib.set_mempolicy.argtypes = [ctypes.c_int, mask_ptr, ctypes.c_ulong]
        self.lib.set_mempolicy.restype = ctypes.c_int
        possible = _id_list((_NODES / "possible").read_text())
        self.words = (max(1024, max(possible, default=0) + 1) + _WORD_BITS - 1) // _WORD_BITS

    def _mask(self, words: tuple[int, ...] = ()) -> Any:
        return (ctypes.c_ulong * self.words)(*words)

    def read(self) -> tuple[int, tuple[int, ...]]:
        mode, mask = ctypes.c_int(), self._mask()
        if self.lib.get_mempolicy(ctypes.byref(mode), mask, self.words * _WORD_BITS, None, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"get_mempolicy failed: {os.strerror(err)}")
        return mode.value, tuple(mask)

    def write(self, policy: tuple[int, tuple[int, ...]]) -> None:
        mode, words = policy
        mask = self._mask(words)
        if self.lib.set_mempolicy(mode, mask if any(words) else None, self.words * _WORD_BITS) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"set_mempolicy failed: {os.strerror(err)}")

    def bind_to(self, node: int) -> tuple[int, tuple[int, ...]]:
        words = [0] * self.words
        words[node // _WORD_BITS] |= 1 << (node % _WORD_BITS)
        return _MPOL_BIND, tuple(words)


@dataclass(frozen=True)
class NumaAffinity:
    """A binding plan: the CPUs of one NUMA node, and optionally its memory. Picklable.

    ``bind()`` applies it to the calling thread (and the threads and processes it starts later); calling the
    object does the same, so it serves as a DataLoader ``worker_init_fn``.
    """

    numa_node: int
    cpus: tuple[int, ...]
    bind_memory: bool = True

    def bind(self) -> None:
        """Apply the plan and check the kernel applied all of it; on any failure restore what was there."""
        _linux_only()
        if not self.cpus or not all(isinstance(c, int) and not isinstance(c, bool) for c in self.cpus):
            raise ValueError(f"cpus must be a non-empty tuple of CPU ids, got {self.cpus!r}")
        outside = set(self.cpus) - _cpus_of_node(self.numa_node)
        if outside:
            raise ValueError(f"CPUs {sorted(outside)} are not on NUMA node {self.numa_node}")
        policy = before_policy = None
        if self.bind_memory:
            if self.numa_node not in _memory_nodes_allowed():
                raise RuntimeError(f"this process may not allocate memory on NUMA node {self.numa_node}")
            policy = _Policy()
            before_policy = policy.read()
        before_cpus = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, self.cpus)
            if os.sched_getaffinity(0) != set(self.cpus):
                raise RuntimeError(f"the kernel applied only part of the CPU mask {list(self.cpus)}")
            if policy is not None:
                wanted = policy.bind_to(self.numa_node)
                policy.write(wanted)
                if policy.read() != wanted:
                    raise RuntimeError(f"the memory policy in effect is not MPOL_BIND to node {self.numa_node}")
        except BaseException:
            try:
                if policy is not None and before_policy is not None:
                    policy.write(before_policy)
            finally:
                os.sched_setaffinity(0, before_cpus)
            raise

    def __call__(self, worker_id: int) -> None:
        """``worker_init_fn``: bind the DataLoader worker (no CUDA involved)."""
        self.bind()


def get_numa_affinity(numa_node: int, *, bind_memory: bool = True) -> NumaAffinity:
    """A plan for ``numa_node``: its CPUs that the calling thread may run on. Binds nothing yet.

    Raises:
        RuntimeError: the node has none of the allowed CPUs (no remote node is chosen instead), or no topology.
    """
    _linux_only()
    cpus = _cpus_of_node(numa_node) & os.sched_getaffinity(0)
    if not cpus:
        raise RuntimeError(f"NUMA node {numa_node} has none of the CPUs this thread may run on")
    return NumaAffinity(numa_node, tuple(sorted(cpus)), bind_memory)


def get_gpu_affinity(device: Any = None, *, bind_memory: bool = True) -> NumaAffinity:
    """A plan for the NUMA node of a CUDA device (logical index, as torch numbers them). Call it in the rank
    process (it initializes CUDA), then hand the plan to the workers.

    Raises:
        RuntimeError: called in a DataLoader worker, no CUDA device, or a torch without PCI ids in the device
            properties (use :func:`get_numa_affinity` with the node), or the kernel exposes no node for the GPU.
    """
    _linux_only()
    import torch

    if torch.utils.data.get_worker_info() is not None:
        raise RuntimeError("get_gpu_affinity runs in the rank process: pass its plan to the workers instead")
    if not torch.cuda.is_available():
        raise RuntimeError("get_gpu_affinity needs a CUDA device; use get_numa_affinity(node) without one")
    props = torch.cuda.get_device_properties(device)
    try:  # torch's stub omits the PCI fields its CUDA builds set (older builds lack them: AttributeError)
        address = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"  # type: ignore[attr-defined]
    except AttributeError:
        raise RuntimeError(
            "this torch does not report the GPU's PCI address; use get_numa_affinity(node) with the node"
        ) from None
    try:
        node = int((_PCI / address / "numa_node").read_text())
    except (OSError, ValueError):
        raise RuntimeError(f"no NUMA node for the GPU at PCI {address}") from None
    if node < 0:
        raise RuntimeError(f"the kernel reports no NUMA node for the GPU at PCI {address}")
    return get_numa_affinity(node, bind_memory=bind_memory)
