"""The loader model against the real loader: for the same files, preflight's verdict must be what
glibc's ld.so does when a fresh process dlopens them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl_preflight.compatibility import Compatibility
from torch_fl_preflight.elf_gates import LoaderModel, expand_origin, run_gates, runtime_directories
from torch_fl_preflight.elf_reader import read_elf_file
from torch_fl_preflight.host_env import probe_host
from torch_fl_preflight.payload import ElfMember
from torch_fl_preflight.report import SubjectReport

import _preflight_builders as B
from support.elf import compile_c

pytestmark = pytest.mark.compile


def _real_loader_accepts(path: Path) -> bool:
    code = f"import ctypes\ntry:\n    ctypes.CDLL({str(path)!r})\nexcept OSError as e:\n    raise SystemExit(str(e))\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                       env={"PATH": "/usr/bin:/bin"})
    return r.returncode == 0


def _gates(paths: list[Path]) -> dict[str, str]:
    host = probe_host(None)
    members = [ElfMember(p.name, str(p), read_elf_file(str(p))) for p in paths]
    report = SubjectReport("t")
    run_gates(LoaderModel(host, members, None), members, None, report)
    return {f.id: f.status.value for f in report.findings}


@pytest.mark.parametrize("runpath", [False, True])
def test_rpath_is_inherited_by_dependencies_runpath_is_not(tmp_path: Path, runpath: bool) -> None:
    """libtop (RPATH or RUNPATH $ORIGIN/sub) -> sub/libmid (no path) -> sub/libleaf.

    glibc searches a loader's DT_RPATH for its dependencies' needs too, but DT_RUNPATH only for
    the object's own needs (ld.so(8)); so libleaf resolves in the first case only."""
    sub = tmp_path / "sub"
    compile_c(sub / "libleaf.so", "int leaf(void){return 1;}\n", soname="libleaf.so")
    compile_c(sub / "libmid.so", "extern int leaf(void);\nint mid(void){return leaf();}\n", soname="libmid.so",
              libs=["libleaf.so"], libdirs=[sub])
    top = compile_c(tmp_path / "libtop.so", "extern int mid(void);\nint top(void){return mid();}\n", soname="libtop.so",
                    libs=["libmid.so"], libdirs=[sub], rpath=["$ORIGIN/sub"], new_dtags=runpath)
    verdict = _gates([top])
    real = _real_loader_accepts(top)
    assert real is (not runpath)
    assert (verdict["elf.needed"] == "pass") is real


def test_missing_symbol_matches_the_loader(tmp_path: Path) -> None:
    """A dependency that lost a symbol: RTLD_NOW (ctypes) refuses it, and so does elf.symbols."""
    compile_c(tmp_path / "libdep.so", "int other(void){return 1;}\n", soname="libdep.so")
    user = compile_c(tmp_path / "libuser.so", "extern int gone(void);\nint u(void){return gone();}\n",
                     soname="libuser.so", libs=["libdep.so"], libdirs=[tmp_path], rpath=["$ORIGIN"])
    verdict = _gates([user])
    assert verdict["elf.needed"] == "pass" and verdict["elf.symbols"] == "fail"
    assert not _real_loader_accepts(user)


def test_weak_undefined_symbols_are_allowed(tmp_path: Path) -> None:
    lib = compile_c(tmp_path / "libweak.so", "extern int maybe(void) __attribute__((weak));\n"
                    "int w(void){return maybe ? maybe() : 0;}\n", soname="libweak.so")
    assert _gates([lib])["elf.symbols"] == "pass"
    assert _real_loader_accepts(lib)


def test_symbol_version_from_the_wrong_library_fails(natives: B.Natives) -> None:
    assert _gates([natives.needs_glibcxx99])["elf.versions"] == "fail"
    assert not _real_loader_accepts(natives.needs_glibcxx99)


def test_expand_origin() -> None:
    assert expand_origin("$ORIGIN/../lib", "/site/torch_fl") == "/site/lib"
    assert expand_origin("${ORIGIN}", "/site/torch_fl") == "/site/torch_fl"
    assert expand_origin("$LIB/x", "/a") is None


def test_runtime_directories_rerooted_under_the_sdk_root() -> None:
    doc = B.manifest_for({}, tags=["cp311-cp311-linux_x86_64"], filename="torch_fl-2.13.0+host-cp311-cp311-"
                         "linux_x86_64.whl", requirements=["torch>=2.13,<2.14"], platform="metax",
                         sdk={"name": "maca", "root": {"env": "MACA_PATH", "default": "/opt/maca"}},
                         runtime={"directories": [
                             {"path": "/opt/maca/lib", "env": "MACA_PATH", "libraries": []},
                             {"path": "/opt/maca/mxgpu_llvm/lib", "env": "MACA_PATH", "libraries": []},
                             {"path": "/usr/local/other", "env": "OTHER_DIR", "libraries": []}]})
    m = Compatibility.from_json(doc)
    assert runtime_directories(m, {}) == ["/opt/maca/lib", "/opt/maca/mxgpu_llvm/lib", "/usr/local/other"]
    assert runtime_directories(m, {"MACA_PATH": "/home/u/maca", "OTHER_DIR": "/x"}) == [
        "/home/u/maca/lib", "/home/u/maca/mxgpu_llvm/lib", "/x"]


def _bar_linked_at_v1(tmp_path: Path, run_version_script: str) -> Path:
    """libuser.so, linked against a libx.so exporting foo and bar at version V1, and finding at run time
    ($ORIGIN/run) a libx.so built with `run_version_script`."""
    libx = "int foo(void){return 1;}\nint bar(void){return 2;}\n"
    link = tmp_path / "link"
    compile_c(link / "libx.so", libx, soname="libx.so", version_script="V1 { global: foo; bar; local: *; };\n")
    compile_c(tmp_path / "run" / "libx.so", libx, soname="libx.so", version_script=run_version_script)
    return compile_c(tmp_path / "libuser.so", "extern int bar(void);\nint u(void){return bar();}\n", soname="libuser.so",
                     libs=["libx.so"], libdirs=[link], rpath=["$ORIGIN/run"])


def test_versioned_reference_binds_to_the_base_version(tmp_path: Path) -> None:
    """libuser was linked against a libx whose bar was bar@V1; the libx it meets at run time still
    defines version V1 but exports bar at the base version. glibc keeps the base version out of
    version matching and binds the reference (dl-version.c), and so do we."""
    user = _bar_linked_at_v1(tmp_path, run_version_script="V1 { global: foo; };\n")
    refs = {(r.name, r.version) for r in read_elf_file(str(user)).undefined}
    assert ("bar", "V1") in refs
    verdict = _gates([user])
    assert verdict["elf.versions"] == "pass"
    assert _real_loader_accepts(user)
    assert verdict["elf.symbols"] == "pass"


def test_versioned_reference_does_not_bind_to_another_version(tmp_path: Path) -> None:
    """bar@V1 at link time, bar@V2 at run time (V1 still defined, for foo): the loader refuses."""
    user = _bar_linked_at_v1(tmp_path, run_version_script="V1 { global: foo; local: *; };\nV2 { global: bar; } V1;\n")
    verdict = _gates([user])
    assert not _real_loader_accepts(user)
    assert verdict["elf.versions"] == "pass" and verdict["elf.symbols"] == "fail"
