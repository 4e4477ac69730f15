#!/usr/bin/env python3
"""Lay out a stand-in SDK for a CUDA-compatible vendor platform (ppu) from NVIDIA's own parts.

A CUDA-compatible vendor SDK (the PPU SDK: ``$PPU_SDK/CUDA_SDK/{bin,include,lib64}``) is a CUDA toolkit
plus the runtime libraries its torch fork links.  On NVIDIA hardware those are the CUDA toolkit and the
nvidia-*/cuda-toolkit wheels the CUDA torch wheel requires.  This script puts them in the vendor's
layout, so that the forked-libtorch wheel (the CUDA torch of the release as the "fork") builds, is
verified and runs as it would on the vendor's image:

  OUT/version.txt          "stand-in VERSION": read by the recipe's [sdk] version_file / version_pattern
  OUT/CUDA_SDK/<entry>     -> every top-level entry of the CUDA toolkit (bin/nvcc, include, nvvm, ...)
  OUT/CUDA_SDK/lib64/      the toolkit's lib64 entries and every shared library of the wheels' nvidia/*/lib
                           folders (libcudnn, libnccl, libcublas, ...), as symbolic links
  OUT/lib, OUT/lib64       empty: the vendor driver's folders (the NVIDIA driver stays the system's)

  python3 tools/standin_sdk.py --out DIR [--toolkit CUDA_HOME | --no-toolkit] [--site SITE_PACKAGES ...]
        [--version V] [--requirements-from CUDA_TORCH_WHEEL | --requirement REQ ...]
        [--pip PYTHON] [--find-links DIR ...] [--index-url URL]
  python3 tools/standin_sdk.py --requirements-from CUDA_TORCH_WHEEL --list-requirements

``--requirements-from`` installs the CUDA torch wheel's nvidia-*/cuda-toolkit requirements (its METADATA,
environment markers dropped; ``--requirement`` names them instead) with ``PYTHON -m pip install --target
OUT/.runtime`` first, from ``--find-links`` (offline) or ``--index-url``; ``--site`` names folders where
they are installed already.  ``--no-toolkit`` lays out the runtime libraries alone (a target machine runs
the wheel without a compiler).  Standard library only.
Exit codes: 0 laid out, 2 unusable input (one line: the problem, then the fix).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

#: The CUDA torch wheel's runtime requirements: its nvidia-* packages and cuda-toolkit.
_RUNTIME_REQUIREMENT = re.compile(r"^(nvidia-[\w.-]+|cuda-toolkit)\b", re.IGNORECASE)


class Unusable(Exception):
    """Bad input: one line with the fix (exit 2)."""


def runtime_requirements(cuda_torch_wheel: Path) -> list[str]:
    """The Requires-Dist lines of the wheel that name the CUDA runtime, without environment markers."""
    try:
        with zipfile.ZipFile(cuda_torch_wheel) as zf:
            meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            text = zf.read(meta).decode()
    except (OSError, zipfile.BadZipFile, StopIteration) as exc:
        raise Unusable(f"{cuda_torch_wheel} is not a readable wheel ({exc}) — pass the CUDA torch wheel") from None
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req, _, marker = line.split(":", 1)[1].strip().partition(";")
        if _RUNTIME_REQUIREMENT.match(req.strip()) and "extra" not in marker:
            out.append(req.strip())
    if not out:
        raise Unusable(f"{cuda_torch_wheel.name} requires no nvidia-* packages — pass a CUDA build of torch")
    return out


def install_runtime(python: str, requirements: list[str], target: Path, find_links: list[str],
                    index_url: str | None) -> None:
    links = [a for d in find_links for a in ("--find-links", d)]
    source = ["--index-url", index_url] if index_url else ["--no-index"]
    # Only the named sources: the machine's pip configuration (a wheelhouse of CPU builds) does not apply.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT", "PIP_PROXY")}
    env["PIP_CONFIG_FILE"] = os.devnull
    cmd = [python, "-m", "pip", "install", "--quiet", "--only-binary", ":all:", "--no-compile",
           "--disable-pip-version-check", "--target", str(target), *source, *links, *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        raise Unusable(f"pip cannot install the runtime wheels ({last[0][:200]}) — pass --find-links with them "
                       "or --index-url")


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def runtime_libraries(sites: list[Path]) -> dict[str, Path]:
    """soname-like file name -> path, for every shared library under each site's nvidia/*/lib (and cu13/lib)."""
    found: dict[str, Path] = {}
    for site in sites:
        for lib_dir in sorted((site / "nvidia").glob("**/lib")):
            for path in sorted(lib_dir.iterdir()):
                if ".so" in path.name and path.is_file():
                    found.setdefault(path.name, path.resolve())
    return found


