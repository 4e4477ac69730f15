"""Stage 4, repair: graft what remains, find the manylinux tag (auditwheel).

auditwheel's dependency walker (``lddtree.ldd``) and its manylinux policies
(``WheelPolicies``) do the analysis on the staged tree.  We do not call
``auditwheel repair`` itself: it keeps only RPATH entries that point inside the
wheel (``repair.append_rpath_within_wheel``), which would drop
``$ORIGIN/../torch/lib`` and the vendor prefixes the recipes set on purpose, and
it re-zips the wheel, which the final write does once, in parallel.

Exclusions are generated, never hand-kept: torch's own libraries (the installed
torch/lib, plus everything a vendor/CUDA torch supplies), everything bundled,
the recipe's target-side runtime libraries, and the recipe's ``[repair]
exclude`` globs (vendor driver, the CUDA runtime that pip provides).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from auditwheel.architecture import Architecture
from auditwheel.lddtree import DynamicExecutable, ldd
from auditwheel.libc import Libc
from auditwheel.policy import Policy, WheelPolicies

from .bundle import Origin, Staged
from .configure import Config
from .elf_patch import ElfPatcher
from .elf_read import is_elf, read_elf
from .errors import RepairError

__all__ = ["Repaired", "exclusions", "repair"]

#: torch's core libraries, excluded by name even where the build env's torch/lib
#: lacks one (a CUDA torch has more than a CPU one).
_TORCH_LIBS = ("libc10*.so", "libtorch*.so", "libshm.so", "libcaffe2_*.so", "libgomp*.so*",
               "libaoti_custom_ops.so", "libjitbackend_test.so", "libbackend_with_compiler.so")


@dataclass
class Repaired:
    policy: str
    tags: list[str]
    grafted: dict[str, str] = field(default_factory=dict)  # wheel path -> source path
    excluded: list[str] = field(default_factory=list)


def exclusions(config: Config, staged: Staged) -> frozenset[str]:
    names: set[str] = set(_TORCH_LIBS)
    if config.torch_lib.is_dir():
        names.update(p.name for p in config.torch_lib.iterdir() if p.is_file() and ".so" in p.name)
    names.update(Path(rel).name for rel in staged.bundled)
    for rd in config.recipe.runtime:
        names.update(rd.libraries)
    names.update(config.recipe.repair.exclude)
    return frozenset(names)


def _policies() -> WheelPolicies:
    return WheelPolicies(libc=Libc.GLIBC, arch=Architecture.detect())


def _wheel_elves(staged: Staged) -> list[Path]:
    return sorted(p for p in staged.root.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p))


def _versioned(paths: list[Path]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in paths:
        for lib, names in read_elf(p).version_needs.items():
            if lib.startswith("ld-linux"):
                continue
            out.setdefault(lib, set()).update(names)
    return out


def _external(tree: DynamicExecutable, policy: Policy, root: Path) -> dict[str, Path | None]:
    """Libraries ``tree`` needs (transitively) that neither the policy nor the wheel provides.

    The same walk as auditwheel's ``WheelPolicies.lddtree_external_references``,
    for the one policy chosen; that function evaluates every policy and re-reads
    the whole symbol table of each file per policy for its blacklist check, which
    costs about 15 s on libtorch_cpu.so.  Excluded libraries never enter the tree.
    """
    def keep(soname: str) -> bool:
        return "ld-linux" not in soname and soname not in policy.whitelist

    out: dict[str, Path | None] = {}
    seen: set[str] = set()
    todo = [n for n in tree.needed if keep(n)]
    while todo:
        lib = todo.pop()
        if lib in seen or lib not in tree.libraries:
            continue
        seen.add(lib)
        dep = tree.libraries[lib]
        real = dep.realpath
        if real is not None and (real == root or root in real.parents):
            continue  # resolved inside the wheel through its RPATH
        out[lib] = real
        todo.extend(n for n in dep.needed if keep(n))
    return out


def _hashed_name(src: Path) -> str:
    h = hashlib.sha256()
    with src.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    base, _, ext = src.name.partition(".")
    return f"{base}-{h.hexdigest()[:8]}.{ext}"


def _read_tags(staged: Staged) -> list[str]:
    wheel_file = staged.root / staged.dist_info / "WHEEL"
    return [line.split(":", 1)[1].strip() for line in wheel_file.read_text().splitlines()
            if line.startswith("Tag:")]


def _write_tags(staged: Staged, tags: list[str]) -> None:
    wheel_file = staged.root / staged.dist_info / "WHEEL"
    # WHEEL is an RFC 822 header block: a blank line would end it, so the tags go
    # before any trailing blank lines (scikit-build-core writes one).
    lines = [ln for ln in wheel_file.read_text().splitlines() if not ln.startswith("Tag:")]
    while lines and not lines[-1].strip():
        lines.pop()
    lines += [f"Tag: {t}" for t in tags]
    wheel_file.write_text("\n".join(lines) + "\n")


def repair(config: Config, staged: Staged, patcher: ElfPatcher,
           progress: Callable[[str], None] = lambda _: None) -> Repaired:
    policies = _policies()
    exclude = exclusions(config, staged)
    elves = _wheel_elves(staged)
    progress("analysing dependencies")
    trees = {p: ldd(p, exclude=exclude) for p in elves}

    def choose(extra: list[Path]) -> Policy:
        return policies.versioned_symbols_policy(_versioned(elves + extra))

    policy = choose([])
    externals: dict[str, Path] = {}
    needers: dict[str, set[Path]] = {}
    for _ in range(2):  # grafted libraries' symbol versions may lower the policy once
        externals.clear()
        needers.clear()
        for path, tree in trees.items():
            for soname, real in _external(tree, policy, staged.root).items():
                if real is None:
                    rel = path.relative_to(staged.root).as_posix()
                    raise RepairError("a dependency is neither in the wheel, excluded, nor on this system",
                                      f"{soname} needed by {rel}",
                                      "install it in the build environment or add it to the recipe's [repair] exclude")
                externals[soname] = Path(real)
                # Only direct dependents get their DT_NEEDED rewritten.
                if soname in tree.needed:
                    needers.setdefault(soname, set()).add(path)
        new_policy = choose(list(externals.values()))
        if new_policy == policy:
            break
        policy = new_policy

    result = Repaired(policy.name, [], excluded=sorted(exclude))
    if externals:
        libs_dir_rel = f"{staged.dist_info.split('-', 1)[0]}.libs"
        libs_dir = staged.root / libs_dir_rel
        libs_dir.mkdir(exist_ok=True)
        renamed: dict[str, str] = {}
        for soname, src in sorted(externals.items()):
            new_name = _hashed_name(src)
            dest = libs_dir / new_name
            progress(f"grafting {soname}")
            shutil.copyfile(src, dest)
            os.chmod(dest, 0o755)
            renamed[soname] = new_name
            rel = f"{libs_dir_rel}/{new_name}"
            staged.origins[rel] = Origin("grafted", str(src))
            result.grafted[rel] = str(src)
        # Grafted libraries may need one another: point them at each other.
        for new_name in renamed.values():
            dest = libs_dir / new_name
            patcher.set_soname(dest, new_name)
            deps = [n for n in read_elf(dest).needed if n in renamed]
            for dep in deps:
                patcher.replace_needed(dest, dep, renamed[dep])
            patcher.set_rpath(dest, ["$ORIGIN"] if deps else [])
        for soname, paths in needers.items():
            for path in paths:
                patcher.replace_needed(path, soname, renamed[soname])
        for path in sorted({p for ps in needers.values() for p in ps}):
            info = read_elf(path)
            rel_dir = os.path.relpath(libs_dir, path.parent)
            patcher.set_rpath(path, [*(info.runpath or info.rpath), f"$ORIGIN/{rel_dir}"])
        patcher.apply(on_file=lambda p: progress(f"patched {p.name}"))

    old = _read_tags(staged)
    platforms = [policy.name, *policy.aliases]
    tags: list[str] = []
    manylinux_first = sorted(platforms, key=lambda p: (not p.startswith("manylinux_"), p))
    for tag in old:
        py, abi, _ = tag.split("-")
        tags.extend(f"{py}-{abi}-{plat}" for plat in manylinux_first)
    result.tags = list(dict.fromkeys(tags))
    _write_tags(staged, result.tags)
    return result
