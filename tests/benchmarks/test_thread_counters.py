"""Host work counted per thread through perf_event_open (benchmarks/device/_thread_counters.py): every thread
the process has is counted and summed, a machine without the hardware events gets the reason instead of
numbers, and the per-step summary is the median with instructions per cycle."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "device"))
import _thread_counters as counters  # noqa: E402


def burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_work_on_another_thread_is_counted() -> None:
    # task-clock is a software event: every Linux kernel counts it, with or without a PMU.
    start, done = threading.Event(), threading.Event()

    def worker() -> None:
        start.wait()
        burn(0.2)
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    c = counters.ThreadCounters(events=("task_clock_ns",)).open()
    try:
        assert c.threads >= 2
        before = c.read()["task_clock_ns"]
        start.set()
        done.wait()
        after = c.read()["task_clock_ns"]
    finally:
        c.close()
        start.set()
        thread.join()
    # the worker's 0.2 s of CPU are in the sum, though this thread only waited
    assert after - before >= 0.15e9


def test_hardware_events_count_or_say_why_not() -> None:
    try:
        c = counters.ThreadCounters().open()
    except counters.CountersUnavailable as e:
        assert str(e).startswith("perf_event_open(instructions) failed: ")
        return
    try:
        before = c.read()
        burn(0.05)
        after = c.read()
    finally:
        c.close()
    assert after["instructions"] > before["instructions"] and after["cycles"] > before["cycles"]


def test_unknown_events_are_named() -> None:
    with pytest.raises(ValueError, match="unknown events \\['stalls'\\]"):
        counters.ThreadCounters(events=("instructions", "stalls")).open()


def test_read_before_open_is_refused() -> None:
    with pytest.raises(RuntimeError, match="before open"):
        counters.ThreadCounters().read()


def test_per_step_is_the_median_with_instructions_per_cycle() -> None:
    steps = [{"instructions": 300.0, "cycles": 100.0}, {"instructions": 200.0, "cycles": 100.0},
             {"instructions": 900.0, "cycles": 400.0}]
    assert counters.per_step(steps) == {"instructions": 300, "cycles": 100, "instructions_per_cycle": 3.0}
    assert counters.per_step([]) == {}
