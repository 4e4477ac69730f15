"""The registry of every ``FLAGOS_*`` environment variable torch_fl reads.

This table is the single source: the unknown-variable warning, the README's
table (``python -m torch_fl._env``) and the code that reads each variable all
come from it.  Standard library only; imported before torch.
"""

from __future__ import annotations

import difflib
import os
import warnings
from dataclasses import dataclass

__all__ = ["EnvVar", "REGISTRY", "FlagosEnvWarning", "FlagosSettingWarning", "unknown_variables", "warn_setting",
           "warn_unknown_variables", "markdown_table"]


@dataclass(frozen=True)
class EnvVar:
    """One environment variable (or, with ``prefix=True``, a family of them)."""

    name: str
    """The variable's name, or the common prefix of a family."""
    default: str
    """What applies when it is unset, in words."""
    description: str
    """What it does."""
    prefix: bool = False
    """True when ``name`` is a prefix (``FLAGOS_OP_<op>``)."""


REGISTRY: tuple[EnvVar, ...] = (
    EnvVar("FLAGOS_BACKEND_CONFIG", "the wheel's `torch_fl/configs/backends_<platform>.conf`",
           "Routing file that replaces the packaged one (`op = provider` lines, `default = provider`)."),
    EnvVar("FLAGOS_OP_", "the routing file's choice",
           "`FLAGOS_OP_<op>=<provider>` routes one operator; write `.` as `__` (`FLAGOS_OP_add__Tensor=cpu`).",
           prefix=True),
    EnvVar("FLAGOS_USE_FLAGGEMS", "`0`",
           "`1` routes every operator the installed `flag_gems` offers to provider `flaggems` (as `default = "
           "flaggems`): operators the routing file or `FLAGOS_OP_<op>` names keep their providers."),
    EnvVar("FLAGOS_LOG_DISPATCH", "`0`", "`1` logs every routed operator call and its provider to stderr."),
    EnvVar("FLAGOS_FP8", "the platform table's `fp8` (`bundlers/<platform>.toml`)",
           "`native` runs float8 matmuls (`_scaled_mm`) on the kernel device's own kernel, `emulated` on flagos's "
           "float32 emulation (`torch_fl/fp8`)."),
    EnvVar("FLAGOS_HOST_DEVICES", "`2`", "Number of virtual devices of the emulated host runtime (1-64)."),
    EnvVar("FLAGOS_HOST_MEMORY_LIMIT", "no limit",
           "Per-device memory limit of the emulated host runtime: bytes or `K`/`M`/`G`/`T` (e.g. `512M`)."),
    # -- bootstrap
    EnvVar("FLAGOS_NO_STARTUP_HOOK", "unset (the hook is on)",
           "`1` turns off the startup hook (`torch_fl_startup.pth`) that prepares the process before `import torch`; "
           "`import torch_fl` must then come before `import torch` for the `cuda-assets` and `forked-libtorch` wheels."),
    EnvVar("FLAGOS_CACHE_DIR", "`$XDG_CACHE_HOME/torch_fl` (`~/.cache/torch_fl`)",
           "Private per-user cache of the `forked-libtorch` bootstrap (its view of torch); must be owned by you and "
           "writable by nobody else, and every folder above it owned by you or root and writable by nobody else "
           "unless sticky. A location set here that breaks this is refused; the default one is then replaced by "
           "`$TMPDIR/torch_fl-<uid>`, with a warning."),
    # -- end bootstrap
    EnvVar("FLAGOS_PLATFORM", "`host`", "Build time: the platform recipe (`bundlers/<platform>.toml`) to build for."),
    EnvVar("FLAGOS_WHEEL_LOCAL_VERSION", "the recipe's `local_version`",
           "Build time, set by `torch-fl-build`: the wheel version's local segment."),
    EnvVar("FLAGOS_WHEEL_REQUIREMENTS", "the torch minor line",
           "Build time, set by `torch-fl-build`: the wheel's requirements as a JSON list."),
    EnvVar("FLAGOS_WHEEL_EXTRAS", "no extra",
           "Build time, set by `torch-fl-build`: the wheel's optional extras (`torch_fl[flaggems]` on cuda) as a JSON "
           "object of extra name to requirements."),
    EnvVar("FLAGOS_CUDA_TORCH_DIR", "the installed torch when it is a CUDA build",
           "Build time, set by `torch-fl-build --platform cuda`: the extracted `torch` package of the CUDA torch wheel "
           "whose headers and libraries the cuda plugin builds against."),
    EnvVar("FLAGOS_CUDA_TORCH_INDEX", "`https://pypi.org/simple`",
           "Build time: the index `torch-fl-build` downloads the CUDA torch wheel from, and verify the wheel's "
           "requirements (cuda-assets; `--index-url` overrides it for the requirements)."),
    EnvVar("FLAGOS_CI_WORK", "`build/ci` in the repository",
           "Where `ci/build-wheel` and `ci/test` create their virtual environments."),
    EnvVar("FLAGOS_TEST_", "unset", "Switches and inputs of the test suite (`FLAGOS_TEST_CUDA_ASSETS=1`, ...).",
           prefix=True),
)

_warned = False


class FlagosEnvWarning(UserWarning):
    """An environment variable that looks like torch_fl's but is not one."""


class FlagosSettingWarning(UserWarning):
    """A torch_fl setting that cannot be used: flagos is unusable in this process; torch itself works."""


def warn_setting(message: str, category: type[Warning] = FlagosSettingWarning) -> None:
    """One warning line at import, attributed to torch_fl.

    ``warn_explicit`` rather than ``warn``: torch imports torch_fl through its entry point, so any
    stack level names a line of importlib or torch, which the default format would print as a
    second, misleading line.  Filters still apply (``-W error`` turns it into an error).
    """
    warnings.warn_explicit(message, category, filename="torch_fl", lineno=0, module="torch_fl")


def _known(name: str) -> bool:
    return any(name.startswith(v.name) if v.prefix else name == v.name for v in REGISTRY)


def unknown_variables(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return sorted(n for n in env if n.startswith("FLAGOS_") and not _known(n))


def warn_unknown_variables() -> None:
    """Warns once per process about ``FLAGOS_*`` variables nobody reads."""
    global _warned
    if _warned:
        return
    _warned = True
    names = [v.name for v in REGISTRY if not v.prefix]
    for name in unknown_variables():
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]}?" if close else "; see the FLAGOS_* table in README.md"
        warn_setting(f"unknown environment variable {name} is ignored{hint}", FlagosEnvWarning)


def markdown_table() -> str:
    rows = ["| variable | default | what it does |", "|---|---|---|"]
    for v in REGISTRY:
        shown = f"`{v.name}<...>`" if v.prefix else f"`{v.name}`"
        rows.append(f"| {shown} | {v.default} | {v.description} |")
    return "\n".join(rows)


_TABLE_START = "<!-- FLAGOS_ENV_TABLE:START -->"
_TABLE_END = "<!-- FLAGOS_ENV_TABLE:END -->"


def render_into(document: str) -> str:
    """``document`` with the table between its FLAGOS_ENV_TABLE markers replaced by the current one."""
    head, start, rest = document.partition(_TABLE_START)
    _, end, tail = rest.partition(_TABLE_END)
    if not start or not end:
        raise ValueError(f"the document has no {_TABLE_START} ... {_TABLE_END} block")
    return f"{head}{start}\n{markdown_table()}\n{end}{tail}"


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--update"] and len(sys.argv) == 3:
        from pathlib import Path

        path = Path(sys.argv[2])
        path.write_text(render_into(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(markdown_table())
