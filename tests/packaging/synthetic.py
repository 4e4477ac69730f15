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

import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import support.wheels
from support.elf import compile_c
from support.wheels import PY_TAG
from torch_fl_packaging.recipe import Recipe

EXT_SUFFIX = f".cpython-{sys.version_info[0]}{sys.version_info[1]}-x86_64-linux-gnu.so"


def _c_ident(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def compile_library(out: Path, soname: str, *, needed: Sequence[Path] = (), rpath: str | None = None,
                    exports: Sequence[str] = (), calls: Sequence[str] = (), extra_flags: Sequence[str] = ()) -> Path:
    """Compile ``out`` (a shared library) whose DT_NEEDED lists ``needed``, used or not."""
    body = [f"int {fn}(void) {{ return {len(fn)}; }}" for fn in exports]
    body += [f"extern int {fn}(void);" for fn in calls]
    body.append(f"int {_c_ident(soname)}_probe(void) {{ return 0"
                + "".join(f" + {fn}()" for fn in calls) + "; }")
    compile_c(out, "\n".join(body) + "\n", soname=soname, libs=[lib.name for lib in needed],
              libdirs=list(dict.fromkeys(lib.parent for lib in needed)), rpath=[rpath] if rpath else (),
              new_dtags=None, as_needed=False, opt="-O1", extra=extra_flags)
    out.with_suffix(out.suffix + ".c").unlink()
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


def write_wheel(path: Path, files: dict[str, Path | bytes], *, version: str, requires: list[str],
                tag: str = f"{PY_TAG}-{PY_TAG}-linux_x86_64") -> Path:
    """A minimal, valid torch_fl wheel holding ``files``; an ``extra == "X"`` marker among ``requires``
    declares ``Provides-Extra: X``, as a build backend writes it."""
    extras = dict.fromkeys(m.group(1) for r in requires if (m := re.search(r'extra == "([^"]+)"', r)))
    metadata = support.wheels.metadata_text("torch_fl", version, requires,
                                            "".join(f"Provides-Extra: {e}\n" for e in extras))
    return support.wheels.write_wheel(path, files, version=version, tag=tag, requires=requires,
                                      metadata=metadata, generator="synthetic")


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
