"""The static load gates: would the dynamic loader accept every ELF file of the wheel, once installed?

For each ELF file of the payload, at its installed path:

* needed   - every DT_NEEDED resolves, in the loader's order (glibc elf/dl-load.c, _dl_map_object):
             libraries already in the process (the interpreter's own closure, and what `import torch`
             or torch_fl's bootstrap has loaded by then), DT_RPATH of the object and of its loaders
             (ignored when the object has DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH, then the target
             environment's torch/lib, its nvidia/*/lib package directories and the manifest's runtime
             directories (where the bootstrap points the loader), then /etc/ld.so.cache and the
             built-in directories. A candidate of another ELF class or machine is skipped, as the
             loader skips it.
* versions - every DT_VERNEED version (GLIBC_2.34, GLIBCXX_3.4.30, ...) is defined by the library
             that resolved for that name; weak version needs are allowed to be missing.
* symbols  - every undefined, non-weak dynamic symbol is defined in the object's lookup scope: the
             interpreter's closure, the libraries preloaded RTLD_GLOBAL, the object and its resolved
             dependency closure. Versioned references need that version; GNU_UNIQUE counts.
* rpath    - no RPATH/RUNPATH entry is absolute outside the manifest's declared prefixes, nor
             relative without $ORIGIN (which would resolve against the working directory).

A library the manifest names in runtime.system_libraries (the vendor driver) belongs to the target's
system. Where the caller says the checked environment stands in for a target without it (a build
runner without a GPU), its absence is recorded as a host requirement, and the undefined symbols of an
ELF file that needs it directly are taken to bind there, instead of failing elf.needed/elf.symbols.

Nothing is loaded or executed: files are read with elf_reader.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from torch_fl_preflight import ld_cache
from torch_fl_preflight.compatibility import Compatibility
from torch_fl_preflight.elf_reader import ElfInfo, read_elf_file
from torch_fl_preflight.errors import ElfError
from torch_fl_preflight.host_env import HostEnv, nvidia_lib_dirs
from torch_fl_preflight.kinds import NOTHING_BUNDLED, policy
from torch_fl_preflight.payload import ElfMember
from torch_fl_preflight.report import Finding, Status, SubjectReport

MAX_DETAILS = 5000


@dataclass(frozen=True)
class Resolved:
    name: str  # the DT_NEEDED string
    path: str | None  # None: not found
    via: str  # loaded, rpath, ld_library_path, runpath, torch, nvidia, runtime, cache, default, wheel


@dataclass
class Closure:
    """One object's dependency closure, breadth-first, as the loader builds its local scope."""

    root: str
    order: list[str] = field(default_factory=list)  # installed paths, root first
    edges: dict[str, list[Resolved]] = field(default_factory=dict)  # object path -> its resolved needs
    missing: list[tuple[str, str]] = field(default_factory=list)  # (needed, required by)


def expand_origin(entry: str, origin_dir: str) -> str | None:
    """$ORIGIN / ${ORIGIN} -> the object's directory; other dynamic tokens ($LIB, $PLATFORM) -> None."""
    out = entry.replace("${ORIGIN}", origin_dir).replace("$ORIGIN", origin_dir)
    if "$" in out:
        return None
    return os.path.normpath(out)


