"""What the GPU benchmarks share: the native side in a reference interpreter, timing on device
events with the two sides taking turns, medians, JSON out.

Native CUDA runs in a child: the same script with
`--native-child`, started with the *reference interpreter* (`--reference-python`, default this
interpreter when its torch is a CUDA build), with backend autoloading and torch_fl's startup
hook off, so flagos is never registered there.  Two reasons: on stock torch+cpu with the
cuda-assets wheel torch has no CUDA backend of its own (`torch.cuda` is not compiled), and with
a PrivateUse1 backend registered the autograd engine rejects backward over CUDA tensors
(`opt_ready_stream && opt_parent_stream`, pytorch/pytorch#161129).  The parent asks the child
for one measurement at a time over a pipe (one JSON line per command), so the two alternate.

The benchmarks that take `flagos_layout` options run flagos in a child too (`--flagos-child`, this
interpreter, flagos registered), started and driven as the native one, so that both sides run in the same
role: a process that computes on one device and nothing else, as a user's job does.  The benchmark's own
process also starts children, reads pipes and holds the results; with flagos in it (`--flagos-in-process`)
the training step measured about 2 % lower on an H100 than with flagos in a child
(docs/performance.md, "where the flagos side runs").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from _report import emit_json

# The native child's environment is the GPU suite's reference interpreter's (tests/gpu/reference.py):
# flagos never registered there, and no PYTHONPATH of the checked environment's.
sys.path.append(str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
from reference import child_env  # noqa: E402

T = TypeVar("T")


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--reference-python", help="the interpreter with a CUDA build of torch that runs the native"
                   " side (default: this one, when its torch is a CUDA build)")
    p.add_argument("--native-child", action="store_true", help=argparse.SUPPRESS)
    return p


def flagos_layout(p: argparse.ArgumentParser) -> None:
    """Where the flagos side runs: a child process by default (the module's docstring says why)."""
    where = p.add_mutually_exclusive_group()
    where.add_argument("--flagos-in-process", action="store_true",
                       help="run the flagos side in the benchmark's own process instead of a child")
    where.add_argument("--flagos-in-child", action="store_true", help="run the flagos side in a child (the default)")
    p.add_argument("--flagos-child", action="store_true", help=argparse.SUPPRESS)


def flagos_process(args: argparse.Namespace) -> str:
    """Where the flagos side ran, for the report."""
    return "benchmark" if args.flagos_in_process else "child"


def reference_python(given: str | None) -> str:
    """The interpreter of the native side; exits 2 with the fix when there is none."""
    if given:
        return given
    if torch.version.cuda:
        return sys.executable
    print(f"this torch ({torch.__version__}) is not a CUDA build: give --reference-python, a Python whose torch is"
          " one (for example the GPU machine's own), for the native side", file=sys.stderr)
    sys.exit(2)


def event_timer(device: str, fn: Callable[[], object], inner: int) -> Callable[[], float]:
    """A function that times `inner` calls of `fn` with `device` events and returns ms per call.

    torch.Event, not torch.cuda.Event: it serves flagos and cuda alike, and on stock torch+cpu
    with the cuda-assets wheel the CUDA runtime is there but torch.cuda's Python API is not.
    """

    def time_once() -> float:
        start = torch.Event(device=torch.device(device), enable_timing=True)
        end = torch.Event(device=torch.device(device), enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / inner

    return time_once


def take_turns(measures: dict[str, Callable[[], T]], rounds: int, per_turn: int = 1) -> dict[str, list[T]]:
    """Per side (the key), what its measure returned, `per_turn` times in each of `rounds` rounds.  The
    sides take turns round by round, so a drift of the machine's speed (clocks, a shared host) reaches them
    alike, and which goes first alternates: a side that always ran right after the other would always find
    the processor's caches and the GPU as the other left them."""
    times: dict[str, list[T]] = {side: [] for side in measures}
    order = list(measures.items())
    for i in range(rounds):
        for side, measure in order if i % 2 == 0 else order[::-1]:
            times[side].extend(measure() for _ in range(per_turn))
    return times


def median_ms(timers: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Per side (the key), the median over `repeats` turns (take_turns) of what its timer returns."""
    return {side: statistics.median(t) for side, t in take_turns(timers, repeats).items()}


class ScriptChild:
    """Parent side: a benchmark script's child process (`serve`), driven over a pipe."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.child = subprocess.Popen(argv, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, command: str, *args: str) -> dict:
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write(" ".join((command, *args)) + "\n")
        self.child.stdin.flush()
        line = self.child.stdout.readline()
        if not line:
            raise SystemExit(f"the child {self.child.args[1:3]} exited ({self.child.wait()}); see its stderr above")
        return json.loads(line)

    def close(self) -> None:
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.close()  # the child's loop ends at end of input
        self.child.wait()
        self.child.stdout.close()


class NativeChild(ScriptChild):
    """`script --native-child ARGS` in the reference interpreter."""

    def __init__(self, python: str, script: str, *args: str) -> None:
        super().__init__([python, script, "--native-child", *args], child_env())


class FlagosChild(ScriptChild):
    """`script --flagos-child ARGS` in this interpreter, with this process's environment."""

    def __init__(self, script: str, *args: str) -> None:
        super().__init__([sys.executable, script, "--flagos-child", *args], dict(os.environ))


def serve(commands: dict[str, Callable[..., dict]], native: bool = True) -> None:
    """Child side: answer one JSON line per command line read from stdin (`name arg...`); `environment`
    is always there."""
    if native and "torch_fl" in sys.modules:
        raise SystemExit("torch_fl is loaded in the native child: its results would not be native")
    commands = {"environment": lambda: {"torch": torch.__version__, "cuda": torch.version.cuda,
                                        "python": sys.version.split()[0]}, **commands}
    for line in sys.stdin:
        name, *args = line.split()
        print(json.dumps(commands[name](*args)), flush=True)


def share_cores(count: int = 2) -> list[int]:
    """Pin this process, and so the native child it starts, to the same `count` cores.

    The two take turns on the same cores, so a difference between cores (clock,
    busy neighbours on a shared host) cannot favour either.  The last cores of the
    allowed set: the first ones tend to serve interrupts.
    """
    cores = sorted(os.sched_getaffinity(0))[-count:]
    os.sched_setaffinity(0, cores)
    return cores


def device_api(device: str):  # noqa: ANN201 - a device module
    """synchronize / empty_cache / peak statistics of `device`: torch.flagos for flagos; for native cuda
    torch.cuda, or torch.accelerator on stock torch+cpu (no torch.cuda API there)."""
    if device == "flagos":
        return torch.flagos
    return torch.cuda if torch.version.cuda else torch.accelerator


def environment(native: dict[str, Any] | None = None) -> dict[str, Any]:
    import torch_fl

    env = {"gpu": _gpu_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "torch_fl": torch_fl.build_config.PLATFORM}
    if native is not None:
        env["native_reference"] = native
    return env


def _gpu_name() -> str:
    if torch.version.cuda:
        return torch.cuda.get_device_name(0)
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def emit(report: dict[str, Any], out: str | None, native: dict[str, Any] | None = None) -> int:
    """Print (and with `out` write) the report with the environment of both sides."""
    emit_json({"version": 1, **environment(native), **report}, out)
    return 0


def require_flagos() -> None:
    import torch_fl  # registers flagos where autoloading is off

    if torch_fl.build_config.RUNTIME != "cuda" or not torch.flagos.is_available():
        print("no CUDA GPU: run this on a machine with one (and torch_fl built on the cuda runtime)",
              file=sys.stderr)
        sys.exit(2)
