"""Run every check on one subject (a wheel file, or the installed torch_fl) in the order data flows:
wheel -> manifest -> host -> ELF gates."""

from __future__ import annotations

import email.parser
import glob
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from packaging.tags import parse_tag
from packaging.version import Version

from torch_fl_preflight import companion_checks, elf_gates, host_checks, manifest_checks, wheel_checks
from torch_fl_preflight.compatibility import Compatibility, read_compatibility
from torch_fl_preflight.errors import ManifestError, WheelError
from torch_fl_preflight.host_env import HostEnv
from torch_fl_preflight.payload import InstalledPayload, WheelPayload, elf_members
from torch_fl_preflight.report import SubjectReport
from torch_fl_preflight.schema import MANIFEST_PATH_IN_PACKAGE, MAX_MANIFEST_BYTES
from torch_fl_preflight.wheel_reader import WheelArchive

INSTALLED_DIST = "torch_fl"


@dataclass(frozen=True)
class Options:
    """What to check, filled from the command line (main.build_parser)."""

    platform: str | None = None
    """--platform: the platform the wheel must have been built for."""
    release: bool = False
    """--release: provenance (SDK, vendor torch, companions) is required, not only reported."""
    host: host_checks.HostOptions = field(default_factory=host_checks.HostOptions)
    """How strictly the target environment is compared with what the wheel records."""
    gates: bool = True
    """Run the ELF load gates (--no-elf-gates turns them off)."""
    defer_system_libraries: bool = False
    """The target environment stands in for a machine whose own system provides the manifest's
    runtime.system_libraries (the NVIDIA driver): torch-fl-build on a CPU runner sets this, so their
    absence is a recorded host requirement instead of a failed gate. Never set on the target itself."""


def facts_of(manifest: Compatibility) -> dict[str, Any]:
    sdk = manifest.sdk
    return {
        "platform": manifest.platform,
        "wheel_version": manifest.wheel.version,
        "bundle_kind": manifest.bundle.kind,
        "torch": manifest.torch.version,
        "cxx11_abi": manifest.torch.cxx11_abi,
        "torch_requirement": manifest.torch.requirement,
        "sdk": sdk.name + (f" {sdk.version}" if sdk.version is not None else ""),
        "vendor_torch": manifest.vendor_torch.version if manifest.vendor_torch else None,
        "companions": manifest.companion_pins(),
    }


def read_wheel_manifest(whl: WheelArchive, meta: wheel_checks.WheelMetadata) -> Compatibility:
    name = f"{meta.package_dir}/{MANIFEST_PATH_IN_PACKAGE}"
    if name not in whl.members:
        raise ManifestError(
            f"{os.path.basename(whl.path)} has no {name}",
            "this is not a torch_fl wheel built by torch-fl-build; rebuild it",
        )
    if whl.members[name].size > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{name} declares {whl.members[name].size} bytes (limit {MAX_MANIFEST_BYTES})",
            "refusing to read it; rebuild the wheel",
        )
    return read_compatibility(whl.read(name, MAX_MANIFEST_BYTES), name)


def check_platform(manifest: Compatibility, opts: Options, report: SubjectReport) -> None:
    if opts.platform is None:
        return
    if manifest.platform == opts.platform:
        report.ok("wheel.platform", f"built for platform {opts.platform}")
    else:
        report.fail(
            "wheel.platform",
            f"built for platform {manifest.platform}, not {opts.platform}",
            f"use the torch_fl wheel of platform {opts.platform}",
        )


HostSource = Callable[[], HostEnv]


def check_wheel(path: str, host_for: HostSource | None, opts: Options) -> SubjectReport:
    """`host_for()` returns the target environment (probed once, on first use); None checks the wheel
    alone (identity, RECORD, manifest, ELF records), with no target."""
    report = SubjectReport(os.path.basename(path))
    with WheelArchive(path) as whl:
        meta = wheel_checks.read_wheel_metadata(whl)
        wheel_checks.check_identity(meta, report)
        scan = WheelPayload(whl, "")
        digests = wheel_checks.check_record(whl, meta, report, scan)
        manifest = read_wheel_manifest(whl, meta)
        report.platform = manifest.platform
        report.facts.update(facts_of(manifest))
        report.facts["size"] = os.path.getsize(path)
        check_platform(manifest, opts, report)
        manifest_checks.check_metadata_agreement(
            manifest,
            meta.name,
            meta.version,
            meta.requires_dist,
            frozenset(map(str, meta.wheel_tags)),
            meta.filename,
            report,
        )
        manifest_checks.check_torch(manifest, report)
        manifest_checks.check_release(manifest, report, release=opts.release)
        companion_checks.check_manifest(manifest, report)
        host = host_for() if host_for is not None else None
        if host is not None:
            scan.site_dir = host.platlib
        members = elf_members(scan)
        sizes = {m.path: whl.members[m.path].size for m in members}
        manifest_checks.check_elf_records(manifest, members, digests, sizes, report)
        if host is None:
            return report
        _host_and_gates(
            host, manifest, members, frozenset(map(str, meta.wheel_tags)), meta.requires_dist, opts, report
        )
    return report


