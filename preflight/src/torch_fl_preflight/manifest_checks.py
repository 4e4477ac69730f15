"""Manifest checks: compatibility.json agrees with METADATA, with itself, and with the ELF files."""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from torch_fl_preflight.compatibility import Compatibility
from torch_fl_preflight.errors import ManifestError
from torch_fl_preflight.kinds import policy
from torch_fl_preflight.payload import ElfMember
from torch_fl_preflight.report import SubjectReport

COMPANIONS = ("flaggems", "flagtree", "flagcx")


def requirement(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise ManifestError(f"{where} {text!r} is not a PEP 508 requirement", "rebuild the wheel") from exc


def version(text: str, where: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise ManifestError(f"{where} {text!r} is not a PEP 440 version", "rebuild the wheel") from exc


def is_exact_pin(spec: SpecifierSet) -> bool:
    specs = list(spec)
    return len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version


def check_metadata_agreement(
    manifest: Compatibility,
    name: str,
    ver: Version,
    requires: tuple[Requirement, ...],
    tags: frozenset[str] | None,
    filename: str | None,
    report: SubjectReport,
) -> None:
    w = manifest.wheel
    problems = []
    if canonicalize_name(w.name) != canonicalize_name(name):
        problems.append(f"name {w.name!r} vs METADATA {name!r}")
    if version(w.version, "wheel.version") != ver:
        problems.append(f"version {w.version} vs METADATA {ver}")
    mine = {str(requirement(r, "requirement")) for r in manifest.requirements}
    theirs = {str(r) for r in requires}
    if mine != theirs:
        only_m, only_t = sorted(mine - theirs), sorted(theirs - mine)
        problems.append(f"requirements differ (manifest only: {only_m}; METADATA only: {only_t})")
    if tags is not None and set(w.tags) != set(tags):
        problems.append(f"tags {sorted(w.tags)} vs WHEEL {sorted(tags)}")
    if problems:
        report.fail(
            "manifest.metadata",
            "; ".join(problems),
            "the manifest was not written for this wheel; rebuild it with torch-fl-build",
        )
    else:
        report.ok(
            "manifest.metadata", f"name, version, tags and {len(mine)} requirement(s) agree with METADATA"
        )
    if filename is not None and w.filename != filename:
        report.warn(
            "manifest.filename",
            f"manifest names {w.filename!r}, the file is {filename!r}",
            "keep the file name torch-fl-build gave the wheel",
        )


def torch_requirement(manifest: Compatibility) -> Requirement:
    return requirement(manifest.torch.requirement, "torch.requirement")


def check_torch(manifest: Compatibility, report: SubjectReport) -> None:
    req = torch_requirement(manifest)
    built = version(manifest.torch.version, "torch.version")
    problems = []
    if canonicalize_name(req.name) != "torch":
        problems.append(f"torch.requirement names {req.name!r}, not torch")
    if not req.specifier.contains(built, prereleases=True):
        problems.append(f"the build-time torch {built} does not satisfy {req}")
    if str(req) not in {str(requirement(r, "requirement")) for r in manifest.requirements}:
        problems.append(f"{req} is not among the wheel's requirements")
    kind = manifest.bundle.kind
    if policy(kind).pins_torch and not is_exact_pin(req.specifier):
        problems.append(
            f"bundle kind {kind} bundles libtorch pieces but the torch requirement {req} is not exact"
        )
    if problems:
        report.fail("manifest.torch", "; ".join(problems), "rebuild the wheel against the torch it declares")
    else:
        report.ok("manifest.torch", f"built with torch {built}, which satisfies {req}")


def check_elf_records(
    manifest: Compatibility,
    members: list[ElfMember],
    digests: dict[str, str],
    sizes: dict[str, int],
    report: SubjectReport,
) -> None:
    records = {r.path: r for r in manifest.elf}
    problems: list[str] = []
    seen = set()
    for m in members:
        rec = records.get(m.path)
        if rec is None:
            problems.append(f"{m.path}: ELF file not recorded in the manifest")
            continue
        seen.add(m.path)
        if digests.get(m.path) != rec.sha256:
            problems.append(
                f"{m.path}: sha256 {digests.get(m.path, '?')[:16]}… but the manifest says {rec.sha256[:16]}…"
            )
        if sizes.get(m.path) != rec.size:
            problems.append(f"{m.path}: {sizes.get(m.path)} bytes but the manifest says {rec.size}")
        i = m.info
        recorded: tuple[tuple[str, object, object], ...] = (
            ("soname", rec.soname, i.soname),
            ("needed", list(rec.needed), list(i.needed)),
            ("rpath", list(rec.rpath), list(i.rpath)),
            ("runpath", list(rec.runpath), list(i.runpath)),
        )
        for key, said, actual in recorded:
            if said != actual:
                problems.append(f"{m.path}: {key} is {actual!r} but the manifest says {said!r}")
    elf_paths = {m.path for m in members}
    problems.extend(f"{path}: recorded in the manifest but not an ELF file of this wheel"
                    for path in records if path not in seen and path not in elf_paths)
    if problems:
        report.fail(
            "manifest.elf",
            f"{len(problems)} ELF record problem(s)",
            "the wheel's libraries changed after the manifest was written; rebuild the wheel",
            tuple(problems),
        )
    else:
        report.ok(
            "manifest.elf",
            f"{len(members)} ELF file(s) match their manifest records (sha256, size, "
            "SONAME, DT_NEEDED, RPATH/RUNPATH)",
        )
    bundle_dir = manifest.bundle.directory
    if bundle_dir:
        bundled = [r for r in manifest.elf if r.path.startswith(bundle_dir.rstrip("/") + "/")]
        if not bundled and policy(manifest.bundle.kind).bundles_libraries:
            report.fail(
                "manifest.bundle",
                f"bundle directory {bundle_dir} holds no recorded ELF file",
                "rebuild the wheel; the bundle stage did not run",
            )


def check_release(manifest: Compatibility, report: SubjectReport, *, release: bool) -> None:
    """Provenance a release needs; warnings otherwise."""
    missing = []
    # An SDK has a version to record where it can be read: from its version file, or (cuda-assets) from the
    # CUDA torch the libraries came from.  The host runtime's "SDK" is this source tree: it has none.
    sdk = manifest.sdk
    kind = policy(manifest.bundle.kind)
    readable = sdk.version_file is not None or kind.sdk_version_from_torch
    if sdk.version is None and readable:
        missing.append(f"sdk.version (SDK {sdk.name})")
    if kind.bundles_libtorch and manifest.vendor_torch is None:
        missing.append("vendor_torch (the libraries came from a vendor/CUDA torch)")
    comps = manifest.companion_pins()
    missing += [f"companions.{c}" for c in COMPANIONS if c not in comps]
    if not missing:
        report.ok("manifest.provenance", "SDK, vendor torch and companion versions are recorded")
    elif release:
        report.fail(
            "manifest.provenance",
            f"a release needs {', '.join(missing)}",
            "pass --sdk-version / --vendor-torch to torch-fl-build and pin the companions in manifests/",
        )
    else:
        report.warn(
            "manifest.provenance",
            f"not recorded: {', '.join(missing)}",
            "fine for a development build; --release requires them",
        )