def lay_out(out: Path, toolkit: Path | None, sites: list[Path], version: str) -> int:
    """Write the layout; returns the number of runtime libraries linked into CUDA_SDK/lib64."""
    if toolkit is not None and not (toolkit / "include" / "cuda_runtime.h").is_file():
        raise Unusable(f"no CUDA toolkit at {toolkit} (include/cuda_runtime.h) — pass --toolkit CUDA_HOME "
                       "or --no-toolkit")
    sdk = out / "CUDA_SDK"
    if sdk.exists():
        shutil.rmtree(sdk)
    (sdk / "lib64").mkdir(parents=True)
    if toolkit is not None:
        for entry in sorted(toolkit.iterdir()):
            if entry.name != "lib64":
                _link(entry.resolve(), sdk / entry.name)
        for entry in sorted((toolkit / "lib64").iterdir()) if (toolkit / "lib64").is_dir() else []:
            _link(entry.resolve(), sdk / "lib64" / entry.name)
    libraries = runtime_libraries(sites)
    for name, path in libraries.items():
        _link(path, sdk / "lib64" / name)
    for folder in ("lib", "lib64"):
        (out / folder).mkdir(exist_ok=True)
    (out / "version.txt").write_text(f"stand-in {version}\n"
                                     "CUDA toolkit and NVIDIA runtime wheels in the vendor SDK's layout\n")
    return len(libraries)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/standin_sdk.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="the SDK root to lay out (PPU_SDK)")
    ap.add_argument("--toolkit", type=Path, default=Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda"),
                    help="the CUDA toolkit (default $CUDA_HOME or the standard CUDA location)")
    ap.add_argument("--no-toolkit", action="store_true", help="the runtime libraries only, no toolkit")
    ap.add_argument("--site", type=Path, action="append", default=[],
                    help="a folder holding nvidia/ runtime packages already (repeatable)")
    ap.add_argument("--version", default="1.0.0", help="the SDK version version.txt records (default 1.0.0)")
    ap.add_argument("--requirements-from", type=Path, help="a CUDA torch wheel: install its runtime requirements")
    ap.add_argument("--requirement", action="append", default=[], help="a runtime requirement to install "
                    "(repeatable; instead of --requirements-from)")
    ap.add_argument("--list-requirements", action="store_true",
                    help="print --requirements-from's runtime requirements, one a line, and lay out nothing")
    ap.add_argument("--pip", default=sys.executable, help="the Python whose pip installs them (default this one)")
    ap.add_argument("--find-links", action="append", default=[], help="wheel folders for that install")
    ap.add_argument("--index-url", help="an index to download them from (default: --find-links only)")
    args = ap.parse_args(argv)
    try:
        if not re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", args.version):
            raise Unusable(f"--version {args.version!r} is not X.Y or X.Y.Z — pass e.g. --version 1.0.0")
        if args.list_requirements:
            if args.requirements_from is None:
                raise Unusable("--list-requirements needs --requirements-from — pass the CUDA torch wheel")
            print("\n".join(runtime_requirements(args.requirements_from)))
            return 0
        if args.out is None:
            raise Unusable("no --out given — pass the SDK root to lay out")
        args.out.mkdir(parents=True, exist_ok=True)
        sites = list(args.site)
        for site in sites:
            if not (site / "nvidia").is_dir():
                raise Unusable(f"no nvidia/ folder in {site} — pass the site-packages that holds the nvidia wheels")
        wanted = runtime_requirements(args.requirements_from) if args.requirements_from else args.requirement
        if wanted:
            if not args.find_links and not args.index_url:
                raise Unusable("installing the runtime wheels needs --find-links or --index-url — name where they are")
            target = args.out / ".runtime"
            install_runtime(args.pip, wanted, target, args.find_links, args.index_url)
            sites.append(target)
        n = lay_out(args.out, None if args.no_toolkit else args.toolkit, sites, args.version)
    except Unusable as exc:
        print(f"tools/standin_sdk.py: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tools/standin_sdk.py: cannot write {exc.filename} ({exc.strerror}) — pass a writable --out",
              file=sys.stderr)
        return 2
    toolkit = "no toolkit" if args.no_toolkit else f"toolkit {args.toolkit}"
    print(f"stand-in SDK {args.version} at {args.out}: {toolkit}, {n} runtime libraries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
