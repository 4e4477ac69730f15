"""``torch-fl-build``: recipe + installed torch + SDK -> one verified wheel.

A thin command: parse flags, run the stages of ``pipeline`` in data-flow order,
show progress, print the summary (``--json``: one JSON document on stdout).
Every ``PipelineError`` is caught here and printed as one line; exit codes come
from ``errors``.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from . import __version__
from .errors import EXIT_CHECK_FAILED, EXIT_OK, PipelineError
from .pipeline import Options, Reporter, run

__all__ = ["main"]

#: Version of the --json summary document (its "version" key).
SUMMARY_VERSION = 1


def _find_source(start: Path) -> Path:
    for d in (start, *start.parents):
        if (d / "bundlers").is_dir() and (d / "pyproject.toml").is_file():
            return d
    return start


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torch-fl-build",
        description="Build, bundle, repair, describe and verify the torch_fl wheel of one platform.",
    )
    p.add_argument("--platform", required=True, help="recipe name in bundlers/ (host, cuda, metax, ...)")
    p.add_argument("--sdk-root", type=Path,
                   help="vendor SDK directory (default: the recipe's env variable, then prefix)")
    p.add_argument("--sdk-version", help="SDK version (default: read from the SDK tree's version file)")
    p.add_argument("--vendor-torch", type=Path, help="vendor or CUDA torch: a torch-*.whl or a torch/lib directory")
    p.add_argument("--out", type=Path, default=Path("dist"),
                   help="directory the verified wheel is moved into (default: dist)")
    p.add_argument("--source", type=Path,
                   help="torch_fl source tree (default: the checkout around the current directory)")
    p.add_argument("--from-wheel", type=Path, help="skip the build stage and start from this built torch_fl wheel")
    p.add_argument("--compress-level", type=int, default=6, help="deflate level of the final wheel, 0-9 (default 6)")
    p.add_argument("--jobs", type=int, default=None, help="compression threads (default: CPU count)")
    p.add_argument("--preflight", choices=("on", "off"), default="on",
                   help="verify: torch-fl-preflight --release against the target (on), or the wheel alone (off)")
    p.add_argument("--target-python", type=Path,
                   help="interpreter of the environment preflight proves the wheel against (default: this one); "
                        "for cuda-assets, verify adds the wheel's unmet requirements to it with pip")
    p.add_argument("--index-url", metavar="URL",
                   help="index verify downloads the wheel's requirements from (cuda-assets; default: the recipe's "
                        "vendor_torch index), into ${XDG_CACHE_HOME:-~/.cache}/torch_fl/requirements once")
    p.add_argument("--find-links", metavar="DIR|URL", action="append", default=[],
                   help="wheels of the wheel's requirements (repeatable); without --index-url nothing is downloaded")
    p.add_argument("--keep-work", action="store_true", help="keep the temporary work directory")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON document on stdout")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"torch-fl-build {__version__}")
    return p


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    w = summary["wheel"]
    stand_in = " — STAND-IN, not for release" if summary["stand_in"] else ""
    table = Table(title=f"torch_fl {summary['platform']} ({summary['kind']}){stand_in}", show_header=False,
                  title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("wheel", w["path"])
    table.add_row("size", f"{w['size']:,} bytes")
    table.add_row("sha256", w["sha256"])
    table.add_row("tags", ", ".join(w["tags"]))
    table.add_row("requires", "\n".join(summary["requirements"]))
    if summary.get("sdk_version"):
        table.add_row("sdk", summary["sdk_version"])
    for item in summary["bundled"]:
        table.add_row("bundled", f"{item['path']}  <- {item.get('source') or 'built'}")
    for item in summary["grafted"]:
        table.add_row("grafted", f"{item['path']}  <- {item['source']}")
    v = summary["verify"]
    checks = v.get("checks") or {}
    table.add_row("verify", f"preflight {v['preflight']}"
                  + (f" ({checks.get('pass', 0)} passed, {checks.get('warn', 0)} warned)" if checks else ""))
    if v.get("target"):
        t = v["target"]
        table.add_row("target", f"{t['python']} + {len(t['installed'])} requirement(s) by pip; "
                      f"cache {t['cache']} ({t['cache_bytes'] / 2**30:.2f} GiB)")
    if v.get("host_requirements"):
        table.add_row("host needs", ", ".join(v["host_requirements"]) + " (the target's own; not on this runner)")
    table.add_row("time", "  ".join(f"{k} {v:.1f}s" for k, v in summary["timings"].items()))
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    source = (args.source or _find_source(Path.cwd())).resolve()
    options = Options(
        platform=args.platform, source_dir=source, out_dir=args.out.resolve(),
        sdk_root=args.sdk_root, sdk_version=args.sdk_version, vendor_torch=args.vendor_torch,
        from_wheel=args.from_wheel, compress_level=args.compress_level, jobs=args.jobs,
        preflight=args.preflight, keep_work=args.keep_work, target_python=args.target_python,
        index_url=args.index_url, find_links=tuple(args.find_links),
    )
    # Progress and stage lines go to stderr in both modes; stdout carries only the summary.
    reporter = Reporter(enabled=True)
    try:
        with reporter:
            summary = run(options, reporter)
    except PipelineError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"torch-fl-build: error: {exc.line()}", file=sys.stderr)
        if args.json:
            print(json.dumps({"version": SUMMARY_VERSION, "ok": False, "exit_code": exc.exit_code,
                              "error": {"type": type(exc).__name__, "problem": exc.problem,
                                        "value": None if exc.value is None else str(exc.value), "fix": exc.fix}}))
        return exc.exit_code
    except KeyboardInterrupt:
        print("torch-fl-build: interrupted; --out is untouched", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - an unexpected failure is a bug: one line unless --debug
        if args.debug:
            traceback.print_exc()
        print(f"torch-fl-build: internal error: {type(exc).__name__}: {exc} — rerun with --debug and report it",
              file=sys.stderr)
        if args.json:
            print(json.dumps({"version": SUMMARY_VERSION, "ok": False, "exit_code": EXIT_CHECK_FAILED,
                              "error": {"type": type(exc).__name__, "problem": str(exc), "value": None, "fix": ""}}))
        return EXIT_CHECK_FAILED
    summary = {"version": SUMMARY_VERSION, "ok": True, **summary}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
