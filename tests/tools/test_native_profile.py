"""tools/native_profile.py on real ELF files: profiles in gperftools' format whose program counters lie in
a shared library built here (functions named as PyTorch's operators, autograd nodes and engine, and
torch_fl's kernel views) and in the C library, with this process's own memory map; `compare` names each
sample's operator, node or engine share, leaf callers and torch_fl functions, per unit.  Bad input is
one line and exit 2."""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

TOOL = REPO / "tools" / "native_profile.py"
FIXTURE = r"""
volatile int sink;
#define BODY { for (int i = 0; i < x; ++i) sink += i * 3; return sink; }
namespace at { namespace _ops { struct add_Tensor { static int call(int x); static int redispatch(int x); }; } }
namespace torch { namespace autograd {
struct Engine { static int evaluate_function(int x); };
namespace generated { struct AddBackward0 { static int apply(int x); }; }
} }
namespace torch_fl { namespace aten { int kernel_view(int x); } }
int at::_ops::add_Tensor::call(int x) BODY
int at::_ops::add_Tensor::redispatch(int x) BODY
int torch::autograd::Engine::evaluate_function(int x) BODY
int torch::autograd::generated::AddBackward0::apply(int x) BODY
int torch_fl::aten::kernel_view(int x) BODY
extern "C" void* address_of(int which) {
  switch (which) {
    case 0: return (void*)&at::_ops::add_Tensor::call;
    case 1: return (void*)&torch::autograd::Engine::evaluate_function;
    case 2: return (void*)&torch::autograd::generated::AddBackward0::apply;
    case 3: return (void*)&torch_fl::aten::kernel_view;
    default: return (void*)&at::_ops::add_Tensor::redispatch;
  }
}
"""
PERIOD_US, UNITS = 4000, 10  # one sample is 400 us per unit


@pytest.fixture(scope="module")
def pcs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    if shutil.which("g++") is None or shutil.which("nm") is None:
        pytest.skip("needs g++ and binutils")
    folder = tmp_path_factory.mktemp("fixture")
    (folder / "fixture.cpp").write_text(FIXTURE)
    lib = folder / "libprofiled_fixture.so"
    subprocess.run(["g++", "-O0", "-shared", "-fPIC", "-o", str(lib), str(folder / "fixture.cpp")], check=True)
    fixture = ctypes.CDLL(str(lib))
    fixture.address_of.restype = ctypes.c_void_p
    # Inside each function (not at its first byte), as a sampled program counter is.
    inside = {name: fixture.address_of(i) + 8
              for i, name in enumerate(("add", "engine", "node", "view", "add_redispatch"))}
    inside["malloc"] = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value + 8
    return inside


def write_profile(path: Path, samples: list[tuple[int, list[int]]], *, trailer: bool = True) -> Path:
    data = struct.pack("<5Q", 0, 3, 0, PERIOD_US, 0)
    for count, stack in samples:
        data += struct.pack(f"<2Q{len(stack)}Q", count, len(stack), *stack)
    if trailer:
        data += struct.pack("<3Q", 0, 1, 0) + Path("/proc/self/maps").read_bytes()
    path.write_bytes(data)
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True,
                          timeout=300, check=False)


def rows(report: str, section: str) -> dict[str, tuple[float, ...]]:
    """{key: its numbers} of one section of the report."""
    lines = report.split(f"== {section}", 1)[1].split("\n== ", 1)[0].splitlines()[1:]
    found = {}
    for line in filter(None, lines):
        tokens = line.split()
        k = 0
        while k < len(tokens) and tokens[k].lstrip("+-").replace(".", "", 1).isdigit():
            k += 1
        found[line.split(maxsplit=k)[k]] = tuple(float(t) for t in tokens[:k])
    return found


