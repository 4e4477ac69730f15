"""Synthetic inputs for the pipeline: real ELF files compiled with gcc.

* ``compile_library``: a small shared library with a chosen SONAME, DT_NEEDED and
  RPATH, exporting named functions.
* ``make_sdk_tree``: a SYNTHETIC vendor SDK laid out as the platform's recipe
  says (runtime directories under the prefix, the vendor's SONAMEs, a version
  file matching the recipe's pattern).  It is not the vendor's SDK: nothing here
  proves a vendor's hardware works.
* ``make_plugin_wheel``: a stand-in for the built torch_fl wheel, whose plugin
  links the runtime the recipe names (the emulated runtime for host).
* ``make_stand_in_fork``: a STAND-IN vendor fork: the stock torch+cpu core
  libraries copied out of the installed torch, as a vendor's build would ship them.

Everything is generated from the recipes, so a new recipe gets fixtures for free.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from torch_fl_packaging.recipe import Recipe

PY_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
EXT_SUFFIX = f".cpython-{sys.version_info[0]}{sys.version_info[1]}-x86_64-linux-gnu.so"


def _c_ident(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def compile_library(out: Path, soname: str, *, needed: list[Path] = (), rpath: str | None = None,
                    exports: list[str] = (), calls: list[str] = (), extra_flags: list[str] = ()) -> Path:
    """Compile ``out`` (a shared library) whose DT_NEEDED lists ``needed``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(out.suffix + ".c")
    body = [f"int {fn}(void) {{ return {len(fn)}; }}" for fn in exports]
    body += [f"extern int {fn}(void);" for fn in calls]
    body.append(f"int {_c_ident(soname)}_probe(void) {{ return 0"
                + "".join(f" + {fn}()" for fn in calls) + "; }")
    src.write_text("\n".join(body) + "\n")
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src), f"-Wl,-soname,{soname}",
           "-Wl,--no-as-needed"]
    for lib in needed:
        cmd += [f"-L{lib.parent}", f"-l:{lib.name}"]
    if rpath:
        cmd.append(f"-Wl,-rpath,{rpath}")
    cmd += list(extra_flags)
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    return out


def _rel_to_prefix(path: str, prefix: str) -> str:
    assert path.startswith(prefix), (path, prefix)
    return path[len(prefix):].lstrip("/")


def sdk_version_file_text(recipe: Recipe, version: str) -> str:
    """Text of the recipe's version file that its version_pattern reads back as ``version``."""
    assert recipe.sdk and recipe.sdk.version_file
    pattern = recipe.sdk.version_pattern or ""
    for text in (f"{version}\n", f"Version: {version}\n", f"version={version}\n",
                 f"MACA Version: {version}\n",
                 f"toolkit_installed_version=[{version}.0.220:{version}]\n",  # CANN version.cfg
                 f'{{"musa_toolkits": {{"version": "{version}", "git_commit": "0"}}}}\n'):  # MUSA version.json
        if not pattern:
            return text
        m = re.search(pattern, text)
        if m and m.group(1) == version:
            return text
    raise AssertionError(f"no version file text matches {pattern!r}")


def make_sdk_tree(root: Path, recipe: Recipe, version: str) -> dict[str, Path]:
    """Build a synthetic SDK tree for ``recipe`` at ``root``; returns soname -> path."""
    assert recipe.sdk and recipe.sdk.prefix
    libs: dict[str, Path] = {}
    for rd in recipe.runtime:
        d = root / _rel_to_prefix(rd.path, recipe.sdk.prefix)
        for soname in rd.libraries:
            libs[soname] = compile_library(d / soname, soname, exports=[f"{_c_ident(soname)}_init"])
    for entry in recipe.bundle.plugin_rpath + recipe.bundle.rpath:
        if entry.startswith(recipe.sdk.prefix):
            (root / _rel_to_prefix(entry, recipe.sdk.prefix)).mkdir(parents=True, exist_ok=True)
    if recipe.sdk.version_file:
        vf = root / recipe.sdk.version_file
        vf.parent.mkdir(parents=True, exist_ok=True)
        vf.write_text(sdk_version_file_text(recipe, version))
    return libs


def _record(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(path: Path, files: dict[str, Path | bytes], *, version: str, requires: list[str],
                tag: str = f"{PY_TAG}-{PY_TAG}-linux_x86_64") -> Path:
    """A minimal, valid torch_fl wheel holding ``files``."""
    dist_info = f"torch_fl-{version}.dist-info"
    meta = "Metadata-Version: 2.1\nName: torch_fl\nVersion: " + version + "\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    members: dict[str, bytes] = {k: (v.read_bytes() if isinstance(v, Path) else v) for k, v in files.items()}
    members[f"{dist_info}/METADATA"] = meta.encode()
    members[f"{dist_info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: synthetic\nRoot-Is-Purelib: false\nTag: {tag}\n").encode()
    record = [_record(n, d) for n, d in members.items()] + [f"{dist_info}/RECORD,,"]
    members[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if data[:4] == b"\x7fELF" else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path


def make_plugin_wheel(work: Path, recipe: Recipe, *, version: str, requires: list[str],
                      torch_lib: Path, vendor_libs: dict[str, Path] | None = None) -> Path:
    """A stand-in for the built torch_fl wheel of ``recipe`` (plugin + emulated runtime)."""
    build = work / "plugin-build"
    hostrt = compile_library(build / "libflagos_hostrt.so", "libflagos_hostrt.so",
                             exports=["flagosDeviceCount", "flagosMalloc", "flagosFree"])
    needed = [hostrt, torch_lib / "libc10.so"]
    needed += list((vendor_libs or {}).values())
    plugin = compile_library(build / ("_C" + EXT_SUFFIX), "_C" + EXT_SUFFIX, needed=needed,
                             rpath="$ORIGIN/lib:$ORIGIN/../torch/lib", calls=["flagosDeviceCount"])
    files: dict[str, Path | bytes] = {
        "torch_fl/__init__.py": b"# synthetic plugin package\n",
        f"torch_fl/_C{EXT_SUFFIX}": plugin,
        "torch_fl/lib/libflagos_hostrt.so": hostrt,
    }
    name = f"torch_fl-{version}-{PY_TAG}-{PY_TAG}-linux_x86_64.whl"
    return write_wheel(work / "built" / name, files, version=version, requires=requires)


#: The core libtorch set a vendor fork replaces.
FORK_CORE = ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so", "libshm.so",
             "libtorch_global_deps.so", "libgomp.so.1")


def make_stand_in_fork(torch_lib: Path, dest: Path) -> Path:
    """Copy the stock core libraries into ``dest/torch/lib`` as a vendor's fork would ship them.

    Returns the ``torch/lib`` directory (what ``--vendor-torch`` takes).
    """
    lib = dest / "torch" / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    for name in FORK_CORE:
        if (torch_lib / name).is_file():
            shutil.copyfile(torch_lib / name, lib / name)
            os.chmod(lib / name, 0o755)
    shutil.copyfile(torch_lib.parent / "version.py", dest / "torch" / "version.py")
    return lib
