"""Stage 2, build: the PEP 517 build of the plugin against the installed torch.

``pip wheel --no-build-isolation`` so the extension compiles against the torch
that is installed (an isolated build would fetch another torch).  The configure
stage's results reach the build backend through the environment
(``FLAGOS_PLATFORM``, ``FLAGOS_WHEEL_LOCAL_VERSION``,
``FLAGOS_WHEEL_REQUIREMENTS``, read by ``build_metadata`` and CMake).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from .configure import Config
from .errors import BuildError

__all__ = ["BuiltWheel", "build"]


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    name: str
    version: str
    log: Path | None


def _check(path: Path, config: Config) -> BuiltWheel:
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise BuildError("the build produced an invalid wheel name", path.name, str(exc)) from None
    if name != "torch-fl":
        raise BuildError("the wheel is not torch_fl", path.name, "build the torch_fl source tree")
    if str(version) != config.wheel_version:
        raise BuildError("the built wheel has another version than configured",
                         f"{version} vs {config.wheel_version}",
                         "build with torch-fl-build (it passes FLAGOS_WHEEL_LOCAL_VERSION), or rebuild --from-wheel")
    return BuiltWheel(path, "torch_fl", str(version), None)


def build(config: Config, work: Path, log: Callable[[str], None] = lambda s: None) -> BuiltWheel:
    if config.from_wheel is not None:
        # A wheel built elsewhere (or a test fixture): check it is the configured one.
        return _check(config.from_wheel, config)
    dist = work / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    log_path = work / "build.log"
    env = dict(os.environ)
    env.update(config.build_env)
    cmd = [config.python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
           "--disable-pip-version-check", "-w", str(dist), str(config.source_dir)]
    with log_path.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=config.source_dir)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            stripped = line.strip()
            if stripped:
                log(stripped[-160:])
        rc = proc.wait()
    if rc != 0:
        tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["?"]
        raise BuildError("the plugin build failed", re.sub(r"\s+", " ", tail[0])[:200],
                         f"see the build log, kept at {log_path}")
    wheels = sorted(dist.glob("torch_fl-*.whl"))
    if len(wheels) != 1:
        raise BuildError("the build did not produce exactly one torch_fl wheel", [w.name for w in wheels],
                         "check the build log")
    built = _check(wheels[0], config)
    return BuiltWheel(built.path, built.name, built.version, log_path)

