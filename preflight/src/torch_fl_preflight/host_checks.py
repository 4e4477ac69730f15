"""Host checks: does the target interpreter and environment fit what the wheel records?"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from torch_fl_preflight.compatibility import Compatibility
from torch_fl_preflight.elf_gates import LoaderModel, runtime_directories
from torch_fl_preflight.host_env import HostEnv, supported_tags
from torch_fl_preflight.kinds import policy
from torch_fl_preflight.manifest_checks import is_exact_pin, torch_requirement
from torch_fl_preflight.report import SubjectReport

MAX_VERSION_FILE = 1 << 16


@dataclass(frozen=True)
class HostOptions:
    """How the target environment is held against the wheel's record."""

    sdk_version: str | None = None
    """--sdk-version: the SDK version on the target; otherwise read from the SDK tree."""
    require_sdk: bool = False
    """--require-sdk: an SDK version that cannot be determined fails host.sdk."""
    strict_tested: bool = False
    """--strict-tested: another torch release or SDK version than the tested one fails."""
    check_installed: bool = False
    """--check-installed: every Requires-Dist must be installed (and, --installed, match RECORD)."""
    check_build_env: bool = False
    """--check-build-env: the target's torch must be the very build the wheel was compiled against."""


def check_tags(host: HostEnv, wheel_tags: frozenset[str], report: SubjectReport) -> None:
    supported = supported_tags(host)
    ok = [t for t in supported if t in wheel_tags]
    py = ".".join(map(str, host.python_version))
    if ok:
        report.ok("host.tags", f"Python {py} ({host.executable}) accepts {ok[0]}")
    else:
        report.fail(
            "host.tags",
            f"Python {py} ({host.executable}, most specific tag {supported[0]}) accepts none "
            f"of the wheel's tags {sorted(wheel_tags)}",
            "install the wheel built for this Python and platform, or run it with the Python it was built "
            "for",
        )


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _highest(verdef: tuple[str, ...], prefix: str) -> str | None:
    found = [
        v[len(prefix) :]
        for v in verdef
        if v.startswith(prefix) and v[len(prefix) :].replace(".", "").isdigit()
    ]
    return max(found, key=_vkey) if found else None


def check_floors(manifest: Compatibility, model: LoaderModel, report: SubjectReport) -> None:
    """The manifest's glibc/libstdc++ floors against the host's libc.so.6 and libstdc++.so.6.

    The ELF gate elf.versions checks each required version; this is the one-line summary a
    person reads first ("glibc 2.27 here, the wheel needs 2.28")."""
    floors = manifest.floors
    problems, have = [], []
    for need, soname, prefix in ((floors.glibc, "libc.so.6", "GLIBC_"), (floors.glibcxx, "libstdc++.so.6", "GLIBCXX_")):
        if not need:
            continue
        path = next(iter(model.cache.get(soname, [])), None)
        info = model.info(path) if path else None
        top = _highest(info.verdef, prefix) if info else None
        if top is None:
            problems.append(f"{soname} not found on this host (the wheel needs {prefix}{need})")
        elif _vkey(top) < _vkey(need):
            problems.append(f"{soname} provides up to {prefix}{top}, the wheel needs {prefix}{need}")
        else:
            have.append(f"{prefix}{top} >= {prefix}{need}")
    if problems:
        report.fail(
            "host.floors",
            "; ".join(problems),
            "use a newer distribution (or a wheel built for an older manylinux tag)",
        )
    else:
        report.ok("host.floors", ", ".join(have) or "the wheel records no glibc/libstdc++ floor")


def torch_cxx11_abi(model: LoaderModel) -> bool | None:
    """The installed torch's C++ ABI, from libc10.so's exported names.

    std::__cxx11 appears in mangled names only under the new ABI."""
    if model.torch_lib is None:
        return None
    info = model.info(os.path.join(model.torch_lib, "libc10.so"))
    if info is None:
        return None
    return any("cxx11" in name for name in info.defined)


def _release(v: Version) -> Version:
    return Version(v.base_version)


def check_torch_install(
    host: HostEnv, manifest: Compatibility, model: LoaderModel, opts: HostOptions, report: SubjectReport
) -> None:
    req = torch_requirement(manifest)
    t = manifest.torch
    if host.torch is None:
        report.fail(
            "host.torch",
            f"torch is not installed in {host.prefix}",
            f"pip install '{req}' (the CPU build is enough) into that environment",
        )
        return
    try:
        have = Version(host.torch.version)
    except InvalidVersion:
        report.fail(
            "host.torch", f"installed torch has an invalid version {host.torch.version!r}", "reinstall torch"
        )
        return
    problems = []
    if not req.specifier.contains(have, prereleases=True):
        problems.append(f"installed torch {have} does not satisfy {req}")
    kind = manifest.bundle.kind
    built_git = t.git_version  # None: that torch recorded none
    if (
        policy(kind).pins_torch
        and is_exact_pin(req.specifier)
        and host.torch.git_version
        and built_git
        and host.torch.git_version != built_git
    ):
        problems.append(
            f"installed torch is git {host.torch.git_version[:12]}, the bundled libraries were built "
            f"from {built_git[:12]}"
        )
    abi = torch_cxx11_abi(model)
    if abi is not None and abi != t.cxx11_abi:
        problems.append(
            f"installed torch uses the {'new' if abi else 'old'} C++ ABI, the wheel was built with "
            f"the {'new' if t.cxx11_abi else 'old'} one"
        )
    built = Version(t.version)
    if opts.strict_tested and _release(have) != _release(built):
        problems.append(f"installed torch {have} is not the tested build torch {built}")
    if opts.check_build_env:
        if str(have) != str(built):
            problems.append(f"build environment torch {have} is not {built}")
        if built_git and host.torch.git_version != built_git:
            problems.append(f"build environment torch git {host.torch.git_version} is not {built_git}")
    if problems:
        report.fail(
            "host.torch", "; ".join(problems), f"install {req} from the index the wheel's platform uses"
        )
    else:
        note = "" if _release(have) == _release(built) else f" (built with {built})"
        report.ok(
            "host.torch",
            f"torch {have} satisfies {req}{note}"
            + ("" if abi is None else f", C++ ABI {'cxx11' if abi else 'pre-cxx11'}"),
        )


