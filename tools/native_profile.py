"""Native CPU profiles of one workload, flagos against native CUDA: where the extra host time goes.

torch.profiler sees operators; it does not see the autograd engine's own work between nodes, Python
frames, allocator calls inside kernels, or libraries such as cuBLASLt doing host work.  gperftools'
CPU profiler samples every thread of the process (autograd's device thread included) with native
stacks, so two profiles of the same steps, one per device, say where flagos spends host time that
native CUDA does not.

    python tools/native_profile.py record DEVICE STEPS OUT.prof [--forward]   # the training step of
        benchmarks/device/gpu_transformer.py on DEVICE (flagos or cuda), profiled over STEPS steps;
        --forward: its forward pass alone, under torch.no_grad (no autograd engine, one thread);
        --small-op OP: instead, STEPS thousand calls of one of benchmarks/device/gpu_small_ops.py's ops;
        --decode: instead, STEPS eager greedy generations of benchmarks/device/gpu_decode.py (64 tokens each,
        under torch.inference_mode); record it on cuda with and without torch_fl loaded
        (TORCH_DEVICE_BACKEND_AUTOLOAD=0) to see what the plugin's presence costs native code;
        --compiled: the training step of benchmarks/device/gpu_compiled_transformer.py (the model under
        torch.compile, inductor's default mode), compiled in the untimed steps before the profile starts
    python tools/native_profile.py compare A.prof UNITS_A B.prof UNITS_B [--top N]

`record` needs gperftools' profiler library: GPERF_LIB=path/to/libprofiler.so (Debian's
libgoogle-perftools4 has it); CPUPROFILE_FREQUENCY sets the sampling rate (250 suits a 250 Hz
kernel, whose interval timer fires no faster).  `compare` symbolises both profiles with binutils
(nm, readelf) on the machine that recorded them -- the libraries must be the ones the process
mapped -- and prints microseconds per unit (a step) of A and B, their difference, and twice the
difference's sampling error (each row's sample count is a Poisson count; a smaller difference is one the
sampling alone could make):

* per outermost operator (`at::_ops::<op>::call`) or autograd node (`<Node>::apply`) on the stack,
  inclusive, with the rest as "engine/other" (autograd engine frames) or "python/other";
* per operator anywhere on the stack, inclusive, and apart from it the share inside its redispatch
  (`at::_ops::<op>::redispatch`), which on flagos is the kernel device's own kernel: extra time there is
  the kernel's code running slower, not work the device layer adds around it;
* per leaf library and nearest calling function outside it (what malloc, the driver or c10 was
  called from);
* per torch_fl function, inclusive, in B;
* per library and per function, self time.

pprof reads these profiles too, but it is a Go program the GPU lab machines do not have; the format
(gperftools' "legacy CPU profile": a five-word header, then count/depth/PCs records, then the
process's /proc/self/maps) is small enough to read here.

Exit codes: 0 ok, 2 unusable input.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import ctypes
import math
import os
import re
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

WORD = 8
OP = re.compile(r"at::_ops::(\w+)::call\(")
ANY_OP = re.compile(r"at::_ops::(\w+)::(call|redispatch)\(")
NODE = re.compile(r"torch::autograd::(?:generated::)?(\w+)::apply\(")
# Libraries whose functions are leaves worth attributing to a caller outside them.
LEAF_LIBRARIES = ("libc.so", "libstdc++", "ld-linux", "libc10.so", "libc10_cuda", "libcuda.so", "libcudart")


class UnusableInput(Exception):
    """A profile or library that cannot be read: the message names it and the fix."""


@dataclass
class Profile:
    period_us: int
    samples: list[tuple[int, tuple[int, ...]]]
    maps: str


def read_profile(path: Path) -> Profile:
    """A gperftools CPU profile: header [0, 3, 0, period_us, 0], records [count, depth, pc...], the
    trailer record [0, 1, 0], then the text of /proc/self/maps."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read it ({exc.strerror}) — give a profile `record` wrote") from exc
    if len(data) < 5 * WORD or struct.unpack_from("<2Q", data, 0) != (0, 3):
        raise UnusableInput(f"{path}: not a gperftools CPU profile (empty, or no profile header) — "
                            "check that the profiled process called ProfilerStop, and give its file")
    period = struct.unpack_from("<Q", data, 3 * WORD)[0]
    offset, samples = 5 * WORD, []
    while offset + 2 * WORD <= len(data):
        count, depth = struct.unpack_from("<2Q", data, offset)
        offset += 2 * WORD
        pcs = struct.unpack_from(f"<{depth}Q", data, offset)
        offset += depth * WORD
        if count == 0 and depth == 1 and pcs[0] == 0:
            return Profile(period, samples, data[offset:].decode(errors="replace"))
        samples.append((count, pcs))
    raise UnusableInput(f"{path}: the profile ends without its trailer (cut short) — record it again")


