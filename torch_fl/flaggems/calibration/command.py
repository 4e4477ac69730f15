"""``python -m torch_fl.flaggems calibrate`` and ``merge``: argparse, a rich progress bar and summary table."""

from __future__ import annotations

import argparse
import datetime
import difflib
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["CalibrationError", "add_commands"]


class CalibrationError(Exception):
    """Unusable input for calibration: one line, with the fix (exit 2)."""


def add_commands(subparsers: Any) -> None:
    calibrate = subparsers.add_parser(
        "calibrate", help="measure FlagGems against the kernel device; write a route table with its evidence",
        description="For each operator the installed flag_gems offers, in each dtype, run FlagGems' function and the "
        "kernel device's own kernel on the calls that PyTorch's OpInfo samples (forward and backward) and a recorded "
        "workload step make; record correctness and the median time of each side per op, dtype and size bucket "
        "(log2 of the element count); write a route table that sends an op, a dtype or a size to flaggems only where "
        "FlagGems was correct and faster, with its evidence beside it. Resumable: results are appended to the state "
        "file as each case finishes, and a rerun skips them.")
    calibrate.add_argument("--out", type=Path, help="the route table to write (default: "
                           "flaggems_routes_<flag_gems version>_<device>.conf in the current directory); its evidence "
                           "goes beside it as <name>.evidence.json")
    calibrate.add_argument("--state", type=Path, help="the JSONL state file (default: <out>.state.jsonl)")
    calibrate.add_argument("--shard", metavar="K/N", help="measure only the K-th of N shares of the operators (by "
                           "name); join the shards' state files with `merge`")
    calibrate.add_argument("--ops", help="comma-separated operators (add.Tensor,_softmax); default: every one the "
                           "installed flag_gems offers that flagos routes")
    calibrate.add_argument("--dtypes", default="all", help="comma-separated dtypes (float32,bfloat16), or all: every "
                           "dtype an OpInfo supports on the kernel device (default)")
    calibrate.add_argument("--samples", type=int, default=8, help="OpInfo samples per OpInfo and dtype (default 8)")
    calibrate.add_argument("--no-opinfo", action="store_true", help="no OpInfo samples, only the workload")
    calibrate.add_argument("--record-workload", action="append", metavar="MODULE:FUNC", help="a workload step to "
                           "record shapes from: FUNC(device, dtype) runs one step on that device, flagos (repeatable; "
                           "default: the built-in small transformer training step)")
    calibrate.add_argument("--no-workload", action="store_true", help="no workload, only OpInfo samples")
    calibrate.add_argument("--warmup", type=int, default=2, help="untimed calls per side (default 2)")
    calibrate.add_argument("--reps", type=int, default=10, help="timed calls per side; the median counts (default 10)")
    calibrate.add_argument("--min-speedup", type=float, default=1.05, help="FlagGems must be this many times faster "
                           "(default 1.05)")
    calibrate.add_argument("--op-budget", type=float, metavar="S", help="seconds one operator may take (Triton's "
                           "compiles and FlagGems' autotuning included); its cases not begun by then are recorded as "
                           "not measured, and the op stays on the kernel device (default: no limit)")
    calibrate.add_argument("--screened", type=Path, nargs="+", metavar="STATE", help="state files of a screening pass "
                           "that ran side by side with other shards (tools/gpu-calibrate.sh screen), whose timings "
                           "shared the GPU: time alone only the cases it found correct and no more than "
                           "--screen-slack times too slow to route; take every other case's result from it")
    calibrate.add_argument("--screen-slack", type=float, default=2.0, help="how much slower than routable FlagGems "
                           "may have been in the screening and still be timed alone (default 2)")
    calibrate.add_argument("--tolerance", choices=("pytorch", "flaggems"), default="pytorch",
                           help="pytorch: torch.testing.assert_close's tolerances per dtype (default); flaggems: "
                           "flag_gems.testing.assert_close, FlagGems' own (looser for reductions)")
    calibrate.add_argument("--provider-overhead-us", type=float, help="the flaggems provider's own cost per call, "
                           "added to FlagGems' side (default: measured at start)")
    calibrate.add_argument("--debug", action="store_true", help="tracebacks for errors")
    merge = subparsers.add_parser("merge", help="join shards' state files into one route table",
                                  description="Read the state files of calibration shards (run with --shard K/N), "
                                  "which must come from the same flag_gems, Triton and device, and write one route "
                                  "table with its evidence.")
    merge.add_argument("states", nargs="+", type=Path, help="state files (JSONL)")
    merge.add_argument("--out", type=Path, help="the route table to write (default as for calibrate)")
    merge.add_argument("--min-speedup", type=float, help="default: the one the runs used")
    merge.add_argument("--kernel-provider", help="the provider calls not routed to flaggems run on (default: the one "
                       "the runs recorded, else this process's kernel-device provider); merging on another machine "
                       "than the one measured, name it for state files that do not record it")
    merge.add_argument("--debug", action="store_true", help="tracebacks for errors")


