"""The platform table for CMake: a recipe's device facts and plugin RPATH as a generated CMake file.

CMakeLists.txt runs ``python -m torch_fl_packaging.cmake_config --platform P --source DIR --out FILE``
at configure time and includes FILE, so that ``torch-fl-build`` and a plain ``pip install .`` (the
PEP 517 path, which only sets ``FLAGOS_PLATFORM``) both build from the recipe and CMake keeps no list
of runtimes or RPATHs of its own.  Standard library only, like the recipe loader: it runs inside the
build backend, with ``packaging/src`` and ``preflight/src`` of the source tree on ``PYTHONPATH``.

The same values reach torch_fl through ``torch_fl/_build_config.py.in`` (``@FLAGOS_RUNTIME@``, ...).

Exit codes: 0 written, 2 the recipe does not load (one line on stderr: what is wrong, the fix).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .errors import RecipeError
from .recipe import Recipe, load_recipe

__all__ = ["cmake_values", "main", "render"]


def _follow_sdk_env(path: str, recipe: Recipe) -> str:
    """``path`` under the SDK's default prefix, moved to where ``[sdk] env`` points when it is set."""
    sdk = recipe.sdk
    if sdk is None or not sdk.prefix or not sdk.env:
        return path
    moved = os.environ.get(sdk.env)
    prefix = sdk.prefix.rstrip("/")
    if moved and (path == prefix or path.startswith(prefix + "/")):
        return moved.rstrip("/") + path[len(prefix):]
    return path


def cmake_values(recipe: Recipe) -> dict[str, str]:
    """The CMake variables of ``recipe``: name -> value (lists joined with ``;``, CMake's list separator)."""
    d = recipe.device
    toolkit = _follow_sdk_env(d.cuda_toolkit, recipe) if d.cuda_toolkit else ""
    return {
        "FLAGOS_RUNTIME": d.runtime,
        "FLAGOS_KERNEL_DEVICE": d.kernel_device,
        "FLAGOS_DISTRIBUTED": d.distributed,
        "FLAGOS_COMPILE": d.compile,
        "FLAGOS_FP8": d.fp8,
        "FLAGOS_PLUGIN_RPATH": ";".join(recipe.bundle.plugin_rpath),
        "FLAGOS_CUDA_TOOLKIT_ROOT": toolkit,
    }


def _quote(value: str) -> str:
    # A CMake quoted argument: backslash and double quote escaped; "$ORIGIN" is no variable reference
    # (only ${...}, $ENV{...} and $CACHE{...} are), so it stays literal.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(recipe: Recipe) -> str:
    lines = [f"# Generated from bundlers/{recipe.platform}.toml by torch_fl_packaging.cmake_config; do not edit."]
    lines += [f"set({name} {_quote(value)})" for name, value in cmake_values(recipe).items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_fl_packaging.cmake_config",
                                     description="Write a platform recipe's facts as a CMake file.")
    parser.add_argument("--platform", required=True, help="the recipe in bundlers/")
    parser.add_argument("--source", type=Path, required=True, help="the torch_fl source tree")
    parser.add_argument("--out", type=Path, required=True, help="the CMake file to write")
    args = parser.parse_args(argv)
    try:
        recipe = load_recipe(args.platform, args.source / "bundlers")
    except RecipeError as exc:
        sys.stderr.write(f"FLAGOS_PLATFORM={args.platform}: {exc.line()}\n")
        return 2
    text = render(recipe)
    # Rewritten only when it changes, so that an unchanged recipe leaves CMake's outputs up to date.
    if not args.out.is_file() or args.out.read_text() != text:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