class LoaderModel:
    """The loader's view of one target environment, with the payload laid out at its install paths."""

    def __init__(self, host: HostEnv, members: list[ElfMember], manifest: Compatibility | None) -> None:
        self.host = host
        self.virtual: dict[str, ElfInfo] = {m.installed: m.info for m in members}
        self._disk: dict[str, ElfInfo | None] = {}
        self.cache = ld_cache.system_cache()
        self.default_dirs = ld_cache.default_dirs(host.machine)
        self.torch_lib = host.torch.lib if host.torch else None
        self.nvidia_dirs = nvidia_lib_dirs(host)
        self.runtime_dirs = runtime_directories(manifest, host.environ) if manifest else []
        self.kind = manifest.bundle.kind if manifest else NOTHING_BUNDLED
        bundle_dir = manifest.bundle.directory if manifest else None
        self.bundle = [m for m in members if bundle_dir and os.path.dirname(m.path) == bundle_dir.rstrip("/")]
        try:
            self.exe_info: ElfInfo | None = read_elf_file(host.executable_real)
        except ElfError:
            self.exe_info = None
        self.loaded: dict[str, str] = {}
        self.global_scope: list[str] = []
        #: The objects ``import torch`` maps as one dlopen group (torch's ``_C`` and its closure): each of
        #: them binds its symbols in the whole group, not only in its own dependencies.
        self.torch_group: list[str] = []
        self._build_process()

    # --- files -----------------------------------------------------------------------------------
    def info(self, path: str) -> ElfInfo | None:
        if path in self.virtual:
            return self.virtual[path]
        if path not in self._disk:
            try:
                self._disk[path] = read_elf_file(path) if os.path.isfile(path) else None
            except ElfError:
                self._disk[path] = None  # the loader would skip a file it cannot map
        return self._disk[path]

    def exists(self, path: str) -> bool:
        return path in self.virtual or os.path.isfile(path)

    # --- the process before the plugin loads --------------------------------------------------------
    def _build_process(self) -> None:
        if self.exe_info is not None:
            exe = self.host.executable_real
            self.virtual.setdefault(exe, self.exe_info)
            c = self.closure(exe)
            self.global_scope.extend(c.order)
            for p in c.order:
                soname = self._soname(p)
                self.loaded.setdefault(soname, p)
        # cuda-assets: the bootstrap dlopens the bundled libraries RTLD_GLOBAL before torch initialises;
        # forked-libtorch: the bootstrap's view of torch/lib resolves torch's names to the bundled copies.
        rules = policy(self.kind)
        if rules.loads_before_torch:
            for m in self.bundle:
                self.loaded.setdefault(m.info.soname or os.path.basename(m.installed), m.installed)
            if rules.global_preload:
                self.global_scope.extend(m.installed for m in self.bundle)
        if rules.replaces_torch_libraries and self.torch_lib:
            # forked-libtorch: torch's _C, opened through the view, loads the bundled copies as its closure; a
            # bundled library that does not link a sibling it uses (libtorch_nvshmem uses libc10_cuda) binds
            # there, as the loader binds it.
            torch_dir = os.path.dirname(self.torch_lib.rstrip("/"))
            extensions = sorted(n for n in os.listdir(torch_dir) if n.startswith("_C.") and n.endswith(".so")) \
                if os.path.isdir(torch_dir) else []
            if extensions:
                self.torch_group = self.closure(os.path.join(torch_dir, extensions[0])).order

    def _soname(self, path: str) -> str:
        info = self.info(path)
        return (info.soname if info and info.soname else None) or os.path.basename(path)

    # --- search ----------------------------------------------------------------------------------
    def _dirs_from(self, entries: Iterable[str], obj_path: str) -> list[str]:
        out = []
        for e in entries:
            d = expand_origin(e, os.path.dirname(obj_path))
            if d is not None:
                out.append(d)
        return out

    def find(self, name: str, obj_path: str, loaders: list[str]) -> Resolved:
        obj = self.info(obj_path)
        if obj is None:  # closure() only asks on behalf of objects it could read
            return Resolved(name, None, "")
        want = obj.abi_key

        def ok(path: str) -> bool:
            i = self.info(path)
            return i is not None and i.abi_key == want

        if "/" in name:
            p = (
                os.path.normpath(os.path.join(os.path.dirname(obj_path), name))
                if not name.startswith("/")
                else name
            )
            return Resolved(name, p if ok(p) else None, "path")
        if name in self.loaded and ok(self.loaded[name]):
            return Resolved(name, self.loaded[name], "loaded")
        searches: list[tuple[str, list[str]]] = []
        if not obj.runpath:
            rp = self._dirs_from(obj.rpath, obj_path)
            for ld in loaders:  # DT_RPATH of each loader up the chain, unless it has DT_RUNPATH
                li = self.info(ld)
                if li is not None and not li.runpath:
                    rp.extend(self._dirs_from(li.rpath, ld))
            searches.append(("rpath", rp))
        searches.append(("ld_library_path", list(self.host.ld_library_path)))
        searches.append(("runpath", self._dirs_from(obj.runpath, obj_path)))
        if self.torch_lib:
            searches.append(("torch", [self.torch_lib]))
        searches.append(("nvidia", self.nvidia_dirs))
        searches.append(("runtime", self.runtime_dirs))
        for via, dirs in searches:
            for d in dirs:
                cand = os.path.join(d, name)
                if self.exists(cand) and ok(cand):
                    return Resolved(name, cand, via)
        for cand in self.cache.get(name, []):
            if ok(cand):
                return Resolved(name, cand, "cache")
        for d in self.default_dirs:
            cand = os.path.join(d, name)
            if os.path.isfile(cand) and ok(cand):
                return Resolved(name, cand, "default")
        return Resolved(name, None, "")

    def closure(self, root: str) -> Closure:
        c = Closure(root)
        seen = {root}
        queue: deque[tuple[str, list[str]]] = deque([(root, [])])
        while queue:
            path, loaders = queue.popleft()
            c.order.append(path)
            info = self.info(path)
            if info is None:
                continue
            edges = []
            for need in info.needed:
                r = self.find(need, path, loaders)
                edges.append(r)
                if r.path is None:
                    c.missing.append((need, path))
                elif r.path not in seen:
                    seen.add(r.path)
                    queue.append((r.path, [path, *loaders]))
            c.edges[path] = edges
        return c


