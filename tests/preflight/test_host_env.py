"""Tags the target interpreter accepts, computed from what the probe reports (no packaging there)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging import tags as ptags

from torch_fl_preflight.host_env import HostEnv, host_from_probe, probe_host, supported_tags
from torch_fl_preflight.host_probe import probe


def _host(glibc: tuple[int, int] | None, soabi: str = "cpython-311-x86_64-linux-gnu") -> HostEnv:
    data = probe()
    data.update(libc=f"glibc {glibc[0]}.{glibc[1]}" if glibc else "", soabi=soabi, version=[3, 11, 7],
                machine="x86_64", implementation="cpython")
    return host_from_probe(data)


def test_matches_packaging_for_this_interpreter() -> None:
    """Computed remotely from raw facts, the list equals packaging's own for the running interpreter."""
    if sys.implementation.name != "cpython":
        pytest.skip("CPython only")
    mine = supported_tags(probe_host(None))
    theirs = [str(t) for t in ptags.sys_tags()]
    assert set(mine) == set(theirs)


def test_glibc_floor() -> None:
    tags = supported_tags(_host((2, 28)))
    assert "cp311-cp311-manylinux_2_28_x86_64" in tags
    assert "cp311-cp311-manylinux2014_x86_64" in tags
    assert "cp311-cp311-manylinux_2_31_x86_64" not in tags
    assert "cp312-cp312-manylinux_2_28_x86_64" not in tags
    assert "py3-none-any" in tags


def test_free_threaded_abi() -> None:
    data = probe()
    data.update(libc="glibc 2.36", soabi="cpython-313t-x86_64-linux-gnu", version=[3, 13, 1], machine="x86_64",
                implementation="cpython", gil_disabled=True)
    tags = supported_tags(host_from_probe(data))
    assert "cp313-cp313t-manylinux_2_28_x86_64" in tags
    assert "cp313-cp313-manylinux_2_28_x86_64" not in tags


def test_musl_or_unknown_libc_gets_only_linux_tags() -> None:
    tags = supported_tags(_host(None))
    assert "cp311-cp311-linux_x86_64" in tags
    assert not any("manylinux" in t for t in tags)


def test_probe_script_runs_standalone(tmp_path: Path) -> None:
    """The probe is sent as source to another interpreter: it must need nothing but the stdlib."""
    import subprocess

    from torch_fl_preflight import host_probe

    r = subprocess.run([sys.executable, "-I", "-S", "-"], input=Path(host_probe.__file__).read_text(),
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert '"probe_version": 1' in r.stdout