def _functions_in(path: str, *, dynamic: bool) -> list[tuple[int, str]]:
    """(address, demangled name) of the functions nm lists in `path`'s symbol table, or its dynamic one."""
    options = ["-C", "-D", "--defined-only"] if dynamic else ["-C", "--defined-only"]
    out = subprocess.run(["nm", *options, path], capture_output=True, text=True, check=False).stdout
    pairs = []
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tTwWiu" and parts[0]:
            try:
                pairs.append((int(parts[0], 16), parts[2]))
            except ValueError:
                continue
    return pairs


@dataclass
class Library:
    """A mapped library's function symbols and how its file offsets map to its addresses."""

    addresses: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    loads: list[tuple[int, int]] = field(default_factory=list)  # (file offset, virtual address) of PT_LOADs
    stripped: bool = False  # no symbol table: only exported functions have names

    @classmethod
    def read(cls, path: str) -> Library:
        lib = cls()
        symbol_table = _functions_in(path, dynamic=False)
        lib.stripped = not symbol_table
        pairs = sorted(symbol_table + _functions_in(path, dynamic=True))
        lib.addresses = [a for a, _ in pairs]
        lib.names = [n for _, n in pairs]
        out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, check=False).stdout
        lib.loads = [(int(p[1], 16), int(p[2], 16)) for p in (line.split() for line in out.splitlines())
                     if p and p[0] == "LOAD"]
        return lib

    def name_at(self, file_offset: int) -> str:
        address = file_offset
        for offset, vaddr in self.loads:
            if offset <= file_offset:
                address = file_offset - offset + vaddr
        i = bisect.bisect_right(self.addresses, address) - 1
        return self.names[i] if i >= 0 else "?"


class Symbolizer:
    """'library:function' for a program counter, from the profiled process's maps."""

    def __init__(self, maps: str, libraries: dict[str, Library]) -> None:
        self.regions = []
        for line in maps.splitlines():
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \d+\s*(.*)", line)
            if m and "x" in m.group(3) and m.group(5).startswith("/"):
                self.regions.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(4), 16), m.group(5)))
        self.regions.sort()
        self.starts = [r[0] for r in self.regions]
        self.libraries = libraries
        self.cache: dict[int, str] = {}

    def __call__(self, pc: int) -> str:
        if pc not in self.cache:
            i = bisect.bisect_right(self.starts, pc) - 1
            name = "?"
            if i >= 0 and self.regions[i][0] <= pc < self.regions[i][1]:
                low, _, offset, path = self.regions[i]
                if path not in self.libraries:
                    self.libraries[path] = Library.read(path)
                name = f"{os.path.basename(path)}:{self.libraries[path].name_at(pc - low + offset)[:160]}"
            self.cache[pc] = name
        return self.cache[pc]


def _function(name: str) -> str:
    return re.sub(r"\(.*", "", name)


@dataclass
class Tables:
    period_us: int
    total: int
    by_operator: collections.Counter
    any_operator: collections.Counter
    leaf_callers: collections.Counter
    torch_fl: collections.Counter
    library_self: collections.Counter
    function_self: collections.Counter