def check_runtime_dirs(host: HostEnv, manifest: Compatibility, report: SubjectReport) -> None:
    dirs = manifest.runtime.directories
    if not dirs:
        report.ok("host.runtime", "the wheel needs no target-side runtime directory")
        return
    resolved = runtime_directories(manifest, host.environ)
    problems = []
    for d, path in zip(dirs, resolved):
        if not os.path.isdir(path):
            hint = f" (set {d.env} if it lives elsewhere)" if d.env else ""
            problems.append(f"{path}: missing{hint}")
            continue
        problems += [
            f"{path}/{lib}: missing" for lib in d.libraries if not os.path.exists(os.path.join(path, lib))
        ]
    if problems:
        report.fail(
            "host.runtime",
            f"{len(problems)} runtime location(s) missing",
            f"install the {manifest.sdk.name} runtime, or point its environment variable at it",
            tuple(problems),
        )
    else:
        report.ok(
            "host.runtime", f"{len(resolved)} runtime director(y/ies) hold the libraries the wheel needs"
        )


def read_sdk_version(host: HostEnv, manifest: Compatibility) -> tuple[str | None, str]:
    """(version, where) read from the SDK tree the manifest describes; version None when unreadable."""
    sdk = manifest.sdk
    root_spec = sdk.root
    if root_spec is None:
        return None, "the manifest does not say where the SDK lives"
    env = root_spec.env
    root = host.environ.get(env, "") if env else ""
    root = root or root_spec.default
    if not os.path.isdir(root):
        return None, f"SDK root {root} does not exist"
    vf = sdk.version_file
    if not vf:
        return None, f"the manifest does not say how to read the version under {root}"
    path = os.path.join(root, vf)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(MAX_VERSION_FILE)
    except OSError:
        return None, f"{path} is not readable"
    pattern = sdk.version_pattern
    if pattern:
        m = re.search(pattern, text)
        found = m.group(1) if m and m.groups() else (m.group(0) if m else None)
    else:
        found = next((ln.strip() for ln in text.splitlines() if ln.strip()), None)
    return found, path


def check_sdk(host: HostEnv, manifest: Compatibility, opts: HostOptions, report: SubjectReport) -> None:
    sdk = manifest.sdk
    recorded = sdk.version
    found, where = read_sdk_version(host, manifest)
    target = opts.sdk_version or found
    source = "--sdk-version" if opts.sdk_version else where
    if opts.sdk_version and found and found != opts.sdk_version:
        report.warn(
            "host.sdk",
            f"--sdk-version {opts.sdk_version} but {where} says {found}",
            "pass the version of the SDK actually installed",
        )
    if target is None:
        msg = f"{sdk.name} SDK version unknown on this host: {where}"
        if opts.require_sdk:
            report.fail("host.sdk", msg, "install the SDK, or pass --sdk-version")
        else:
            report.skip("host.sdk", msg)
        return
    if recorded is None:
        report.warn(
            "host.sdk",
            f"host has {sdk.name} {target} ({source}); the wheel does not record the SDK "
            "version it was built with",
            "prefer a release wheel, which records it",
        )
    elif recorded != target:
        msg = f"host has {sdk.name} {target} ({source}), the wheel was built and tested with {recorded}"
        fix = "install the wheel built for this SDK version, or that SDK"
        if opts.strict_tested:
            report.fail("host.sdk", msg, fix)
        else:
            report.warn("host.sdk", msg, fix)
    else:
        report.ok("host.sdk", f"{sdk.name} {target} ({source}) is the version the wheel was built with")


def marker_env(host: HostEnv) -> dict[str, str]:
    """The target's PEP 508 marker environment, as pip there evaluates requirement markers."""
    major, minor, micro = host.python_version
    return {
        "python_version": f"{major}.{minor}",
        "python_full_version": f"{major}.{minor}.{micro}",
        "platform_machine": host.machine,
        "implementation_name": host.implementation,
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
    }


def unmet_requirements(host: HostEnv, requires: tuple[Requirement, ...]) -> list[tuple[Requirement, str]]:
    """The requirements (whose markers apply on the target) that its installed distributions do not
    satisfy, each with what is wrong; the one definition both --check-installed and torch-fl-build's
    requirements target use."""
    unmet: list[tuple[Requirement, str]] = []
    env = marker_env(host)
    for req in requires:
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        have = host.distributions.get(canonicalize_name(req.name))
        if have is None:
            unmet.append((req, f"{req}: not installed"))
            continue
        try:
            ok = req.specifier.contains(Version(have[0]), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            unmet.append((req, f"{req}: {have[0]} is installed"))
    return unmet


def check_requirements_installed(
    host: HostEnv, requires: tuple[Requirement, ...], report: SubjectReport
) -> None:
    problems = [problem for _req, problem in unmet_requirements(host, requires)]
    if problems:
        report.fail(
            "host.requirements",
            f"{len(problems)} requirement(s) of the wheel not met in {host.prefix}",
            "pip install the wheel (pip resolves them) or install them first",
            tuple(problems),
        )
    else:
        report.ok("host.requirements", f"all {len(requires)} requirement(s) are installed")
