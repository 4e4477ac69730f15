"""Builds a small C library for LD_PRELOAD, for the tools that count what a child interpreter does.

The counting libraries are written in C and compiled where they run: a prebuilt one would tie the tools to one
libc.  Failures end the tool with one line that names the problem and the fix.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def build_preload_library(folder: Path, name: str, source: str, *, tool: str, optimise: str,
                          failed_hint: str) -> Path:
    """`source` compiled into folder/lib<name>.so; `tool` names the caller in errors, `failed_hint` says what to
    check when the compiler runs but fails."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit(f"{tool}: no C compiler on PATH; install gcc (Debian: apt install gcc)")
    source_file, library = folder / f"{name}.c", folder / f"lib{name}.so"
    source_file.write_text(source)
    built = subprocess.run([compiler, "-shared", "-fPIC", optimise, "-o", str(library), str(source_file)],
                           capture_output=True, text=True)
    if built.returncode != 0:
        last = (built.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{tool}: {compiler} cannot build {library.name}; {failed_hint} ({last})")
    return library
