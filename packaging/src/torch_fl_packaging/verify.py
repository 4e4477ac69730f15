"""Stage 6, verify: torch-fl-preflight, in process, on the final wheel before it is moved into --out.

A valid wheel is defined once, by preflight (docs/architecture.md, "The release pipeline"): this
stage only chooses the target and turns preflight's report into a pass or a VerifyError.

* The wheel alone (RECORD hashes and sizes, the schema-valid manifest naming every ELF member with
  its sha256, agreement with METADATA, WHEEL and the file name) is always checked.
* Then, unless ``--preflight off``, the release gate (``--release`` for real platforms) against
  the target: the build interpreter (or ``--target-python``), and for bundle kinds whose runtime
  comes from the wheel's requirements (cuda-assets) that interpreter plus those requirements, which
  pip installs into a throw-away prefix (verify_target).  The build runner is not the target machine:
  the manifest's runtime.system_libraries (the NVIDIA driver) are recorded as host requirements
  there, not failed, and ``torch-fl-preflight --installed --check-installed`` on the target checks them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch_fl_preflight import checker
from torch_fl_preflight.errors import PreflightError
from torch_fl_preflight.host_checks import HostOptions
from torch_fl_preflight.host_env import HostEnv, HostProbe
from torch_fl_preflight.kinds import policy
from torch_fl_preflight.report import Status, SubjectReport, counts
from torch_fl_preflight.wheel_checks import read_wheel_metadata
from torch_fl_preflight.wheel_reader import WheelArchive

from .configure import Config
from .errors import VerifyError
from .manifest import MANIFEST_PATH
from .verify_target import RequirementsTarget, TargetSource, default_index, make_target

__all__ = ["Verified", "prove", "verify"]


@dataclass(frozen=True)
class Verified:
    members: int
    elf_records: int
    preflight: str  # "passed" | "skipped" (--preflight off: the wheel alone was checked)
    checks: dict[str, int] = field(default_factory=dict)
    host_requirements: tuple[str, ...] = ()
    target: dict[str, Any] | None = None


def _raise_failed(report: SubjectReport) -> None:
    failed = [f"FAIL {f.id}: {f.message}" + (f" [{', '.join(f.details[:3])}]" if f.details else "")
              for f in report.findings if f.status is Status.FAIL]
    if failed:
        raise VerifyError("torch-fl-preflight rejects the wheel", "; ".join(failed)[:900],
                          "fix what it names, then rebuild (torch-fl-preflight --wheel ... -v shows every detail)")


def _sizes(wheel: Path) -> tuple[int, int]:
    with zipfile.ZipFile(wheel) as zf:
        return len(zf.namelist()), len(json.loads(zf.read(MANIFEST_PATH))["elf"])


def _target_summary(t: RequirementsTarget, seconds: float) -> dict[str, Any]:
    return {"python": t.python, "installed": list(t.installed), "cache": str(t.cache),
            "cache_bytes": t.cache_bytes, "downloaded": t.downloaded, "seconds": round(seconds, 1)}


def prove(wheel: Path, *, platform: str | None, release: bool, python: str, work: Path,
          source: TargetSource, environ: dict[str, str] | None = None, gates: bool = True,
          progress: Callable[[str], None] = lambda _s: None) -> Verified:
    """Preflight on ``wheel`` against ``python``'s environment, made from the wheel's requirements
    where its bundle kind needs that; raises VerifyError when a check fails."""
    opts = checker.Options(platform=platform, release=release)
    try:
        alone = checker.check_wheel(str(wheel), None, opts)
        _raise_failed(alone)
        members, elf_records = _sizes(wheel)
        if not gates:
            return Verified(members, elf_records, "skipped", counts([alone]))
        base = dict(os.environ if environ is None else environ)
        with WheelArchive(str(wheel)) as whl:
            requires = read_wheel_metadata(whl).requires_dist
        host: HostEnv = HostProbe(python, base).result()
        target: RequirementsTarget | None = None
        target_info: dict[str, Any] | None = None
        if policy(alone.facts["bundle_kind"]).runtime_from_requirements:
            start = time.perf_counter()
            target = make_target(python, requires, host, work / "target", source, progress=progress)
            target_info = _target_summary(target, time.perf_counter() - start)
            if target.site_dirs:
                # pip installs the wheel beside its requirements: its members' $ORIGIN is the target's
                # site directory, so RPATHs like $ORIGIN/../../nvidia/cu13/lib resolve as they will there.
                probed = HostProbe(python, target.environ(base)).result()
                host = dataclasses.replace(probed, platlib=str(target.site_dirs[0]))
        progress("torch-fl-preflight")
        report = checker.check_wheel(str(wheel), lambda: host, checker.Options(
            platform=platform, release=release,
            # The target was made to hold every requirement: prove that it does.
            host=HostOptions(check_installed=target is not None),
            defer_system_libraries=True,
        ))
    except PreflightError as exc:
        raise VerifyError("torch-fl-preflight cannot check the wheel", exc.message, exc.fix) from None
    _raise_failed(report)
    return Verified(members, elf_records, "passed", counts([report]),
                    tuple(report.facts.get("host_requirements", ())), target_info)


def verify(config: Config, wheel: Path, work: Path, *, preflight: str = "on",
           index_url: str | None = None, find_links: tuple[str, ...] = (),
           progress: Callable[[str], None] = lambda _s: None) -> Verified:
    environ = dict(os.environ)
    sdk = config.recipe.sdk
    if sdk and sdk.env and config.sdk_root is not None:
        # Point preflight's runtime checks at the SDK this wheel was built with.
        environ[sdk.env] = str(config.sdk_root)
    spec = config.recipe.vendor_torch
    source = TargetSource(index_url=index_url, find_links=find_links,
                          default_index=default_index(spec.index, spec.index_env))
    return prove(wheel, platform=config.recipe.platform, release=not config.recipe.stand_in,
                 python=config.target_python, work=work, source=source, environ=environ,
                 gates=preflight != "off", progress=progress)
