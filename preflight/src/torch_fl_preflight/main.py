"""torch-fl-preflight: a thin command line over checker; every error area is caught here.

Exit status: 0 every required check passed, 1 a check failed, 2 unusable input or usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence

from torch_fl_preflight import __version__, release_table
from torch_fl_preflight.checker import Options, check_installed, check_wheel
from torch_fl_preflight.errors import HostProbeError, PreflightError, UsageError
from torch_fl_preflight.host_checks import HostOptions
from torch_fl_preflight.host_env import HostEnv, HostProbe
from torch_fl_preflight.report import SubjectReport, exit_code, to_json, to_text

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_UNUSABLE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, f"see {self.prog} --help")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="torch-fl-preflight",
        description="Check, before installing or importing, whether a torch_fl wheel will work here. "
        "Reads files and metadata only; never imports torch or loads a library.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--wheel", nargs="+", metavar="WHL", help="wheel file(s) to check (not installed)")
    src.add_argument(
        "--installed", action="store_true", help="check the torch_fl installed in the target environment"
    )
    p.add_argument(
        "--python",
        metavar="PATH",
        help="target interpreter (default: the one running preflight); asked with a small stdlib script",
    )
    p.add_argument(
        "--platform", help="require the wheel to be built for this platform (host, cuda, metax, ...)"
    )
    p.add_argument(
        "--sdk-version", help="the vendor SDK version installed on the target (else read from the SDK tree)"
    )
    p.add_argument(
        "--require-sdk", action="store_true", help="fail when the SDK version cannot be determined"
    )
    p.add_argument(
        "--release",
        action="store_true",
        help="release gate: also require provenance (SDK, vendor torch, companion versions)",
    )
    p.add_argument(
        "--check-installed",
        action="store_true",
        help="also require every Requires-Dist to be installed (and, with --installed, every file to "
        "match RECORD)",
    )
    p.add_argument(
        "--check-build-env",
        action="store_true",
        help="require the target's torch to be the very build the wheel was compiled against",
    )
    p.add_argument(
        "--strict-tested",
        action="store_true",
        help="treat differences from the tested torch/SDK versions as failures",
    )
    p.add_argument("--no-elf-gates", action="store_true", help="skip the ELF load gates")
    # One output form per run: the table is Markdown by definition, and --json's report already
    # carries each wheel's facts (the table's columns) under subjects[].facts.
    form = p.add_mutually_exclusive_group()
    form.add_argument(
        "--markdown-table",
        action="store_true",
        help="print the release table of the given wheels after checking each one alone (identity, RECORD, "
        "manifest, ELF records); fails when one fails, and with --release when one lacks provenance",
    )
    form.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument(
        "--recipe-only",
        action="append",
        default=[],
        metavar="PLATFORM",
        help="with --markdown-table: list PLATFORM as a row without a wheel, 'recipe only' (its runtime has no "
        "adapter yet, so it has no release); repeatable",
    )
    p.add_argument("--verbose", "-v", action="store_true", help="show skipped checks and every detail")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def run(argv: Sequence[str] | None) -> tuple[int, str]:
    args = build_parser().parse_args(argv)
    if args.markdown_table:
        if not args.wheel:
            raise UsageError("--markdown-table needs --wheel", "pass the release wheels with --wheel")
        table, ok = release_table.render(args.wheel, release=args.release, recipe_only=args.recipe_only)
        return (EXIT_OK if ok else EXIT_CHECK_FAILED), table
    opts = Options(
        platform=args.platform,
        release=args.release,
        gates=not args.no_elf_gates,
        host=HostOptions(
            sdk_version=args.sdk_version,
            require_sdk=args.require_sdk,
            strict_tested=args.strict_tested,
            check_installed=args.check_installed,
            check_build_env=args.check_build_env,
        ),
    )

    probe = HostProbe(args.python)

    def host_for() -> HostEnv:
        host = probe.result()
        if args.python is None and host.torch is None:
            # Preflight installed on its own (pipx, a tools venv) describes its own environment by
            # default; without torch there, every check below would fail for that reason alone.
            raise HostProbeError(
                f"torch is not installed in the environment preflight runs in ({host.prefix})",
                "pass --python PATH, the interpreter of the environment that has torch and will import "
                "torch_fl (for example --python /path/to/venv/bin/python)",
            )
        return host

    reports: list[SubjectReport] = (
        [check_installed(host_for, opts)] if args.installed else [check_wheel(w, host_for, opts) for w in args.wheel]
    )
    code = exit_code(reports)
    return code, (to_json(reports) if args.json else to_text(reports, verbose=args.verbose))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    want_json = "--json" in argv
    try:
        code, out = run(argv)
    except PreflightError as exc:
        if debug:
            traceback.print_exc()
        _print_error(exc.one_line(), want_json=want_json)
        return EXIT_UNUSABLE
    except KeyboardInterrupt:
        return 130
    except (MemoryError, RecursionError) as exc:
        if debug:
            traceback.print_exc()
        _print_error(
            f"input: too large or too deeply nested ({type(exc).__name__}) — this is not a plausible "
            "torch_fl wheel",
            want_json=want_json,
        )
        return EXIT_UNUSABLE
    try:
        print(out)
        sys.stdout.flush()
    except BrokenPipeError:  # `torch-fl-preflight ... | head`: the reader left; the verdict stands
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


def _print_error(line: str, *, want_json: bool) -> None:
    print(f"torch-fl-preflight: {line}", file=sys.stderr)
    if want_json:
        print(json.dumps({"version": 1, "ok": False, "error": line}))


if __name__ == "__main__":
    raise SystemExit(main())
