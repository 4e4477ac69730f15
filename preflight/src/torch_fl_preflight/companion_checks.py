"""FlagGems/Triton checks: is the flaggems provider's companion installed at the versions the wheel records?

The wheel records the FlagGems release its routes are made for (compatibility.json
``companions.flaggems``) and, where its platform has the ``flaggems`` extra, the pins that extra
installs (its Requires-Dist under ``extra == "flaggems"``: ``flag-gems==<pin>`` and the ``triton``
the CUDA torch of the same release requires).  A mismatch is reported here, before ``import torch``
would compile Triton kernels against the wrong compiler.  Only distribution metadata is read (the
target's ``importlib.metadata``, through the host probe): flag_gems and triton are never imported,
since importing triton initialises its GPU drivers.
"""

from __future__ import annotations

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from torch_fl_preflight.compatibility import Compatibility
from torch_fl_preflight.host_checks import HostOptions, marker_env
from torch_fl_preflight.host_env import HostEnv
from torch_fl_preflight.manifest_checks import requirement
from torch_fl_preflight.report import SubjectReport

FLAGGEMS_EXTRA = "flaggems"
FLAGGEMS_DIST = "flag-gems"
TRITON_DIST = "triton"


def extra_requirements(manifest: Compatibility, extra: str, env: dict[str, str]) -> list[Requirement]:
    """The requirements only ``extra`` brings in, whose markers apply in ``env``."""
    out = []
    for text in manifest.requirements:
        req = requirement(text, "requirement")
        if req.marker is None:
            continue
        if req.marker.evaluate({**env, "extra": extra}) and not req.marker.evaluate({**env, "extra": ""}):
            out.append(req)
    return out


def _named(reqs: list[Requirement], dist: str) -> Requirement | None:
    return next((r for r in reqs if canonicalize_name(r.name) == dist), None)


def _bare(req: Requirement) -> str:
    """`name==1.2` without the extra marker: what a person types after pip install."""
    return f"{req.name}{req.specifier}"


def check_manifest(manifest: Compatibility, report: SubjectReport) -> None:
    """The flaggems extra requires exactly the FlagGems release the manifest records."""
    reqs = extra_requirements(manifest, FLAGGEMS_EXTRA, {})
    if not reqs:
        return  # the platform has no flaggems extra
    pin = manifest.companions.flaggems if manifest.companions else None
    req = _named(reqs, FLAGGEMS_DIST)
    if req is None or pin is None or [(s.operator, s.version) for s in req.specifier] != [("==", pin)]:
        found = _bare(req) if req is not None else f"no {FLAGGEMS_DIST}"
        report.fail(
            "manifest.companions",
            f"the flaggems extra requires {found}, but companions.flaggems is {pin or 'not recorded'}",
            "the manifest was not written for this wheel; rebuild it with torch-fl-build",
        )
    else:
        report.ok("manifest.companions", f"the flaggems extra requires {_bare(req)}, the recorded FlagGems release")


def check_flaggems(host: HostEnv, manifest: Compatibility, opts: HostOptions, report: SubjectReport) -> None:
    env = marker_env(host)
    reqs = extra_requirements(manifest, FLAGGEMS_EXTRA, env)
    pin = manifest.companions.flaggems if manifest.companions else None
    have = host.distributions.get(FLAGGEMS_DIST)
    if have is None:
        turn_on = f"; pip install 'torch_fl[{FLAGGEMS_EXTRA}]' turns it on" if reqs else ""
        report.ok("host.flaggems", f"flag_gems is not installed: the flaggems provider is off{turn_on}")
        report.skip("host.triton", "flag_gems is not installed, so no Triton version is required")
        return
    version = have[0]
    if pin is None:
        report.skip("host.flaggems", f"flag_gems {version} is installed; the wheel records no FlagGems release")
    elif _same(version, pin):
        report.ok("host.flaggems", f"flag_gems {version} is the release the wheel's flaggems routes are made for")
    else:
        msg = f"flag_gems {version} is installed, the wheel's flaggems routes are made for FlagGems {pin}"
        fix = f"pip install 'flag-gems=={pin}' (or uninstall flag-gems to leave the flaggems provider off)"
        if opts.strict_tested:
            report.fail("host.flaggems", msg, fix)
        else:
            report.warn("host.flaggems", msg, fix)
    triton = _named(reqs, TRITON_DIST)
    if triton is None:
        report.skip("host.triton", f"the wheel's platform {manifest.platform} pins no Triton for FlagGems")
        return
    found = host.distributions.get(TRITON_DIST)
    if found is None:
        report.fail(
            "host.triton",
            f"flag_gems {version} is installed but triton is not (the wheel pins {_bare(triton)})",
            f"pip install '{_bare(triton)}'",
        )
    elif not _satisfies(triton, found[0]):
        report.fail(
            "host.triton",
            f"triton {found[0]} is installed, the wheel's flaggems extra pins {_bare(triton)}",
            f"pip install '{_bare(triton)}'",
        )
    else:
        report.ok("host.triton", f"triton {found[0]} satisfies the flaggems extra's {_bare(triton)}")


def _same(have: str, pin: str) -> bool:
    try:
        return Version(have) == Version(pin)
    except InvalidVersion:
        return have == pin


def _satisfies(req: Requirement, have: str) -> bool:
    try:
        return req.specifier.contains(Version(have), prereleases=True)
    except InvalidVersion:
        return False
