"""Training step of a 12-layer nn.TransformerEncoder on the GPU: flagos against native cuda.

d_model 1024, 16 heads, feed-forward 4096, batch 8 x 512 tokens, bf16 autocast,
AdamW.  The two models train side by side, one step each in turn, which goes
first alternating (after 3 warm-up steps each), both processes pinned to the same
two cores, so that the GPU machine's speed -- which drifts by up to 2x between
minutes -- is the same for both within each pair of steps.  Reported: the median step time and
tokens/s of each over `--steps` steps, the median of the per-pair throughput
ratios with its 95 % interval (_report.median_interval), and each run's peak memory.
Goals: flagos >= 0.97 of native tokens/s (over five runs: their median, and no run below 0.95), peak memory
<= 1.02 of native.

The native model lives in the reference interpreter (`--reference-python`, a
Python with a CUDA build of torch; _gpu_common.py says why), which never registers
flagos.  The flagos model lives in a child process too (this interpreter, flagos
registered), so that both sides run in the same role: a child started the same way,
driven over the same kind of pipe, one step at a time.  `--flagos-in-process`
trains it in the benchmark's own process instead.  `--calibrate` measures the
harness itself: a second native child takes flagos's place, so the ratios show
what the alternation, the pipes and the machine's drift alone make of two
identical sides.  `--turn-steps K` gives each side K steps per turn: the
difference between K = 1 and a long K is what each side loses to finding the
processor's caches as the other side left them.  A run's startup and warm-up take
longer than its 150 steps, and fewer pairs leave a wider spread.  `--counters` also
counts each side's host work per step in hardware events (instructions, cycles, cache
and branch misses; _thread_counters.py), from the end of the step's first synchronisation
to the start of its last, on every thread: whether a slower side does more work or does
the same work more slowly.  Reading them costs each step two system calls per thread.

    python benchmarks/device/gpu_transformer.py [--out gpu_transformer.json] [--steps 150] [--reference-python PY]
        [--flagos-in-process | --calibrate] [--turn-steps 1] [--counters]
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _gpu_common import (FlagosChild, NativeChild, ScriptChild, device_api, emit, flagos_layout, flagos_process,
                         parser, reference_python, require_flagos, serve, share_cores, take_turns)
from _report import median_interval
from _thread_counters import CountersUnavailable, ThreadCounters, per_step

BATCH, SEQ, D_MODEL, HEADS, FF, LAYERS = 8, 512, 1024, 16, 4096, 12


class Trainer:
    """The model, its AdamW and a fixed batch on `device`; step() trains once and returns its time."""

    def __init__(self, device: str) -> None:
        self.device, self.api = device, device_api(device)
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.1, batch_first=True, norm_first=True)
        self.model = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.x = torch.randn(BATCH, SEQ, D_MODEL, device=device)
        self.loss = float("nan")
        # Per timed step, the process's CPU time (every thread: autograd's device thread too) and context
        # switches: whether a slower side does more host work, or waits, or is preempted.
        self.usage: list[tuple[float, int, int]] = []
        self.counters: ThreadCounters | None = None
        self.counters_unavailable = ""
        self.counted: list[dict[str, float]] = []

    def count_host_work(self) -> dict:
        """From the next step on, count each step's host work on every thread this process has now."""
        try:
            self.counters = ThreadCounters().open()
        except CountersUnavailable as e:
            self.counters_unavailable = str(e)
        return {}

    def step(self, mark: Callable[[], None] = lambda: None) -> float:
        """One training step; `mark` is called after the forward and after the backward phase."""
        self.api.synchronize()
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        counted = self.counters.read() if self.counters else None
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device, dtype=torch.bfloat16):
            loss = self.model(self.x).float().square().mean()
        mark()
        loss.backward()
        mark()
        self.optimizer.step()
        if counted is not None:
            # before the synchronisation, whose wait spins in user mode for as long as the GPU runs
            self.counted.append({k: v - counted[k] for k, v in self.counters.read().items()})
        self.api.synchronize()
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        self.usage.append(((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000,
                           after.ru_nvcsw - before.ru_nvcsw, after.ru_nivcsw - before.ru_nivcsw))
        self.loss = loss.item()
        return elapsed * 1000

    def forward(self) -> float:
        """The step's forward pass alone, under torch.no_grad; returns its time (tools/native_profile.py)."""
        self.api.synchronize()
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast(self.device, dtype=torch.bfloat16):
            self.model(self.x)
        self.api.synchronize()
        return (time.perf_counter() - start) * 1000

    def reset_peak(self) -> None:
        self.api.synchronize()
        self.api.reset_peak_memory_stats()
        self.usage.clear()
        self.counted.clear()

    def stats(self) -> dict[str, float]:
        cpu_ms, voluntary, involuntary = zip(*self.usage) if self.usage else ((0.0,), (0,), (0,))
        return {"peak_memory_mib": round(self.api.max_memory_allocated() / 2**20, 1),
                "last_loss": round(self.loss, 5),
                "cpu_ms_per_step": round(statistics.median(cpu_ms), 2),
                "voluntary_switches_per_step": statistics.median(voluntary),
                "involuntary_switches_per_step": statistics.median(involuntary),
                **self.counter_stats()}

    def counter_stats(self) -> dict[str, object]:
        """The counted host work per step; why there is none where counting was asked for and failed."""
        if self.counters:
            return {"host_counters": {"threads": self.counters.threads, **per_step(self.counted)}}
        return {"host_counters_unavailable": self.counters_unavailable} if self.counters_unavailable else {}


def serve_trainer(trainer: Trainer, extra: dict[str, Callable[..., dict]] | None = None, native: bool = True) -> None:
    """Child side: answer step, reset_peak, stats (and extra's commands) for `trainer`."""
    serve({"step": lambda: {"ms": trainer.step()}, "reset_peak": lambda: trainer.reset_peak() or {},
           "count_host_work": trainer.count_host_work, "stats": trainer.stats, **(extra or {})}, native=native)


class ChildTrainer(ScriptChild):
    """Parent side: a Trainer in a child process (serve_trainer)."""

    def step(self) -> float:
        return self.ask("step")["ms"]

    def reset_peak(self) -> None:
        self.ask("reset_peak")

    def count_host_work(self) -> dict:
        return self.ask("count_host_work")

    def stats(self) -> dict[str, float]:
        return self.ask("stats")


class NativeTrainer(ChildTrainer, NativeChild):
    """A native cuda Trainer in the reference interpreter running `script --native-child`."""


class FlagosTrainer(ChildTrainer, FlagosChild):
    """A flagos Trainer in this interpreter running `script --flagos-child`."""


def alternate_profiles(native: ChildTrainer, flagos: Trainer, rounds: int,
                       profile_flagos: Callable[[], dict]) -> tuple[list[dict], list[dict]]:
    """3 warm-up steps each, then `rounds` times the child's "profile" command and `profile_flagos()` in turn
    (take_turns); closes the child.  The two lists of reports, native first."""
    try:
        take_turns({"native": native.step, "flagos": flagos.step}, 3)
        done = take_turns({"native": lambda: native.ask("profile"), "flagos": profile_flagos}, rounds)
    finally:
        native.close()
    return done["native"], done["flagos"]


def summary(times_ms: list[float], stats: dict[str, float]) -> dict[str, float]:
    step_ms = statistics.median(times_ms)
    return {"step_ms": round(step_ms, 2), "tokens_per_s": round(BATCH * SEQ / step_ms * 1000, 1), **stats}


def counter_ratios(native: dict, flagos: dict) -> dict[str, dict[str, float]]:
    """flagos / native per counted event, where both sides counted."""
    n, f = native.get("host_counters", {}), flagos.get("host_counters", {})
    ratios = {k: round(f[k] / n[k], 4) for k in n if k != "threads" and k in f and n[k]}
    return {"host_counter_ratios": ratios} if ratios else {}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=3)
    flagos_layout(p)
    p.add_argument("--calibrate", action="store_true", help="a second native child in flagos's place: the ratios "
                   "of two identical sides")
    p.add_argument("--turn-steps", type=int, default=1, help="steps per side per turn (--steps is rounded down "
                   "to a multiple)")
    p.add_argument("--counters", action="store_true", help="count each side's host work per step in hardware "
                   "events (instructions, cycles, misses)")
    args = p.parse_args()
    if args.calibrate and args.flagos_in_process:
        p.error("--calibrate puts a native child in flagos's place: it takes no --flagos-in-process")
    if not 1 <= args.turn_steps <= args.steps:
        p.error(f"--turn-steps {args.turn_steps}: give 1 to --steps ({args.steps}) steps per turn")
    if args.native_child:
        serve_trainer(Trainer("cuda"))
        return 0
    require_flagos()
    if args.flagos_child:
        serve_trainer(Trainer("flagos"), native=False)
        return 0
    cores = share_cores()
    native = NativeTrainer(reference_python(args.reference_python), __file__)
    flagos: Trainer | ChildTrainer
    if args.calibrate:
        flagos = NativeTrainer(reference_python(args.reference_python), __file__)
    elif args.flagos_in_process:
        flagos = Trainer("flagos")
    else:
        flagos = FlagosTrainer(__file__)
    try:
        steps = {"native": native.step, "flagos": flagos.step}
        take_turns(steps, args.warmup)
        native.reset_peak()
        flagos.reset_peak()
        if args.counters:
            native.count_host_work()
            flagos.count_host_work()
        times = take_turns(steps, args.steps // args.turn_steps, args.turn_steps)
        native_ms, flagos_ms = times["native"], times["flagos"]
        pair_ratios = [n / f for n, f in zip(native_ms, flagos_ms)]
        native_result, flagos_result = summary(native_ms, native.stats()), summary(flagos_ms, flagos.stats())
        native_env = native.ask("environment")
    finally:
        native.close()
        if isinstance(flagos, ChildTrainer):
            flagos.close()
    return emit({
        "benchmark": "gpu_transformer",
        "config": {"layers": LAYERS, "d_model": D_MODEL, "heads": HEADS, "ff": FF, "batch": BATCH, "seq": SEQ,
                   "autocast": "bfloat16", "optimizer": "AdamW", "steps": len(native_ms), "warmup": args.warmup,
                   "cores": cores, "first": "alternating", "turn_steps": args.turn_steps, "counters": args.counters,
                   "flagos_process": "native child (calibration)" if args.calibrate else flagos_process(args)},
        "native": native_result, "flagos": flagos_result,
        "steps_ms": {"native": [round(t, 2) for t in native_ms], "flagos": [round(t, 2) for t in flagos_ms]},
        "throughput_ratio": round(flagos_result["tokens_per_s"] / native_result["tokens_per_s"], 4),
        "median_pair_ratio": round(statistics.median(pair_ratios), 4),
        "median_pair_ratio_interval_95": median_interval(pair_ratios),
        "peak_memory_ratio": round(flagos_result["peak_memory_mib"] / native_result["peak_memory_mib"], 4),
        **counter_ratios(native_result, flagos_result),
        # two native sides have no goal to meet: their ratios are the harness's own spread
        **({} if args.calibrate else {"goals": {"min_throughput_ratio": 0.97, "min_throughput_ratio_any_run": 0.95,
                                                "max_peak_memory_ratio": 1.02}}),
    }, args.out, native_env)


if __name__ == "__main__":
    sys.exit(main())
