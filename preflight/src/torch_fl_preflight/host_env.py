"""The target environment: what the host probe reported, and the tags that interpreter accepts."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging import tags as ptags

from torch_fl_preflight import host_probe
from torch_fl_preflight.errors import HostProbeError

PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class TorchInstall:
    version: str
    location: str
    lib: str
    git_version: str | None


@dataclass(frozen=True)
class HostEnv:
    executable: str
    executable_real: str
    implementation: str
    python_version: tuple[int, int, int]
    soabi: str
    gil_disabled: bool
    debug: bool
    machine: str
    glibc: tuple[int, int] | None
    prefix: str
    platlib: str
    site_dirs: tuple[str, ...]
    distributions: dict[str, tuple[str, str]] = field(compare=False)  # normalized name -> (version, location)
    torch: TorchInstall | None = None
    environ: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def ld_library_path(self) -> tuple[str, ...]:
        return tuple(p for p in self.environ.get("LD_LIBRARY_PATH", "").split(":") if p)


class HostProbe:
    """Ask an interpreter to describe its environment; started at once, so that the other
    interpreter's start-up overlaps the wheel's hashing, and collected when first needed.

    `env`, when given, is the whole environment the interpreter runs with (for example PYTHONPATH
    naming a directory pip installed requirements into); it is also what the loader model reads
    LD_LIBRARY_PATH and SDK roots from."""

    def __init__(self, python: str | None, env: dict[str, str] | None = None) -> None:
        self.python = python
        self.env = env
        self._result: HostEnv | None = None
        self._proc: subprocess.Popen[str] | None = None
        if python is not None:
            try:
                self._proc = subprocess.Popen(
                    [python, "-"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            except OSError as exc:
                raise HostProbeError(
                    f"cannot run the interpreter {python} ({exc.strerror or exc})",
                    "pass --python the path of a working python executable",
                ) from exc

    def result(self) -> HostEnv:
        if self._result is None:
            self._result = host_from_probe(self._collect(), self.env)
        return self._result

    def _collect(self) -> dict[str, Any]:
        if self._proc is None:
            return host_probe.probe()
        source = Path(host_probe.__file__).read_text("utf-8")
        try:
            out, err = self._proc.communicate(source, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            self._proc.kill()
            raise HostProbeError(
                f"{self.python} did not answer within {PROBE_TIMEOUT_S} s",
                "pass --python a working interpreter",
            ) from exc
        if self._proc.returncode != 0:
            last = (err.strip().splitlines() or ["no output"])[-1]
            raise HostProbeError(
                f"{self.python} failed to describe itself ({last[:200]})",
                "pass --python a Python 3.8+ interpreter",
            )
        try:
            data: dict[str, Any] = json.loads(out)
        except ValueError as exc:
            raise HostProbeError(
                f"{self.python} printed no probe result", "pass --python a Python interpreter"
            ) from exc
        return data


def probe_host(python: str | None) -> HostEnv:
    """Describe this interpreter (python=None) or another one, by running host_probe there."""
    return HostProbe(python).result()


def host_from_probe(data: dict[str, Any], environ: dict[str, str] | None = None) -> HostEnv:
    try:
        m = re.match(r"glibc (\d+)\.(\d+)", data.get("libc") or "")
        torch = data.get("torch")
        dists = {k: (v["version"], v["location"]) for k, v in data["distributions"].items()}
        return HostEnv(
            executable=data["executable"],
            executable_real=data["executable_real"],
            implementation=data["implementation"],
            python_version=(int(data["version"][0]), int(data["version"][1]), int(data["version"][2])),
            soabi=data["soabi"],
            gil_disabled=bool(data["gil_disabled"]),
            debug=bool(data["debug"]),
            machine=data["machine"],
            glibc=(int(m.group(1)), int(m.group(2))) if m else None,
            prefix=data["prefix"],
            platlib=data["platlib"],
            # sys.path's site directories too: a venv with --system-site-packages, or user site,
            # may hold torch or the nvidia-* packages outside the venv's own prefix.
            site_dirs=tuple(
                dict.fromkeys(
                    [
                        data["platlib"],
                        data["purelib"],
                        *data["site_dirs"],
                        *(
                            p
                            for p in data["sys_path"]
                            if p.rstrip("/").endswith(("site-packages", "dist-packages"))
                        ),
                    ]
                )
            ),
            distributions=dists,
            torch=TorchInstall(torch["version"], torch["location"], torch["lib"], torch.get("git_version"))
            if torch
            else None,
            # The target interpreter inherits this process's environment: SDK roots and
            # LD_LIBRARY_PATH are what the user's shell has set.
            environ=dict(os.environ if environ is None else environ),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise HostProbeError(
            f"the host probe's answer is incomplete ({exc!r})",
            "the interpreter is unusual; report this with --debug output",
        ) from exc


_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def _platforms(host: HostEnv) -> list[str]:
    arch = host.machine
    out: list[str] = []
    if host.glibc is not None and host.glibc[0] == 2:
        for minor in range(host.glibc[1], 4, -1):
            out.append(f"manylinux_2_{minor}_{arch}")
            if minor in _LEGACY and arch in ("x86_64", "i686", "aarch64", "ppc64le", "s390x", "armv7l"):
                out.append(f"{_LEGACY[minor]}_{arch}")
    out.append(f"linux_{arch}")
    return out


def supported_tags(host: HostEnv) -> list[str]:
    """The tags the target interpreter accepts, most specific first (packaging.tags, computed remotely)."""
    major, minor = host.python_version[0], host.python_version[1]
    platforms = _platforms(host)
    out: list[ptags.Tag] = []
    if host.implementation == "cpython":
        m = re.match(r"cpython-(\d+)([a-z]*)-", host.soabi)
        abi = f"cp{m.group(1)}{m.group(2)}" if m else f"cp{major}{minor}" + ("t" if host.gil_disabled else "")
        out.extend(ptags.cpython_tags((major, minor), [abi], platforms))
        interp = f"cp{major}{minor}"
    else:
        interp = f"{host.implementation[:2]}{major}{minor}"
        abi = (
            re.sub(r"[-.]", "_", host.soabi.split("-")[0] + "_" + host.soabi.split("-")[1])
            if "-" in host.soabi
            else "none"
        )
        out.extend(ptags.generic_tags(interp, [abi], platforms))
    out.extend(ptags.compatible_tags((major, minor), interp, platforms))
    return [str(t) for t in dict.fromkeys(out)]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def nvidia_lib_dirs(host: HostEnv) -> list[str]:
    """site-packages/nvidia/<component>/lib (CUDA 12 layout) and nvidia/cu13/lib (CUDA 13 layout)."""
    out: list[str] = []
    for site_dir in host.site_dirs:
        base = os.path.join(site_dir, "nvidia")
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            lib = os.path.join(base, name, "lib")
            if os.path.isdir(lib):
                out.append(lib)
    return out
