"""Hardware event counts of this process's host work, every thread, read through perf_event_open(2).

A GPU benchmark's side that takes longer per step does more host work or does the same work slower
(cache and branch misses, a cold instruction cache). Wall and CPU time cannot tell the two apart;
counted instructions and cycles can: more instructions at the same instructions per cycle is work to
remove, the same instructions at fewer per cycle is where the work sits in memory.

Counters count user-mode events only (the kernel's work is not the device layer's) on every thread the
process has when they are opened; a thread started later is not counted, and `threads` says how many
were. Where the kernel or the machine offers no such counter (no PMU in a VM, perf_event_paranoid 3, a
seccomp filter) `ThreadCounters.open` raises CountersUnavailable with the reason, which a benchmark records
instead of counts. Standard library only: the native side's interpreter runs it too.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import statistics
import struct
from dataclasses import dataclass, field

# perf_event_attr.type and .config (linux/perf_event.h)
_HARDWARE, _SOFTWARE, _HW_CACHE = 0, 1, 3
_CACHE_L1I, _CACHE_OP_READ, _CACHE_RESULT_MISS = 1, 0, 1
EVENTS: dict[str, tuple[int, int]] = {
    "instructions": (_HARDWARE, 1),
    "cycles": (_HARDWARE, 0),
    "branch_misses": (_HARDWARE, 5),
    "llc_misses": (_HARDWARE, 3),
    "l1i_misses": (_HW_CACHE, _CACHE_L1I | (_CACHE_OP_READ << 8) | (_CACHE_RESULT_MISS << 16)),
    "task_clock_ns": (_SOFTWARE, 1),
}
HOST_WORK_EVENTS = ("instructions", "cycles", "branch_misses", "l1i_misses", "llc_misses")

_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
_DISABLED, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
# PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING | PERF_FORMAT_GROUP: one read() per thread
# returns every event of its group, counted over the same span.
_READ_FORMAT = 1 | 2 | 8
_IOC_ENABLE, _IOC_FLAG_GROUP = 0x2400, 1


class CountersUnavailable(RuntimeError):
    """This machine cannot count the events asked for; the message says why."""


class _Attr(ctypes.Structure):
    # perf_event_attr up to config2 (PERF_ATTR_SIZE_VER1, 72 bytes), which every kernel since 2.6.33 accepts.
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("wakeup_events", ctypes.c_uint32),
                ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64)]


def _open_counter(event: str, tid: int, leader: int) -> int:
    machine = os.uname().machine
    if machine not in _SYS_PERF_EVENT_OPEN:
        raise CountersUnavailable(f"no perf_event_open number known for {machine}")
    kind, config = EVENTS[event]
    attr = _Attr(type=kind, size=ctypes.sizeof(_Attr), config=config, read_format=_READ_FORMAT,
                 flags=(_DISABLED if leader < 0 else 0) | _EXCLUDE_KERNEL | _EXCLUDE_HV)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.syscall(_SYS_PERF_EVENT_OPEN[machine], ctypes.byref(attr), tid, -1, leader, 0))
    if fd < 0:
        errno = ctypes.get_errno()
        raise CountersUnavailable(f"perf_event_open({event}) failed: {os.strerror(errno)} (errno {errno})")
    return fd


@dataclass
class ThreadCounters:
    """One group of counters for `events` per thread of this process, opened by open(), summed by read()."""

    events: tuple[str, ...] = HOST_WORK_EVENTS
    groups: list[list[int]] = field(default_factory=list)  # per thread: the leader's fd first

    @property
    def threads(self) -> int:
        return len(self.groups)

    def open(self) -> ThreadCounters:
        unknown = [e for e in self.events if e not in EVENTS]
        if unknown:
            raise ValueError(f"unknown events {unknown}: choose from {sorted(EVENTS)}")
        try:
            for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
                group: list[int] = []
                self.groups.append(group)
                for event in self.events:
                    group.append(_open_counter(event, tid, group[0] if group else -1))
        except CountersUnavailable:
            self.close()
            raise
        for group in self.groups:
            fcntl.ioctl(group[0], _IOC_ENABLE, _IOC_FLAG_GROUP)
        return self

    def read(self) -> dict[str, float]:
        """Each event's count so far, summed over the threads; scaled up where the kernel multiplexed a group."""
        if not self.groups:
            raise RuntimeError("ThreadCounters.read() before open()")
        totals = dict.fromkeys(self.events, 0.0)
        size = 8 * (3 + len(self.events))
        for group in self.groups:
            _, enabled, running, *values = struct.unpack(f"{3 + len(self.events)}Q", os.read(group[0], size))
            for event, value in zip(self.events, values):
                totals[event] += value * enabled / running if running else 0.0
        return totals

    def close(self) -> None:
        for group in self.groups:
            for fd in group:
                os.close(fd)
        self.groups = []


def per_step(samples: list[dict[str, float]]) -> dict[str, float]:
    """The median of each event over `samples` (one dict of counts per step), with instructions per cycle."""
    if not samples:
        return {}
    out: dict[str, float] = {event: round(statistics.median(s[event] for s in samples)) for event in samples[0]}
    if out.get("cycles"):
        out["instructions_per_cycle"] = round(out.get("instructions", 0) / out["cycles"], 3)
    return out