def _console(stderr: bool = False) -> Any:
    try:
        from rich.console import Console
    except ImportError:
        raise CalibrationError("calibration shows its progress with rich: pip install rich") from None
    return Console(stderr=stderr)


def _parse_shard(text: str | None) -> tuple[int, int]:
    if text is None:
        return 1, 1
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise CalibrationError(f"--shard: expected K/N with 1 <= K <= N, got {text!r}")
    return int(k), int(n)


def _dtypes(text: str) -> list[Any] | None:
    import torch

    if text == "all":
        return None
    found = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        value = getattr(torch, name, None)
        if not isinstance(value, torch.dtype):
            raise CalibrationError(f"--dtypes: unknown dtype {name!r}; write torch's names: float32,bfloat16")
        found.append(value)
    return found


def _provider_overhead_us(kernel_type: str, fallback: str) -> float:
    """The provider's cost around a call, as a routed op pays it (the dispatcher's way to the provider's kernel,
    views, adoption): the kernel device's own ``neg`` registered as a flaggems kernel, called on a small flagos
    tensor, against that ``neg`` called on the tensor's kernel view."""
    import torch

    from torch_fl import _C
    from torch_fl.flaggems.kernels import own_op_kernel

    overload = torch.ops.aten.neg.default
    x = torch.ones(16, device="flagos")
    view = _C._kernel_view(x)
    sync = torch.cuda.synchronize if kernel_type == "cuda" else (lambda: None)

    def per_call(call: Any) -> float:
        rounds = []
        for _ in range(5):
            sync()
            t0 = time.perf_counter()
            for _ in range(200):
                call()
            sync()
            rounds.append((time.perf_counter() - t0) / 200 * 1e6)
        return statistics.median(rounds)

    library = own_op_kernel("neg", fallback, kernel_type)
    try:
        routed = per_call(lambda: overload(x))
    finally:
        library.close()
    return round(max(0.0, routed - per_call(lambda: overload(view))), 3)