def tabulate(profile: Profile, libraries: dict[str, Library]) -> Tables:
    symbol = Symbolizer(profile.maps, libraries)
    t = Tables(profile.period_us, 0, *(collections.Counter() for _ in range(6)))
    for count, pcs in profile.samples:
        t.total += count
        # A return address points after its call: step back one byte to name the caller's line.
        names = [symbol(pc - (1 if k else 0)) for k, pc in enumerate(pcs)]  # leaf first
        outer = next((("op " if m.re is OP else "node ") + m.group(1)
                      for m in (OP.search(n) or NODE.search(n) for n in reversed(names)) if m), None)
        if outer is None:
            outer = "engine/other" if any("autograd::Engine::" in n for n in names) else "python/other"
        t.by_operator[outer] += count
        for m in {m.groups() for m in map(ANY_OP.search, names) if m}:
            t.any_operator[m[0] if m[1] == "call" else f"{m[0]} (redispatch)"] += count
        for name in {n for n in names if "torch_fl::" in n}:
            t.torch_fl[_function(name.split(":", 1)[1])[:120]] += count
        leaf = names[0]
        t.library_self[leaf.split(":", 1)[0]] += count
        t.function_self[leaf] += count
        if leaf.startswith(LEAF_LIBRARIES):
            caller = next((n for n in names[1:] if not n.startswith(LEAF_LIBRARIES)), "?")
            t.leaf_callers[f"{leaf.split(':', 1)[0]} <- {_function(caller)[:120]}"] += count
    return t


def compare(a: Path, units_a: float, b: Path, units_b: float, top: int) -> str:
    libraries: dict[str, Library] = {}
    ta, tb = tabulate(read_profile(a), libraries), tabulate(read_profile(b), libraries)
    ka, kb = ta.period_us / units_a, tb.period_us / units_b
    lines = [f"A {a}: {ta.total} samples, {ta.total * ka:.0f} us per unit",
             f"B {b}: {tb.total} samples, {tb.total * kb:.0f} us per unit",
             f"sampling period {ta.period_us} us (A), {tb.period_us} us (B)"]
    # A stripped torch_fl names its samples after the nearest exported symbol: say so before anyone reads them.
    lines += [f"note: {path} has no symbol table (a stripped build), so torch_fl's own functions go unnamed and its "
              "samples carry the nearest exported name; build it with SKBUILD_INSTALL_STRIP=false"
              for path, library in sorted(libraries.items()) if library.stripped and "torch_fl" in Path(path).parts]
    for title, xa, xb in (("outermost operator or autograd node, inclusive", ta.by_operator, tb.by_operator),
                          ("operator anywhere on the stack, inclusive", ta.any_operator, tb.any_operator),
                          ("leaf library <- nearest caller outside it", ta.leaf_callers, tb.leaf_callers),
                          ("library, self", ta.library_self, tb.library_self),
                          ("function, self", ta.function_self, tb.function_self)):
        lines += ["", f"== {title}: us per unit: A, B, B-A, twice the sampling error of B-A (largest |B-A| first)"]
        for key in sorted(set(xa) | set(xb), key=lambda k: -abs(xb[k] * kb - xa[k] * ka))[:top]:
            # A row's sample count is a Poisson count: its variance is the count itself.  A difference smaller
            # than twice its standard error is one the sampling alone could make.
            us_a, us_b = xa[key] * ka, xb[key] * kb
            error = 2 * math.sqrt(us_a * ka + us_b * kb)
            lines.append(f"{us_a:9.1f} {us_b:9.1f} {us_b - us_a:+9.1f} {error:8.1f}  {key}")
    lines += ["", "== torch_fl functions in B, inclusive: us per unit"]
    lines += [f"{v * kb:9.1f}  {k}" for k, v in tb.torch_fl.most_common(top)]
    return "\n".join(lines)


def _small_op_calls(device: str, name: str) -> Callable[[], float]:
    """A thousand calls of gpu_small_ops' op `name` on `device`, 1024 elements, timed in ms (units of 1000
    calls: compare then prints microseconds per thousand calls, nanoseconds per call)."""
    import torch
    from gpu_small_ops import OPS

    op = OPS[name]
    a, b = torch.randn(1024, device=device), torch.randn(1024, device=device)

    def thousand() -> float:
        start = time.perf_counter()
        for _ in range(1000):
            op(a, b)
        torch.accelerator.synchronize()
        return (time.perf_counter() - start) * 1e3

    return thousand


