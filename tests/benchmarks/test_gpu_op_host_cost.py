"""benchmarks/device/gpu_op_host_cost.py without a GPU: the cold-code mode runs the other code before every call
and times the calls alone, `--autograd-thread` times them inside a backward on autograd's thread for the device,
`--ops` picks the ops timed, and an unknown op name is refused before anything runs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import torch

from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "device"))
import gpu_op_host_cost as host_cost  # noqa: E402


def test_cold_code_runs_before_every_call_and_is_not_timed() -> None:
    order: list[str] = []

    def between() -> None:
        order.append("other")
        time.sleep(0.002)

    us = host_cost.host_us("cpu", lambda: order.append("op"), 20, between)
    assert order == ["other", "op"] * 20
    assert us < 1000  # the 2 ms of other code before each call are not in the call's time


def test_the_other_code_runs_on_the_cpu() -> None:
    host_cost.other_code()()  # sixteen different operators, none of them failing on small CPU tensors


def test_ops_picks_the_ops_timed() -> None:
    timers = host_cost.timers("cpu", 5, cold_code=True, ops={"add", "linear"})
    assert set(timers) == {"add", "linear"}
    assert all(t() > 0 for t in timers.values())


def test_autograd_thread_runs_the_work_inside_a_backward_on_the_device_thread() -> None:
    seen: list[tuple[bool, bool, bool]] = []

    def work() -> float:
        seen.append((torch._C._current_autograd_node() is not None, torch.is_grad_enabled(),
                     threading.get_ident() == threading.main_thread().ident))
        return 1.5

    assert host_cost.on_autograd_thread("flagos", work) == 1.5
    assert seen == [(True, False, False)]  # in a backward, grad mode off, on flagos's autograd thread


def test_autograd_thread_timers_time_every_op_there() -> None:
    timers = host_cost.timers("flagos", 5, ops={"add", "mm_out"}, autograd_thread=True)
    assert set(timers) == {"add", "mm_out"}
    assert all(t() > 0 for t in timers.values())


def test_an_unknown_op_is_refused_in_one_line() -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "device" / "gpu_op_host_cost.py"),
                           "--ops", "add,frobnicate"], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "--ops: unknown ['frobnicate']; choose from" in done.stderr.splitlines()[-1]
