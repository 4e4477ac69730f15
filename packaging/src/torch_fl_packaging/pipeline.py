"""The release, stage by stage: configure -> build -> bundle -> repair -> manifest -> write -> verify.

Nothing reaches ``--out`` until every stage has passed: the wheel is written in
a private work directory and moved into ``--out`` last, atomically where the
file system allows.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_fl_preflight.compatibility import Compatibility

from .build import BuiltWheel, build
from .bundle import Staged, bundle
from .configure import Config, configure
from .elf_patch import ElfPatcher
from .errors import BuildError, WheelWriteError
from .manifest import sha256_file, write_manifest
from .repair import Repaired, repair
from .verify import verify
from .wheelfile import write_wheel

__all__ = ["Options", "Reporter", "run", "wheel_filename"]


@dataclass(frozen=True)
class Options:
    platform: str
    source_dir: Path
    out_dir: Path
    sdk_root: Path | None = None
    sdk_version: str | None = None
    vendor_torch: Path | None = None
    from_wheel: Path | None = None
    compress_level: int = 6
    jobs: int | None = None
    preflight: str = "on"
    keep_work: bool = False
    target_python: Path | None = None
    index_url: str | None = None
    find_links: tuple[str, ...] = ()


class Reporter:
    """Progress on stderr (rich) and the per-stage timings."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.timings: dict[str, float] = {}
        self._progress: Any = None
        self._task: Any = None
        self._console: Any = None

    def __enter__(self) -> Reporter:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn
            from rich.text import Text

            class _BytesColumn(DownloadColumn):
                """Bytes done/total for the stages that have a total (write), nothing for the others."""

                def render(self, task: Any) -> Text:
                    return super().render(task) if task.total else Text("")

            self._console = Console(stderr=True)
            self._progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[stage]}"),
                                      BarColumn(bar_width=24), _BytesColumn(), TextColumn("{task.description}"),
                                      console=self._console, transient=True,
                                      disable=not self._console.is_terminal)
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @contextmanager
    def stage(self, name: str, total: int | None = None) -> Iterator[None]:
        start = time.perf_counter()
        if self._progress is not None:
            self._task = self._progress.add_task("", stage=name, total=total)
        try:
            yield
        finally:
            self.timings[name] = round(time.perf_counter() - start, 3)
            if self._progress is not None and self._task is not None:
                self._progress.remove_task(self._task)
                self._task = None
        if self._console is not None:
            self._console.print(f"[green]✓[/green] {name} [dim]{self.timings[name]:.1f}s[/dim]")

    def status(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=text[-80:])

    def advance(self, name: str, n: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=n, description=name[-60:])


def wheel_filename(name: str, version: str, tags: list[str]) -> str:
    pys = sorted({t.split("-")[0] for t in tags})
    abis = sorted({t.split("-")[1] for t in tags})
    plats = list(dict.fromkeys(t.split("-")[2] for t in tags))
    return f"{name}-{version}-{'.'.join(pys)}-{'.'.join(abis)}-{'.'.join(plats)}.whl"


def _publish(src: Path, out_dir: Path) -> Path:
    """Move the verified wheel into --out; an existing file of that name is replaced atomically."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WheelWriteError("cannot create --out", out_dir, str(exc.strerror)) from None
    dest = out_dir / src.name
    try:
        os.replace(src, dest)
    except OSError:
        partial = out_dir / f".{src.name}.partial"
        try:
            shutil.copyfile(src, partial)
            os.replace(partial, dest)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise WheelWriteError("cannot write into --out", out_dir, str(exc.strerror)) from None
    return dest


def assemble(config: Config, built: BuiltWheel, work: Path, reporter: Reporter, *,
             jobs: int | None = None) -> tuple[Staged, Repaired, Compatibility, Path]:
    """bundle -> repair -> manifest -> write: from the built wheel to the final one in ``work``."""
    patcher = ElfPatcher(config.patchelf)
    with reporter.stage("bundle"):
        staged = bundle(config, built, work / "stage", patcher, progress=reporter.status)
    with reporter.stage("repair"):
        repaired = repair(config, staged, patcher, progress=reporter.status)
    filename = wheel_filename("torch_fl", config.wheel_version, repaired.tags)
    with reporter.stage("manifest"):
        manifest = write_manifest(config, staged, repaired, filename)
    total = sum(p.stat().st_size for p in staged.root.rglob("*") if p.is_file())
    final = work / filename
    with reporter.stage("write", total=total):
        write_wheel(staged.root, staged.dist_info, final, level=config.compress_level,
                    epoch=config.source_date_epoch, workers=jobs,
                    digests={r.path: r.sha256 for r in manifest.elf},
                    progress=reporter.advance)
    return staged, repaired, manifest, final


def run(options: Options, reporter: Reporter) -> dict[str, Any]:
    with reporter.stage("configure"):
        config = configure(
            platform=options.platform, source_dir=options.source_dir, out_dir=options.out_dir,
            sdk_root=options.sdk_root, sdk_version=options.sdk_version,
            vendor_torch=options.vendor_torch, from_wheel=options.from_wheel,
            compress_level=options.compress_level, target_python=options.target_python,
        )
    work = Path(tempfile.mkdtemp(prefix=f"torch-fl-build-{config.recipe.platform}-"))
    keep = options.keep_work
    try:
        with reporter.stage("build"):
            built = build(config, work, log=reporter.status)
        staged, repaired, manifest, final = assemble(config, built, work, reporter, jobs=options.jobs)
        with reporter.stage("verify"):
            verified = verify(config, final, work, preflight=options.preflight, index_url=options.index_url,
                              find_links=options.find_links, progress=reporter.status)
        size = final.stat().st_size
        digest = sha256_file(final)
        dest = _publish(final, config.out_dir)
    except BuildError:
        # The build log is the only way to see why a compile failed: keep it.
        keep = True
        raise
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    by_path = {r.path: r for r in manifest.elf}
    return {
        "platform": config.recipe.platform,
        "kind": config.recipe.kind,
        "stand_in": config.recipe.stand_in,
        "wheel": {"path": str(dest), "filename": dest.name, "size": size, "sha256": digest,
                  "version": config.wheel_version, "tags": repaired.tags},
        "torch": {"version": config.torch.version, "requirement": config.torch_requirement},
        "sdk_version": config.sdk_version,
        "vendor_torch": None if config.vendor is None else
        {"version": config.vendor.info.version, "source": config.vendor.source},
        "requirements": list(config.requirements),
        "extras": {name: list(reqs) for name, reqs in config.extras.items()},
        "companions": dict(config.companions),
        "bundled": [{"path": rel, "source": by_path[rel].source, "size": by_path[rel].size}
                    for rel in staged.bundled],
        "grafted": [{"path": rel, "source": src} for rel, src in repaired.grafted.items()],
        "verify": {"members": verified.members, "elf_records": verified.elf_records,
                   "preflight": verified.preflight, "checks": verified.checks,
                   "host_requirements": list(verified.host_requirements), "target": verified.target},
        "timings": dict(reporter.timings),
        "work_dir": str(work) if options.keep_work else None,
    }