def run_calibrate(args: argparse.Namespace, argv: list[str]) -> int:
    import torch

    import torch_fl  # noqa: F401  (the flagos device, for the provider's overhead)
    from torch_fl import _C
    from torch_fl.flaggems import evidence, provider
    from torch_fl.flaggems.calibration import cases, measure, state, table
    from torch_fl.flaggems.op_table import FlagGemsUnavailable
    from torch_fl.flaggems.size_rules import dtype_name

    console, progress_console = _console(), _console(stderr=True)
    shard, shards = _parse_shard(args.shard)
    dtypes = _dtypes(args.dtypes)
    if args.reps < 1 or args.warmup < 0 or args.samples < 0:
        raise CalibrationError("--reps must be >= 1, --warmup and --samples >= 0")
    if (args.op_budget is not None and args.op_budget <= 0) or args.screen_slack < 1:
        raise CalibrationError("--op-budget must be > 0 and --screen-slack >= 1")
    screen = _read_screen(args.screened, args.min_speedup, args.screen_slack)
    try:
        offered = provider.table()
    except FlagGemsUnavailable as e:
        raise CalibrationError(f"nothing to calibrate: {e}") from None
    kernel_type = provider.kernel_device_type()
    assert kernel_type is not None
    fallback = provider.fallback_provider()
    entries = {e.op: e for e in offered.routable}
    if args.ops:
        wanted = [o.strip().removeprefix("aten::") for o in args.ops.split(",") if o.strip()]
        for op in wanted:
            if op not in entries:
                close = difflib.get_close_matches(op, list(entries), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise CalibrationError(f"--ops: flag_gems {offered.version} offers no routable operator {op!r}{hint}; "
                                       "`python -m torch_fl.flaggems` lists them")
        ops = sorted(wanted)
    else:
        ops = sorted(entries)
    ops = ops[shard - 1::shards]
    workloads = [] if args.no_workload else [cases.resolve_workload(s) for s in args.record_workload or ["builtin"]]
    environment = evidence.environment(_C._platform(), kernel_type, offered.version)
    out = args.out or Path(table.default_name(environment))
    state_path = args.state or out.with_name(out.name.removesuffix(".conf") + ".state.jsonl")
    device = kernel_type
    overhead = (args.provider_overhead_us if args.provider_overhead_us is not None
                else _provider_overhead_us(kernel_type, fallback))
    settings = measure.Settings(args.warmup, args.reps, args.tolerance, overhead)
    if args.tolerance == "flaggems" and not hasattr(sys.modules.get("flag_gems"), "testing"):
        raise CalibrationError(f"--tolerance flaggems: flag_gems {offered.version} has no flag_gems.testing; use "
                               "--tolerance pytorch")
    chosen = dtypes or sorted({d for op in ops for info in cases.opinfos_for(op)
                               for d in info.supported_dtypes(device)}, key=str)
    tolerances = {dtype_name(d): dict(zip(("rtol", "atol"), measure.tolerance_of(d))) for d in chosen}
    previous = state.read(state_path)
    for name, earlier in ((str(state_path), previous.environment), ("--screened", screen and screen.environment)):
        if earlier is not None and evidence.matches({"environment": earlier}, environment):
            raise CalibrationError(f"{name} was measured elsewhere ("
                                   f"{', '.join(evidence.matches({'environment': earlier}, environment))}); "
                                   "give state files of this machine")
    writer = state.StateWriter(state_path)
    started = time.perf_counter()
    command = "python -m torch_fl.flaggems " + shlex.join(argv)
    writer.write({"kind": "run", "environment": environment, "command": command, "shard": f"{shard}/{shards}",
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "settings": {"dtypes": [dtype_name(d) for d in chosen], "warmup": args.warmup, "reps": args.reps,
                               "min_speedup": args.min_speedup, "timer": measure.timer_name(device),
                               "tolerance": args.tolerance, "tolerances": tolerances, "provider_overhead_us": overhead,
                               "kernel_provider": fallback,
                               **({"op_budget_s": args.op_budget} if args.op_budget is not None else {}),
                               **({"screen": screen.settings()} if screen is not None else {}),
                               "sources": (["opinfo"] if not args.no_opinfo else []) + [n for n, _ in workloads]}})
    progress_console.print(f"calibrating {len(ops)} operators of flag_gems {offered.version} against provider "
                           f"{fallback} on {environment['device']}; tolerances: {args.tolerance} "
                           f"({_tolerance_text(tolerances)}); "
                           f"provider overhead {overhead} us per call; state: {state_path}")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # The workload's calls, recorded once for every operator (per dtype).
    from collections import defaultdict

    recorded: dict[str, list[cases.Case]] = defaultdict(list)
    for dtype in chosen:
        for name, workload in workloads:
            for case in cases.workload_cases(ops, dtype, name, workload):
                recorded[case.op].append(case)
    measured = skipped = taken = 0
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=progress_console) as progress:
            op_task = progress.add_task("operators", total=len(ops))
            for op in ops:
                progress.update(op_task, description=f"operators ({op}: recording)")
                found: list[cases.Case] = []
                for dtype in chosen:
                    if not args.no_opinfo:
                        found += cases.opinfo_cases(op, dtype, device, args.samples)
                found += recorded.pop(op, [])
                case_task = progress.add_task(f"  {op}", total=len(found))
                overload = entries[op]
                target = _overload(op)
                op_started = time.perf_counter()
                for case in found:
                    carried = screen.carried(case.id) if screen is not None else None
                    if case.id in previous.results:
                        skipped += 1
                    elif case.id in previous.unfinished:
                        writer.write({"kind": "case", **case.identity(), "correct": False,
                                      "failure": "did not finish in an earlier run (crash or hang)"})
                    elif carried is not None:
                        writer.write({"kind": "case", **carried})
                        taken += 1
                    elif args.op_budget is not None and time.perf_counter() - op_started > args.op_budget:
                        writer.write({"kind": "case", **case.identity(),
                                      "skipped": f"not measured: the operator's time budget ({args.op_budget:g} s) "
                                                 "ran out"})
                    else:
                        writer.write({"kind": "start", "id": case.id})
                        record = measure.measure(case, overload.function, target, settings, device,
                                                 sys.modules.get("flag_gems"))
                        writer.write({"kind": "case", **record})
                        measured += 1
                    progress.advance(case_task)
                progress.remove_task(case_task)
                progress.advance(op_task)
                del found
                if kernel_type == "cuda":
                    torch.cuda.empty_cache()
    finally:
        writer.write({"kind": "end", "wall_s": round(time.perf_counter() - started, 1)})
        writer.close()
    from_screen = f", {taken} taken from the screening" if screen is not None else ""
    progress_console.print(f"{measured} cases measured{from_screen}, {skipped} done in an earlier run; "
                           f"state: {state_path}")
    if shards > 1:
        progress_console.print(f"shard {shard}/{shards} done; join the shards with: python -m torch_fl.flaggems merge "
                               f"--out {out} <state files>")
        return 0
    return _write_table(state.read(state_path), out, args.min_speedup, fallback, command, console, ops)


