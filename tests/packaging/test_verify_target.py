"""verify against a target made from the wheel's requirements, on small real wheels built here.

The tested wheel is a cuda-assets wheel in miniature: its bundled library needs
``libfltrt.so.1``, which only its requirement ``fl-test-runtime`` carries (as the
nvidia-* wheels carry the CUDA runtime), and ``libfakedrv.so.1``, which the
manifest names a system library (as libcuda.so.1, the driver).  Both wheels
and both libraries are compiled here; pip installs the requirement from a
--find-links directory, so nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from packaging.version import Version
from support.elf import compile_c
from support.wheels import PY_TAG, write_wheel
from torch_fl_packaging.torch_info import installed_torch
from torch_fl_packaging.elf_read import read_elf
from torch_fl_packaging.errors import EXIT_BAD_INPUT, TargetError, VerifyError
from torch_fl_packaging.manifest import validate_manifest
from torch_fl_packaging.verify import prove
from torch_fl_packaging.verify_target import TargetSource
from torch_fl_preflight import checker
from torch_fl_preflight.host_env import HostProbe

pytestmark = pytest.mark.compile

TAG = f"{PY_TAG}-{PY_TAG}-linux_x86_64"
LIB = "torch_fl/cuda/libflcuda.so"


def _torch_pin() -> str:
    return f"torch=={Version(installed_torch()[0].version).base_version}"


def _runtime_wheel(tmp: Path) -> Path:
    """fl-test-runtime 1.0: fl_test_runtime/lib/libfltrt.so.1, the way nvidia-* wheels lay out theirs."""
    lib = compile_c(tmp / "rt" / "libfltrt.so.1", "int fltrt_init(void) { return 7; }\n", soname="libfltrt.so.1")
    return write_wheel(tmp / "links" / f"fl_test_runtime-1.0-py3-none-{TAG.rsplit('-', 1)[1]}.whl",
                       {"fl_test_runtime/__init__.py": b"", "fl_test_runtime/lib/libfltrt.so.1": lib},
                       name="fl_test_runtime", version="1.0", tag=f"py3-none-{TAG.rsplit('-', 1)[1]}")


def _tested_wheel(tmp: Path, requires: list[str]) -> Path:
    """torch_fl 2.13.0+cuda13.0 whose bundled library needs the runtime and the (absent) driver."""
    rt = tmp / "rt" / "libfltrt.so.1"
    drv = compile_c(tmp / "drv" / "libfakedrv.so.1", "int fakedrv_init(void) { return 1; }\n",
                    soname="libfakedrv.so.1")
    lib = compile_c(tmp / "build" / "libflcuda.so",
                    "extern int fltrt_init(void);\nextern int fakedrv_init(void);\n"
                    "int flcuda_probe(void) { return fltrt_init() + fakedrv_init(); }\n",
                    soname="libflcuda.so", libs=[rt.name, drv.name], libdirs=[rt.parent, drv.parent],
                    rpath=["$ORIGIN", "$ORIGIN/../../fl_test_runtime/lib"], as_needed=False)
    info = read_elf(lib)
    data = lib.read_bytes()
    version = "2.13.0+cuda13.0"
    filename = f"torch_fl-{version}-{TAG}.whl"
    torch = installed_torch()[0]
    manifest = {
        "schema_version": 1, "platform": "cuda",
        "wheel": {"name": "torch_fl", "version": version, "tags": [TAG], "filename": filename},
        "bundle": {"kind": "cuda-assets", "directory": "torch_fl/cuda"},
        "torch": {"version": torch.version, "cxx11_abi": bool(torch.cxx11_abi), "requirement": _torch_pin()},
        "sdk": {"name": "cuda", "version": "13.0"},
        "requirements": requires,
        "floors": {"glibc": None, "glibcxx": None},
        "runtime": {"directories": [], "system_libraries": ["libfakedrv.so.1"]},
        "elf": [{"path": LIB, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "soname": info.soname,
                 "needed": list(info.needed), "rpath": list(info.rpath), "runpath": list(info.runpath),
                 "origin": "bundled"}],
    }
    validate_manifest(manifest)
    return write_wheel(tmp / "dist" / filename,
                       {"torch_fl/__init__.py": b"", LIB: data,
                        "torch_fl/compatibility.json": json.dumps(manifest).encode()},
                       version=version, tag=TAG, requires=requires)


@pytest.fixture
def links(tmp_path: Path) -> Path:
    return _runtime_wheel(tmp_path).parent


def test_requirement_supplies_the_library_the_gate_needs(tmp_path: Path, links: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    wheel = _tested_wheel(tmp_path, [_torch_pin(), "fl-test-runtime==1.0"])
    verified = prove(wheel, platform="cuda", release=False, python=sys.executable, work=tmp_path / "work",
                     source=TargetSource(find_links=(str(links),)))
    assert verified.preflight == "passed" and verified.checks["fail"] == 0
    assert verified.target is not None
    assert verified.target["installed"] == ["fl-test-runtime==1.0"]  # torch was already satisfied
    assert not verified.target["downloaded"]
    # pip put the runtime where a real install puts it, in the throw-away prefix
    assert any((tmp_path / "work" / "target").glob("lib*/python*/site-packages/fl_test_runtime/lib/libfltrt.so.1"))
    # the driver is the target machine's: a host requirement, not a failed gate
    assert verified.host_requirements == ("libfakedrv.so.1",)


def test_without_the_requirement_the_gate_fails(tmp_path: Path, links: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    wheel = _tested_wheel(tmp_path, [_torch_pin()])  # nothing requires fl-test-runtime
    with pytest.raises(VerifyError) as err:
        prove(wheel, platform="cuda", release=False, python=sys.executable, work=tmp_path / "work",
              source=TargetSource(find_links=(str(links),)))
    assert "elf.needed" in str(err.value.value) and "elf.symbols" in str(err.value.value)


def test_on_the_target_the_system_library_is_checked(tmp_path: Path, links: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same environment checked as the target itself (no deferral): the absent driver fails."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    wheel = _tested_wheel(tmp_path, [_torch_pin(), "fl-test-runtime==1.0"])
    prove(wheel, platform="cuda", release=False, python=sys.executable, work=tmp_path / "work",
          source=TargetSource(find_links=(str(links),)))
    site = next((tmp_path / "work" / "target").glob("lib*/python*/site-packages"))
    host = HostProbe(sys.executable, {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}).result()
    report = checker.check_wheel(str(wheel), lambda: host, checker.Options())
    needed = next(f for f in report.findings if f.id == "elf.needed")
    assert needed.status.value == "fail" and "libfakedrv.so.1" in " ".join(needed.details)
    assert "driver" in needed.fix


def test_missing_from_find_links_without_an_index_is_unusable_input(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _runtime_wheel(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    wheel = _tested_wheel(tmp_path, [_torch_pin(), "fl-test-runtime==1.0"])
    with pytest.raises(TargetError) as err:
        prove(wheel, platform="cuda", release=False, python=sys.executable, work=tmp_path / "work",
              source=TargetSource(find_links=(str(empty),)))
    assert err.value.exit_code == EXIT_BAD_INPUT and "--find-links" in err.value.problem


def test_cache_is_filled_once_from_an_index(tmp_path: Path, links: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index (a file:// PEP 503 tree) fills the cache the first time; the second build reads only the cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    index = tmp_path / "index"
    (index / "fl-test-runtime").mkdir(parents=True)
    whl = next(links.glob("*.whl"))
    (index / "fl-test-runtime" / whl.name).write_bytes(whl.read_bytes())
    (index / "fl-test-runtime" / "index.html").write_text(f'<a href="{whl.name}">{whl.name}</a>\n')
    wheel = _tested_wheel(tmp_path, [_torch_pin(), "fl-test-runtime==1.0"])
    first = prove(wheel, platform="cuda", release=False, python=sys.executable, work=tmp_path / "w1",
                  source=TargetSource(default_index=index.as_uri()))
    cache = tmp_path / "cache" / "torch_fl" / "requirements"
    assert first.target is not None and first.target["downloaded"] and (cache / whl.name).is_file()
    assert first.target["cache_bytes"] == whl.stat().st_size
    (index / "fl-test-runtime" / whl.name).unlink()  # the index is gone: only the cache can serve
    second = prove(wheel, platform="cuda", release=False, python=sys.executable, work=tmp_path / "w2",
                   source=TargetSource(default_index=index.as_uri()))
    assert second.target is not None and not second.target["downloaded"] and second.preflight == "passed"