def _eager_generations(device: str) -> Callable[[], float]:
    """One eager greedy generation of gpu_decode's model per call, in ms."""
    import torch
    from gpu_decode import Decoder

    decoder = Decoder(device)

    def generation() -> float:
        with torch.inference_mode():
            start = time.perf_counter()
            decoder.eager()
            torch.accelerator.synchronize()
        return (time.perf_counter() - start) * 1e3

    return generation


def record(device: str, steps: int, out: Path, forward: bool = False, small_op: str | None = None,
           decode: bool = False, compiled: bool = False) -> None:
    """Profiles `steps` training steps of gpu_transformer's model on `device` (`forward`: its forward pass
    alone, under torch.no_grad; `small_op`: `steps` thousand calls of that small op; `decode`: `steps` eager
    generations of gpu_decode's model; `compiled`: steps of the model compiled by inductor), after five
    untimed ones."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "device"))
    if small_op is not None:
        from gpu_small_ops import OPS

        if small_op not in OPS:
            raise UnusableInput(f"--small-op {small_op}: not an op of benchmarks/device/gpu_small_ops.py — give "
                                f"one of {', '.join(OPS)}")
    library = os.environ.get("GPERF_LIB")
    if not library:
        raise UnusableInput("GPERF_LIB is not set — point it at gperftools' libprofiler.so")
    if not os.path.isfile(library):
        raise UnusableInput(f"GPERF_LIB={library}: no such file — give gperftools' libprofiler.so")
    import torch

    if device == "flagos":
        import torch_fl  # noqa: F401
    if small_op is not None:
        step = _small_op_calls(device, small_op)
    elif decode:
        step = _eager_generations(device)
    elif compiled:
        from gpu_compiled_transformer import CompiledTrainer

        step = CompiledTrainer(device).step
    else:
        from gpu_transformer import Trainer

        trainer = Trainer(device)
        step = trainer.forward if forward else trainer.step
    # Loaded once the workload is built: with the profiler's libunwind in the process, a C++ exception that
    # an import throws and catches (transformers probing optional kernels) aborted the process.
    try:
        profiler = ctypes.CDLL(library)
    except OSError as exc:
        raise UnusableInput(f"GPERF_LIB={library}: cannot load it ({exc}) — give gperftools' libprofiler.so, "
                            "with its libunwind on LD_LIBRARY_PATH") from exc
    for _ in range(5):
        step()
    torch.accelerator.synchronize()
    profiler.ProfilerStart(str(out).encode())
    ms = sorted(step() for _ in range(steps))
    profiler.ProfilerStop()
    what = f"thousand {small_op} calls" if small_op else "generation" if decode else "forward pass" if forward else "step"
    print(f"{device}: median {what} {ms[len(ms) // 2]:.2f} ms over {steps} profiled ones -> {out}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="profile gpu_transformer's training step on one device")
    r.add_argument("device", choices=("flagos", "cuda"))
    r.add_argument("steps", type=int)
    r.add_argument("out", type=Path)
    workload = r.add_mutually_exclusive_group()
    workload.add_argument("--forward", action="store_true", help="the forward pass alone, under torch.no_grad")
    workload.add_argument("--small-op", metavar="OP", help="STEPS thousand calls of this gpu_small_ops op instead")
    workload.add_argument("--decode", action="store_true", help="STEPS eager generations of gpu_decode's model instead")
    workload.add_argument("--compiled", action="store_true",
                          help="the training step with the model under torch.compile")
    c = sub.add_parser("compare", help="where B spends host time that A does not, per unit")
    c.add_argument("a", type=Path)
    c.add_argument("units_a", type=float)
    c.add_argument("b", type=Path)
    c.add_argument("units_b", type=float)
    c.add_argument("--top", type=int, default=60)
    args = p.parse_args(argv)
    try:
        if args.command == "record":
            record(args.device, args.steps, args.out, args.forward, args.small_op, args.decode, args.compiled)
        else:
            if args.units_a <= 0 or args.units_b <= 0:
                raise UnusableInput("UNITS must be positive: the steps (or calls) each profile covers")
            print(compare(args.a, args.units_a, args.b, args.units_b, args.top))
    except UnusableInput as exc:
        print(f"native_profile: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