def runtime_directories(manifest: Compatibility, environ: dict[str, str]) -> list[str]:
    """The manifest's target-side directories, re-rooted where their environment variable is set.

    A directory's `env` names the SDK root variable (e.g. MACA_PATH). When it is set, the part of
    the path under the longest matching declared prefix (sdk.root.default, runtime.prefixes) moves
    under the variable's value; when no prefix matches, the value is the directory itself.
    """
    roots = [manifest.sdk.root.default] if manifest.sdk.root else []
    prefixes = sorted([*roots, *(manifest.runtime.prefixes or ())], key=len, reverse=True)
    out = []
    for d in manifest.runtime.directories:
        path = d.path
        env = d.env
        if env and environ.get(env):
            root = environ[env]
            for p in prefixes:
                if path == p or path.startswith(p.rstrip("/") + "/"):
                    path = os.path.join(root, os.path.relpath(path, p))
                    break
            else:
                path = root
        out.append(os.path.normpath(path))
    return out


def declared_prefixes(manifest: Compatibility) -> list[str]:
    rt = manifest.runtime
    if rt.prefixes is not None:
        out = list(rt.prefixes)
    else:
        out = [os.path.dirname(d.path.rstrip("/")) or "/" for d in rt.directories]
        out += [d.path for d in rt.directories]
    root = manifest.sdk.root
    if root:
        out.append(root.default)
    return [os.path.normpath(p) for p in out]


@dataclass(frozen=True)
class GateResult:
    external: dict[str, dict[str, str | None]]  # member -> {needed soname: resolved path outside payload}
    missing_symbols: dict[str, list[str]]
    host_requirements: dict[str, list[str]] = field(default_factory=dict)  # absent system SONAME -> needers


def system_libraries(manifest: Compatibility | None) -> frozenset[str]:
    return frozenset(manifest.runtime.system_libraries or ()) if manifest else frozenset()


