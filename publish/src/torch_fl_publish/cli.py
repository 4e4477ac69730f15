"""``torch-fl-publish``: parse the flags, run, print, and turn every problem into one line and an exit code."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from torch_fl_publish import __version__, credentials, report
from torch_fl_publish.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, PublishError
from torch_fl_publish.publish import Settings, run
from torch_fl_publish.upload import RetryPolicy


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torch-fl-publish",
        description="Upload torch_fl wheels to an index lane exactly once, verified by sha256. "
        "Credentials: TORCH_FL_PUBLISH_USERNAME/TORCH_FL_PUBLISH_PASSWORD, TWINE_USERNAME/"
        "TWINE_PASSWORD, or the keyring (service = repository URL).",
    )
    p.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL", help="wheel files to publish")
    p.add_argument("--lane", required=True, help="index lane (a recipe's index_lane); replaces {lane} in the URLs")
    p.add_argument("--repository-url", required=True, help="upload endpoint (legacy upload protocol)")
    p.add_argument("--simple-url", help="the lane's simple index root (default: <repository-url>/simple/)")
    p.add_argument("--tag", help="release mode: refuse wheels whose version is not the tag's or that fail preflight")
    p.add_argument(
        "--bundlers",
        type=Path,
        help="platform recipes; with --tag, each wheel's platform must publish to --lane (default: ./bundlers)",
    )
    p.add_argument("--concurrency", type=int, default=4, help="uploads at a time (default 4)")
    p.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for one upload attempt of one file (default 300)"
    )
    p.add_argument("--retries", type=int, default=4, help="retries per file after the first attempt (default 4)")
    p.add_argument(
        "--backoff", type=float, default=1.0, help="first retry delay in seconds, doubled each time (default 1)"
    )
    p.add_argument("--dry-run", action="store_true", help="read the index and gate, upload nothing")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def _bundlers(given: Path | None) -> Path | None:
    if given is not None:
        if not given.is_dir():
            raise PublishError("--bundlers is not a directory", str(given), "pass the checkout's bundlers/ folder")
        return given
    default = Path("bundlers")
    return default if default.is_dir() else None


def _retry_policy(args: argparse.Namespace) -> RetryPolicy:
    if args.retries < 0 or args.timeout <= 0 or args.backoff < 0:
        raise PublishError(
            "--retries, --timeout and --backoff must be positive",
            f"{args.retries}, {args.timeout}, {args.backoff}",
            "pass e.g. --retries 4 --timeout 300",
        )
    return RetryPolicy(attempts=args.retries + 1, timeout=args.timeout, backoff=args.backoff)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    secrets: credentials.Credentials | None = None

    def say(line: str) -> None:
        sys.stderr.write(credentials.redact(line, secrets) + "\n")
        sys.stderr.flush()

    def log(line: str) -> None:
        if not args.quiet:
            say(line)

    def fail(line: str, code: int) -> int:
        """One line on stderr (and, with --json, one error document on stdout); the traceback with --debug."""
        if args.debug:
            say(traceback.format_exc().rstrip())
        say(line)
        if args.json:
            report.write_error_json(credentials.redact(line, secrets), code, sys.stdout)
        return code

    try:
        policy = _retry_policy(args)
        repository_url, from_url = credentials.split_url_credentials(args.repository_url)
        secrets = from_url or credentials.resolve(repository_url.replace("{lane}", args.lane), os.environ)
        if secrets is not None:
            log(f"credentials: user {secrets.username} from {secrets.source}")
        else:
            log("credentials: none found; uploading anonymously")
        settings = Settings(
            lane=args.lane,
            repository_url=repository_url,
            simple_url=args.simple_url,
            wheels=tuple(args.wheels),
            tag=args.tag,
            policy=policy,
            concurrency=args.concurrency,
            dry_run=args.dry_run,
            bundlers=_bundlers(args.bundlers),
        )
        result = run(settings, secrets, log)
    except PublishError as exc:
        return fail(exc.one_line(), exc.exit_code)
    except KeyboardInterrupt:
        return fail("interrupted — the index may hold some of the wheels; run again to finish (it is idempotent)", 130)
    except Exception as exc:  # noqa: BLE001 - anything else is a bug: one line, the traceback with --debug
        return fail(f"internal error ({type(exc).__name__}: {exc}) — rerun with --debug and report it", EXIT_BAD_INPUT)
    if args.json:
        report.write_json(result, sys.stdout)
    else:
        report.write_table(result, sys.stdout)
    for outcome in result.not_published:
        say(f"not published: {outcome.wheel.filename} ({outcome.status.value}: {outcome.detail})")
    return EXIT_OK if result.ok else EXIT_CHECK_FAILED
