"""Profile-guided builds of the plugin (CMakeLists.txt's FLAGOS_PGO, tools/pgo_workload.py), for real: the plugin
built instrumented, the workload run on it writing the profile, the plugin built again from that profile and
computing what the CPU computes.  The builds share one build folder, as the option requires; each wheel is
installed into a target folder of its own and imported ahead of the environment's torch_fl, which stays as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from support.paths import REPO

WORKLOAD = REPO / "tools" / "pgo_workload.py"


def build(tmp: Path, mode: str, profile: Path, name: str) -> subprocess.CompletedProcess[str]:
    """The plugin built as a wheel with FLAGOS_PGO=mode, in one build folder for every mode, into tmp/name."""
    env = {**os.environ, "FLAGOS_PGO": mode, "FLAGOS_PGO_DIR": str(profile), "SKBUILD_INSTALL_STRIP": "false"}
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation", "--no-deps",
                           f"-Cbuild-dir={tmp / 'build'}", "-w", str(tmp / f"{name}-dist"), str(REPO)],
                          capture_output=True, text=True, timeout=900, check=False, env=env)


def install(tmp: Path, name: str) -> Path:
    target = tmp / name
    wheel, = (tmp / f"{name}-dist").glob("torch_fl-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(target), str(wheel)], check=True, timeout=300)
    return target


def run_with(target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, check=False,
                          cwd=target.parent, env={**os.environ, "PYTHONPATH": str(target)})


def gcov_symbols(target: Path) -> list[str]:
    library, = (target / "torch_fl").glob("_C*.so")
    with library.open("rb") as f:
        symbols = ELFFile(f).get_section_by_name(".dynsym")
        return [s.name for s in symbols.iter_symbols() if s.name.startswith("__gcov")]


@pytest.mark.compile
@pytest.mark.slow
def test_a_profile_from_the_workload_builds_the_plugin_again(tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    assert build(tmp_path, "generate", profile, "instrumented").returncode == 0
    instrumented = install(tmp_path, "instrumented")
    assert gcov_symbols(instrumented), "an instrumented plugin calls gcov's runtime"
    ran = run_with(instrumented, str(WORKLOAD), "--profile-dir", str(profile), "--workloads", "train", "--units", "5")
    assert ran.returncode == 0, ran.stderr
    assert sorted(profile.glob("*.gcda")), "the workload wrote no profile"

    assert build(tmp_path, "use", profile, "optimised").returncode == 0
    optimised = install(tmp_path, "optimised")
    assert not gcov_symbols(optimised)
    check = ("import torch, torch_fl\n"
             "torch.manual_seed(0)\n"
             "w = torch.randn(8, 8, requires_grad=True); x = torch.randn(4, 8)\n"
             "wf = w.detach().to('flagos').requires_grad_()\n"
             "(x @ w).relu().sum().backward(); (x.to('flagos') @ wf).relu().sum().backward()\n"
             "assert torch.equal(wf.grad.cpu(), w.grad), (wf.grad, w.grad)\n"
             "print(torch_fl.__file__)\n")
    computed = run_with(optimised, "-c", check)
    assert computed.returncode == 0, computed.stderr
    assert computed.stdout.strip().startswith(str(optimised)), computed.stdout

    # The build reads the profile: without one of its files, it stops.
    next(profile.glob("*.gcda")).unlink()
    partial = build(tmp_path, "use", profile, "partial")
    assert partial.returncode != 0 and "profile count data file not found" in partial.stderr, partial.stderr[-2000:]


@pytest.mark.compile
def test_pgo_settings_that_cannot_build_are_refused_with_the_fix(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for mode, folder, expected in (("use", empty, "no profile in"), ("gather", empty, "give generate or use"),
                                   ("generate", Path("relative"), "an absolute folder")):
        refused = build(tmp_path, mode, folder, "refused")
        assert refused.returncode != 0
        said = " ".join((refused.stdout + refused.stderr).split())  # CMake wraps its messages
        assert expected in said, (mode, refused.stderr[-2000:])


def test_the_workload_on_a_plugin_built_without_a_profile_says_so(tmp_path: Path) -> None:
    # The environment's own plugin is an ordinary build: the workload runs and writes nothing.
    ran = subprocess.run([sys.executable, str(WORKLOAD), "--profile-dir", str(tmp_path), "--workloads", "train",
                          "--units", "2"], capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert ran.returncode == 1
    assert ran.stderr.count("\n") == 1 and "FLAGOS_PGO=generate" in ran.stderr
    bad = subprocess.run([sys.executable, str(WORKLOAD), "--profile-dir", str(tmp_path), "--units", "0"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "--units" in bad.stderr