class _Screen:
    """A screening pass's results: which cases to time alone, and the others' results as they were found."""

    def __init__(self, found: Any, files: int, wall_s: float, min_speedup: float, slack: float) -> None:
        self.found, self.files, self.wall_s = found, files, wall_s
        self.min_speedup, self.slack = min_speedup, slack

    @property
    def environment(self) -> dict[str, Any]:
        return self.found.runs[0]["environment"]

    def settings(self) -> dict[str, Any]:
        return {"files": self.files, "wall_s": round(self.wall_s, 1), "slack": self.slack}

    def carried(self, case_id: str) -> dict[str, Any] | None:
        """The screening's result for ``case_id`` where it stands (None: time the case alone)."""
        from torch_fl.flaggems.calibration import state

        if case_id in self.found.unfinished:
            # A crash or a hang there would happen again here; or the screening was stopped in it.  Either way
            # the case is not measured, and the op keeps the kernel device for it.
            return state.unfinished_record(
                case_id, skipped="not measured: the screening did not finish it (a crash, a hang, or it was stopped)")
        record = self.found.results.get(case_id)
        if record is None:
            return None
        if "skipped" in record or not record["correct"]:
            return record  # a refusal of the kernel device, or a wrong result: contention changes neither
        native, gems = record.get("native_us"), record.get("flaggems_us")
        if native and gems and gems * self.min_speedup < native * self.slack:
            return None  # a candidate
        return {**record, "screened": True}


def _read_screen(paths: list[Path] | None, min_speedup: float, slack: float) -> _Screen | None:
    from torch_fl.flaggems.calibration import state

    if not paths:
        return None
    try:
        found = state.read_many(paths)
    except state.StateError as e:
        raise CalibrationError(f"--screened: {e}") from None
    # The shards ran side by side: the screening took as long as the longest of them.
    return _Screen(found, len(paths), max(state.read(p).wall_s for p in paths), min_speedup, slack)


def _tolerance_text(tolerances: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{name} rtol={t['rtol']:g} atol={t['atol']:g}" for name, t in tolerances.items())


def _overload(op: str) -> Any:
    import torch

    name, _, overload = op.partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def _write_table(found: Any, out: Path, min_speedup: float, fallback: str, command: str, console: Any,
                 ops: list[str] | None = None) -> int:
    from collections import defaultdict

    from rich.table import Table

    from torch_fl.flaggems.calibration import decide, table

    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in found.results.values():
        by_op[record["op"]].append(record)
    decisions = [decide.decide(op, by_op.get(op, []), min_speedup) for op in sorted(set(by_op) | set(ops or []))]
    document = table.write(out, decisions, found, fallback, command)
    summary = Table(title=f"flaggems routes: {out} ({document['cases']['run']} cases, "
                          f"{document['cases']['failed']} wrong or refused)")
    for column in ("operator", "route", "finding", "cases"):
        summary.add_column(column)
    for d in decisions:
        route = "; ".join(f"flaggems if {r}" for r in d.rules) or fallback
        count = sum(b["cases"] for v in d.dtypes.values() for b in v["buckets"].values())
        summary.add_row(d.op, route, d.reason, str(count))
    console.print(summary)
    counts: dict[str, int] = defaultdict(int)
    for d in decisions:
        counts[d.category] += 1
    console.print("routes: " + ", ".join(f"{n} {c}" for c, n in sorted(counts.items())))
    return 0


def run_merge(args: argparse.Namespace, argv: list[str]) -> int:
    import torch_fl  # noqa: F401
    from torch_fl.flaggems import provider
    from torch_fl.flaggems.calibration import state, table

    try:
        found = state.read_many(args.states)
    except state.StateError as e:
        raise CalibrationError(str(e)) from None
    for case_id in sorted(found.unfinished):  # started in a shard, never finished: a crash or a hang
        found.results[case_id] = state.unfinished_record(case_id, correct=False,
                                                         failure="did not finish (crash or hang)")
    environment = found.runs[0]["environment"]
    out = args.out or Path(table.default_name(environment))
    settings = found.runs[0]["settings"]
    min_speedup = args.min_speedup if args.min_speedup is not None else settings["min_speedup"]
    kernel_provider = args.kernel_provider or settings.get("kernel_provider") or provider.fallback_provider()
    command = "python -m torch_fl.flaggems " + shlex.join(argv)
    return _write_table(found, out, min_speedup, kernel_provider, command, _console())