def _host_and_gates(
    host: HostEnv,
    manifest: Compatibility,
    members: list[Any],
    tags: frozenset[str],
    requires: Any,
    opts: Options,
    report: SubjectReport,
) -> None:
    host_checks.check_tags(host, tags, report)
    model = elf_gates.LoaderModel(host, members, manifest)
    host_checks.check_floors(manifest, model, report)
    host_checks.check_torch_install(host, manifest, model, opts.host, report)
    host_checks.check_runtime_dirs(host, manifest, report)
    host_checks.check_sdk(host, manifest, opts.host, report)
    companion_checks.check_flaggems(host, manifest, opts.host, report)
    if opts.host.check_installed:
        host_checks.check_requirements_installed(host, requires, report)
    if opts.gates:
        result = elf_gates.run_gates(
            model, members, manifest, report, defer_system=opts.defer_system_libraries
        )
        report.facts["external_libraries"] = result.external


def check_installed(host_for: HostSource, opts: Options) -> SubjectReport:
    host = host_for()
    dist = host.distributions.get(INSTALLED_DIST.replace("_", "-"))
    if dist is None:
        raise WheelError(
            f"torch_fl is not installed for {host.executable}",
            "pip install the torch_fl wheel first, or check a wheel file with --wheel",
        )
    _version, site_dir = dist
    infos = sorted(glob.glob(os.path.join(site_dir, "torch_fl-*.dist-info")))
    if len(infos) != 1:
        raise WheelError(
            f"found {len(infos)} torch_fl .dist-info directories in {site_dir}",
            "reinstall torch_fl (pip install --force-reinstall)",
        )
    dist_info = infos[0]
    report = SubjectReport(f"installed torch_fl ({dist_info})")

    def read(name: str, limit: int) -> bytes:
        try:
            with open(os.path.join(dist_info, name), "rb") as fh:
                return fh.read(limit)
        except OSError as exc:
            raise WheelError(
                f"cannot read {name} of the installed torch_fl ({exc.strerror})", "reinstall torch_fl"
            ) from exc

    name, version, requires = wheel_checks.parse_metadata_text(
        read("METADATA", wheel_checks.MAX_METADATA_BYTES).decode("utf-8", "replace"), "METADATA"
    )
    wheel_msg = email.parser.Parser().parsestr(read("WHEEL", wheel_checks.MAX_METADATA_BYTES).decode(), True)
    tags = frozenset(str(t) for raw in wheel_msg.get_all("Tag") or [] for t in parse_tag(str(raw).strip()))
    record = wheel_checks.parse_record(
        read("RECORD", wheel_checks.MAX_RECORD_BYTES).decode("utf-8", "replace")
    )
    mpath = os.path.join(site_dir, "torch_fl", MANIFEST_PATH_IN_PACKAGE)
    try:
        with open(mpath, "rb") as fh:
            manifest = read_compatibility(fh.read(MAX_MANIFEST_BYTES + 1), mpath)
    except OSError as exc:
        raise ManifestError(
            f"cannot read {mpath} ({exc.strerror})",
            "install torch_fl from a wheel built by torch-fl-build (editable installs carry no manifest)",
        ) from exc
    report.platform = manifest.platform
    report.facts.update(facts_of(manifest))
    payload = InstalledPayload(site_dir, list(record), report.subject)
    if opts.host.check_installed:
        bad = []
        for f in payload.paths():
            algo, digest, _size = record[f]
            if algo == "sha256" and digest and payload.digest(f) != digest:
                bad.append(f"{f}: sha256 differs from RECORD")
        if bad:
            report.fail(
                "wheel.record",
                f"{len(bad)} installed file(s) were modified",
                "reinstall torch_fl",
                tuple(bad),
            )
        else:
            report.ok("wheel.record", "installed files match RECORD")
    check_platform(manifest, opts, report)
    manifest_checks.check_metadata_agreement(manifest, name, Version(version), requires, tags, None, report)
    manifest_checks.check_torch(manifest, report)
    manifest_checks.check_release(manifest, report, release=opts.release)
    companion_checks.check_manifest(manifest, report)
    members = elf_members(payload)
    digests = {m.path: payload.digest(m.path) for m in members}
    sizes = {m.path: payload.size(m.path) for m in members}
    manifest_checks.check_elf_records(manifest, members, digests, sizes, report)
    _host_and_gates(host, manifest, members, tags, requires, opts, report)
    return report
