"""Describe a Python environment without importing anything from it.

This module is standard-library only and runs in two ways: imported (the environment preflight runs
in) or sent as source to another interpreter (`--python PATH`), which prints one JSON document.
It must keep working on every Python that torch supports, so it avoids newer syntax, and it never
imports torch: torch's version and git revision are read from torch/version.py as text.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import site
import sys
import sysconfig
from importlib import metadata  # Python 3.8+
from typing import Any

PROBE_VERSION = 1
INTERESTING_PREFIXES = ("nvidia-", "nvidia_")
_VERSION_LINE = re.compile(r"""^(\w+)\s*(?::\s*[\w.\[\], |]+)?=\s*['"]([^'"]*)['"]""", re.MULTILINE)


def _dist_record(dist: metadata.Distribution) -> dict[str, str]:
    name = dist.metadata["Name"] or ""
    try:
        location = str(dist.locate_file(""))
    except Exception:  # noqa: BLE001 - a broken distribution must not break the probe
        location = ""
    return {"name": name, "version": dist.version or "", "location": location}


def _torch_version_file(location: str) -> dict[str, str]:
    path = os.path.join(location, "torch", "version.py")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(65536)
    except OSError:
        return {}
    return dict(_VERSION_LINE.findall(text))


def probe(env_names: tuple[str, ...] = ()) -> dict[str, Any]:
    dists = {}
    for dist in metadata.distributions():
        rec = _dist_record(dist)
        key = re.sub(r"[-_.]+", "-", rec["name"]).lower()
        if key and key not in dists:  # first on sys.path wins, as for import
            dists[key] = rec
    torch = dists.get("torch")
    torch_info = None
    if torch is not None:
        vf = _torch_version_file(torch["location"])
        torch_info = {
            "version": torch["version"],
            "location": torch["location"],
            "lib": os.path.join(torch["location"], "torch", "lib"),
            "git_version": vf.get("git_version"),
            "cuda": vf.get("cuda"),
        }
    libc = ""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    site_dirs = []
    with contextlib.suppress(AttributeError):  # old virtualenv's site.py has no getsitepackages
        site_dirs = list(site.getsitepackages())
    return {
        "probe_version": PROBE_VERSION,
        "executable": sys.executable,
        "executable_real": os.path.realpath(sys.executable),
        "implementation": sys.implementation.name,
        "version": list(sys.version_info[:3]),
        "soabi": sysconfig.get_config_var("SOABI") or "",
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or "",
        "gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "debug": bool(sysconfig.get_config_var("Py_DEBUG")),
        "pointer_bits": 64 if sys.maxsize > 2**32 else 32,
        "machine": platform.machine(),
        "sysconfig_platform": sysconfig.get_platform(),
        "libc": libc,
        "prefix": sys.prefix,
        "purelib": sysconfig.get_paths()["purelib"],
        "platlib": sysconfig.get_paths()["platlib"],
        "site_dirs": site_dirs,
        "sys_path": [p for p in sys.path if p],
        "distributions": dists,
        "torch": torch_info,
        "environ": {
            k: os.environ[k] for k in ("LD_LIBRARY_PATH", *env_names) if k in os.environ
        },  # diagnostics
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(probe(tuple(sys.argv[1:]))))