def run_gates(
    model: LoaderModel,
    members: list[ElfMember],
    manifest: Compatibility | None,
    report: SubjectReport,
    *,
    defer_system: bool = False,
) -> GateResult:
    """`defer_system`: the environment stands in for a target whose system provides the manifest's
    runtime.system_libraries; their absence is a host requirement here, not a failure."""
    system = system_libraries(manifest)
    deferred = system if defer_system else frozenset()
    host_required: dict[str, list[str]] = {}
    deferred_symbols: list[str] = []
    missing_needed: list[str] = []
    missing_versions: list[str] = []
    missing_symbols: dict[str, list[str]] = {}
    bad_rpath: list[str] = []
    external: dict[str, dict[str, str | None]] = {}
    prefixes = declared_prefixes(manifest) if manifest else []
    payload_paths = {m.installed for m in members}
    n_refs = 0

    for m in members:
        c = model.closure(m.installed)
        for need, by in c.missing:
            who = m.path if by == m.installed else f"{m.path} (via {os.path.basename(by)})"
            if need in deferred:
                host_required.setdefault(need, []).append(who)
            else:
                missing_needed.append(f"{who}: {need} not found")
        ext: dict[str, str | None] = {}
        for obj in c.order:
            for r in c.edges.get(obj, []):
                if r.path is None or r.path not in payload_paths:
                    ext.setdefault(r.name, r.path)
        external[m.path] = ext

        # versions: each DT_VERNEED file must define the versions (dl-version.c, match_symbol)
        direct = {r.name: r.path for r in c.edges.get(m.installed, [])}
        for vn in m.info.verneed:
            target = direct.get(vn.file)
            tinfo = model.info(target) if target else None
            if tinfo is None:
                continue  # already reported as a missing DT_NEEDED
            have = set(tinfo.verdef)
            for vname, weak in vn.versions:
                if not weak and vname not in have:
                    missing_versions.append(f"{m.path}: {vn.file} ({target}) lacks version {vname}")

        # symbols: the lookup scope is the global scope, then the local scope of the group it loads in
        group = model.torch_group if m.installed in model.torch_group else []
        scope_paths = list(dict.fromkeys([*model.global_scope, *group, *c.order]))
        scope = [i for i in (model.info(p) for p in scope_paths) if i is not None]
        gone: list[str] = []
        for ref in m.info.undefined:
            if ref.weak:
                continue
            n_refs += 1
            if not any(s.defines(ref.name, ref.version) for s in scope):
                gone.append(ref.name + (f"@{ref.version}" if ref.version else ""))
        absent_direct = [n for n in m.info.needed if n in deferred and n in host_required]
        if gone and absent_direct and all(need in deferred for need, _by in c.missing):
            # The object links the system library itself and nothing else is missing from its scope:
            # what binds nowhere here binds in it there.
            source = " or ".join(absent_direct)
            deferred_symbols += [f"{m.path}: {s} (from {source} on the target)" for s in gone]
        elif gone:
            missing_symbols[m.path] = gone

        for kind, entries in (("RPATH", m.info.rpath), ("RUNPATH", m.info.runpath)):
            for e in entries:
                if e.startswith(("$ORIGIN", "${ORIGIN}")):
                    continue
                if not e.startswith("/"):
                    bad_rpath.append(f"{m.path}: {kind} {e!r} is relative without $ORIGIN")
                elif not any(e == p or e.startswith(p.rstrip("/") + "/") for p in prefixes):
                    bad_rpath.append(f"{m.path}: {kind} {e!r} is outside the declared prefixes {prefixes}")

    n = len(members)
    if host_required:
        needers = tuple(f"{lib}: needed by {who}"
                        for lib, whos in sorted(host_required.items()) for who in whos)
        report.add(Finding(
            "elf.system",
            Status.SKIP,
            f"{', '.join(sorted(host_required))}: the target system's (runtime.system_libraries), absent "
            f"here; a host requirement, checked on the target; {len(deferred_symbols)} symbol(s) bind there",
            details=(needers + tuple(deferred_symbols))[:MAX_DETAILS],
        ))
        report.facts["host_requirements"] = sorted(host_required)
    absent_system = sorted({d.rsplit(": ", 1)[1].split(" ")[0] for d in missing_needed} & system)
    if missing_needed:
        report.fail(
            "elf.needed",
            f"{len(missing_needed)} DT_NEEDED libraries would not be found",
            (f"{', '.join(absent_system)} come(s) with the target's driver: install the vendor driver; "
             if absent_system else "")
            + "install what provides them (the wheel's requirements, the vendor runtime) or fix the "
            "wheel's RPATH",
            tuple(missing_needed[:MAX_DETAILS]),
        )
    else:
        report.ok("elf.needed", f"every DT_NEEDED of {n} ELF file(s) resolves")
    if missing_versions:
        report.fail(
            "elf.versions",
            f"{len(missing_versions)} symbol version(s) missing on this host",
            "the host's glibc/libstdc++ is older than the wheel needs; use a wheel built for an "
            "older toolchain (lower manylinux tag) or upgrade the system libraries",
            tuple(missing_versions[:MAX_DETAILS]),
        )
    else:
        report.ok("elf.versions", "every required symbol version (GLIBC_*, GLIBCXX_*, ...) is provided")
    if missing_symbols:
        total = sum(len(v) for v in missing_symbols.values())
        details = tuple(f"{p}: {s}" for p, syms in missing_symbols.items() for s in syms)
        report.fail(
            "elf.symbols",
            f"{total} undefined symbol(s) in {len(missing_symbols)} file(s) are defined "
            "nowhere in their load scope",
            "the libraries they expect differ from the installed ones (another torch build?); "
            "install the torch the wheel requires",
            details[:MAX_DETAILS],
        )
    else:
        report.ok(
            "elf.symbols",
            f"all {n_refs - len(deferred_symbols)} undefined non-weak symbol references bind"
            + (f" ({len(deferred_symbols)} more in the target's system libraries)" if deferred_symbols else ""),
        )
    if bad_rpath:
        report.fail(
            "elf.rpath",
            f"{len(bad_rpath)} RPATH/RUNPATH entries point outside the install",
            "rebuild with $ORIGIN-relative RPATHs or declare the vendor prefix in the recipe",
            tuple(bad_rpath),
        )
    else:
        report.ok("elf.rpath", "RPATH/RUNPATH entries are $ORIGIN-relative or under declared prefixes")
    return GateResult(external, missing_symbols, host_required)