def test_compare_attributes_samples_to_operators_nodes_engine_and_callers(pcs: dict[str, int],
                                                                           tmp_path: Path) -> None:
    native = write_profile(tmp_path / "a.prof", [
        (2, [pcs["add"]]),
        (1, [pcs["add_redispatch"], pcs["add"]]),
        (2, [pcs["node"], pcs["engine"]]),
        (1, [pcs["engine"]]),
    ])
    flagos = write_profile(tmp_path / "b.prof", [
        (2, [pcs["view"], pcs["add"]]),
        (2, [pcs["add_redispatch"], pcs["view"], pcs["add"]]),
        (1, [pcs["malloc"], pcs["view"], pcs["add"]]),
        (2, [pcs["node"], pcs["engine"]]),
        (4, [pcs["engine"]]),
    ])
    done = run("compare", native, UNITS, flagos, UNITS)
    assert done.returncode == 0, done.stderr
    by_op = rows(done.stdout, "outermost operator or autograd node")
    assert by_op["op add_Tensor"] == (1200.0, 2000.0, 800.0, 2262.7)  # 2 * 400 * sqrt(3 + 5)
    assert by_op["node AddBackward0"] == (800.0, 800.0, 0.0, 1600.0)
    assert by_op["engine/other"] == (400.0, 1600.0, 1200.0, 1788.9)
    # Of add's 800 us more per unit, 400 lie inside its redispatch (the kernel device's kernel).
    any_op = rows(done.stdout, "operator anywhere on the stack")
    assert any_op["add_Tensor"] == (1200.0, 2000.0, 800.0, 2262.7)
    assert any_op["add_Tensor (redispatch)"] == (400.0, 800.0, 400.0, 1385.6)
    callers = rows(done.stdout, "leaf library <- nearest caller")
    (malloc_row,) = [v for k, v in callers.items() if k.startswith("libc.so")]
    assert malloc_row == (0.0, 400.0, 400.0, 800.0)
    assert [k for k in callers if k.startswith("libc.so")][0].endswith(
        "libprofiled_fixture.so:torch_fl::aten::kernel_view")
    torch_fl = rows(done.stdout, "torch_fl functions in B")
    assert torch_fl["torch_fl::aten::kernel_view"] == (2000.0,)
    assert "A " in done.stdout and "6 samples, 2400 us per unit" in done.stdout


@pytest.mark.parametrize("problem", ["empty", "no trailer", "missing"])
def test_unusable_profile_is_one_line_and_exit_2(pcs: dict[str, int], tmp_path: Path, problem: str) -> None:
    good = write_profile(tmp_path / "good.prof", [(1, [pcs["add"]])])
    bad = tmp_path / "bad.prof"
    if problem == "empty":
        bad.write_bytes(b"")
    elif problem == "no trailer":
        write_profile(bad, [(1, [pcs["add"]])], trailer=False)
    done = run("compare", good, UNITS, bad, UNITS)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "bad.prof" in done.stderr
    assert "Traceback" not in done.stderr


def test_record_without_the_profiler_library_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(TOOL), "record", "flagos", "3", str(tmp_path / "x.prof")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == "native_profile: GPERF_LIB is not set — point it at gperftools' libprofiler.so"


def test_record_of_an_unknown_small_op_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(TOOL), "record", "flagos", "3", str(tmp_path / "x.prof"), "--small-op",
                           "matmul"], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "native_profile: --small-op matmul: not an op of benchmarks/device/gpu_small_ops.py — give one of add, mul, "
        "relu, sum"]
    assert not (tmp_path / "x.prof").exists()


def test_record_with_a_missing_profiler_library_is_one_line_and_exit_2(tmp_path: Path) -> None:
    # Checked before the workload is built: the library itself is loaded only once it is (native_profile.py says why).
    missing = tmp_path / "libprofiler.so"
    done = subprocess.run([sys.executable, str(TOOL), "record", "flagos", "3", str(tmp_path / "x.prof"), "--decode"],
                          env={"PATH": "/usr/bin:/bin", "GPERF_LIB": str(missing)}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"native_profile: GPERF_LIB={missing}: no such file — give gperftools' "
                                   "libprofiler.so")
    assert not (tmp_path / "x.prof").exists()


@pytest.mark.parametrize("stripped", [True, False])
def test_compare_says_when_torch_fl_is_a_stripped_build(tmp_path: Path, stripped: bool) -> None:
    if shutil.which("g++") is None or shutil.which("strip") is None or shutil.which("nm") is None:
        pytest.skip("needs g++ and binutils")
    # The fixture once more, where torch_fl's library lies in an installation.
    folder = tmp_path / "site-packages" / "torch_fl"
    folder.mkdir(parents=True)
    (tmp_path / "fixture.cpp").write_text(FIXTURE)
    lib = folder / f"_C_fixture_{'stripped' if stripped else 'full'}.so"
    subprocess.run(["g++", "-O0", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "fixture.cpp")], check=True)
    if stripped:
        subprocess.run(["strip", "--strip-all", str(lib)], check=True)
    fixture = ctypes.CDLL(str(lib))
    fixture.address_of.restype = ctypes.c_void_p
    profile = write_profile(tmp_path / "b.prof", [(2, [fixture.address_of(3) + 8])])
    done = run("compare", profile, UNITS, profile, UNITS)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stdout.splitlines() if line.startswith("note:")]
    if stripped:
        assert len(notes) == 1 and str(lib) in notes[0] and "SKBUILD_INSTALL_STRIP=false" in notes[0]
    else:
        assert notes == []
        assert "torch_fl::aten::kernel_view" in rows(done.stdout, "torch_fl functions in B")
