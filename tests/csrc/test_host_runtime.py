"""The emulated vendor runtime as a vendor library: its ELF identity and its C API.

These load the library shipped in the installed wheel with ctypes, in a fresh
interpreter per configuration, so FLAGOS_HOST_* settings take effect.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from support.elf import read_dynamic

torch_fl = pytest.importorskip("torch_fl")
LIBRARY = Path(torch_fl.__file__).parent / "lib" / "libflagos_hostrt.so"
PLUGIN = next(Path(torch_fl.__file__).parent.glob("_C*.so"))


def _exported(path: Path) -> list[str]:
    """Defined global functions and objects of the dynamic symbol table."""
    with path.open("rb") as f:
        return sorted(
            sym.name for sym in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()
            if sym["st_shndx"] != "SHN_UNDEF" and sym["st_info"]["bind"] == "STB_GLOBAL"
            and sym["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT")
        )


def test_runtime_is_a_separate_library_with_its_own_soname() -> None:
    tags = read_dynamic(LIBRARY)
    assert tags.soname == "libflagos_hostrt.so"
    assert tags.runpath == ("$ORIGIN",) and tags.rpath == ()
    assert not any("torch" in n or "c10" in n for n in tags.needed)  # a vendor runtime knows nothing of torch
    # It exports exactly its C API.
    exported = _exported(LIBRARY)
    assert exported and all(name.startswith("hostrt") for name in exported)


def test_plugin_links_the_runtime_through_an_origin_relative_runpath() -> None:
    tags = read_dynamic(PLUGIN)
    assert "libflagos_hostrt.so" in tags.needed
    assert tags.runpath == ("$ORIGIN/lib", "$ORIGIN/../torch/lib") and tags.rpath == ()
    assert _exported(PLUGIN) == ["PyInit__C"]


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(
        f"""
        import ctypes
        rt = ctypes.CDLL({str(LIBRARY)!r})
        rt.hostrtGetErrorString.restype = ctypes.c_char_p
        rt.hostrtGetConfigError.restype = ctypes.c_char_p
        """
    ) + textwrap.dedent(code)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_")}
    return subprocess.run([sys.executable, "-c", script], env={**clean, **env}, capture_output=True, text=True,
                          check=True, timeout=60)


def test_devices_memory_and_pointer_attributes() -> None:
    out = _run(
        """
        class Attr(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int), ("base", ctypes.c_void_p), ("size", ctypes.c_size_t)]
        n = ctypes.c_int()
        assert rt.hostrtGetDeviceCount(ctypes.byref(n)) == 0
        assert rt.hostrtSetDevice(2) == 0
        p = ctypes.c_void_p()
        assert rt.hostrtMalloc(ctypes.byref(p), 1000) == 0
        a = Attr()
        assert rt.hostrtPointerGetAttributes(ctypes.byref(a), ctypes.c_void_p(p.value + 10)) == 0
        print(n.value, a.type, a.device, a.base == p.value, a.size)
        assert rt.hostrtMalloc(ctypes.byref(ctypes.c_void_p()), 2000) == 2   # over the 2 KiB limit
        print(rt.hostrtGetErrorString(2).decode())
        assert rt.hostrtSetDevice(3) == 3
        src = ctypes.create_string_buffer(b"abc", 3)
        assert rt.hostrtMemcpy(p, src, 3, 1) == 0                       # host to device
        assert rt.hostrtMemcpy(src, ctypes.c_void_p(p.value + 999), 3, 2) == 1   # reads past the allocation
        assert rt.hostrtFree(p) == 0 and rt.hostrtFree(p) == 1          # double free is refused
        """,
        FLAGOS_HOST_DEVICES="3",
        FLAGOS_HOST_MEMORY_LIMIT="2K",
    ).stdout.splitlines()
    assert out == ["3 2 2 True 1000", "out of device memory"]


def test_events_measure_time_and_streams_are_usable() -> None:
    out = _run(
        """
        import time
        s, e1, e2 = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        assert rt.hostrtStreamCreate(ctypes.byref(s)) == 0
        assert rt.hostrtEventCreateWithFlags(ctypes.byref(e1), 0) == 0
        assert rt.hostrtEventCreateWithFlags(ctypes.byref(e2), 0) == 0
        rt.hostrtEventRecord(e1, s); time.sleep(0.02); rt.hostrtEventRecord(e2, s)
        ms = ctypes.c_float()
        assert rt.hostrtEventElapsedTime(ctypes.byref(ms), e1, e2) == 0
        assert rt.hostrtStreamWaitEvent(s, e2) == 0 and rt.hostrtStreamQuery(s) == 0
        print(ms.value >= 15.0)
        """
    ).stdout.split()
    assert out == ["True"]


def test_malformed_configuration_is_reported_by_every_call() -> None:
    out = _run(
        """
        n = ctypes.c_int(-1)
        print(rt.hostrtGetDeviceCount(ctypes.byref(n)), n.value)
        print(rt.hostrtGetConfigError().decode())
        """,
        FLAGOS_HOST_DEVICES="many",
    ).stdout.splitlines()
    assert out[0] == "5 0"
    assert out[1].startswith("FLAGOS_HOST_DEVICES='many' is not a device count")
