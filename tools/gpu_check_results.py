"""results.json of tools/gpu-check.sh (and of tools/gpu-offline-env.sh, which adds its own steps): one
record per step (exit code, time, log tail, JSON report, test counts, whether it did what was
expected), then the verdict.  Standard library only, Python >= 3.8.

    python3 tools/gpu_check_results.py record --results FILE --step NAME --rc N [--seconds S]
        [--expect ok|fail|skip|clean|refuse|record] [--log FILE] [--json-file FILE] [--junit FILE]
        [--note KEY=VALUE] [--last-line TEXT] [--predicted-by PREFLIGHT_JSON]
    python3 tools/gpu_check_results.py finish --results FILE [--no-gpu]

Expectations: ok (exit 0; a test run must pass at least one test), fail (a non-zero exit, but no
crash), skip (exit 0 and every test skipped), clean (any exit but a crash), refuse (exit 2: unusable
here, said in one line), record (informational: never decides the verdict).
Exit codes of `finish`: 0 every step as expected, 1 not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

# A crash: killed by SIGSEGV or SIGABRT, directly or as a shell reports it (128 + signal).
CRASH = (-11, -6, 139, 134)


def junit_counts(path: Path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, "0"))
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def record(args: argparse.Namespace) -> None:
    results = Path(args.results)
    doc = json.loads(results.read_text(encoding="utf-8")) if results.exists() else {"version": 1, "steps": []}
    step: dict[str, object] = {"name": args.step, "rc": args.rc, "seconds": args.seconds, "expect": args.expect}
    if args.log:
        log = Path(args.log)
        step["log"] = log.name
        if log.exists():
            step["log_tail"] = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-args.tail:]
    if args.json_file:
        try:
            step["report"] = json.loads(Path(args.json_file).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            step["report_error"] = str(e)
    if args.junit:
        try:
            step["tests"] = junit_counts(Path(args.junit))
        except (OSError, ET.ParseError) as e:
            step["tests_error"] = str(e)
    if args.predicted_by:
        # Did the failure name what preflight said was missing (a symbol or a library)?
        try:
            report = json.loads(Path(args.predicted_by).read_text(encoding="utf-8"))
            findings = report["subjects"][0]["findings"]
        except (OSError, ValueError, KeyError, IndexError) as e:
            step["predicted_error"] = str(e)
        else:
            names = {d.split(": ", 1)[1].split("@")[0].replace(" not found", "")
                     for f in findings if f["id"] in ("elf.symbols", "elf.needed") and f["status"] == "fail"
                     for d in f.get("details") or [] if ": " in d}
            text = Path(args.log).read_text(encoding="utf-8", errors="replace") if args.log else ""
            named = sorted(n for n in names if n and n in text)
            step["preflight_predicted"] = {"named_in_failure": named, "matches": bool(named)}
    for item in args.note or []:
        key, _, value = item.partition("=")
        step[key] = value
    if args.expect == "ok":
        ok = args.rc == 0
        if args.last_line is not None:
            lines = step.get("log_tail") or [""]
            ok = ok and lines[-1].strip() == args.last_line  # type: ignore[index]
        tests = step.get("tests")
        if isinstance(tests, dict) and tests.get("passed", 0) == 0:
            ok = False  # a suite that only skipped did not pass
    elif args.expect == "skip":
        tests = step.get("tests")
        ok = args.rc == 0 and isinstance(tests, dict) and tests["skipped"] == tests["tests"] > 0
    elif args.expect == "fail":
        ok = args.rc not in (0, *CRASH)
    elif args.expect == "clean":
        ok = args.rc not in CRASH
    elif args.expect == "refuse":
        ok = args.rc == 2
    else:
        ok = True  # "record": informational only
    step["as_expected"] = ok
    doc["steps"].append(step)
    results.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def finish(args: argparse.Namespace) -> int:
    results = Path(args.results)
    doc = json.loads(results.read_text(encoding="utf-8"))
    decisive = [s for s in doc["steps"] if s["expect"] != "record"]
    doc["passed"] = bool(doc["steps"]) and all(s["as_expected"] for s in decisive)
    doc["no_gpu"] = args.no_gpu
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    failed = [s["name"] for s in decisive if not s["as_expected"]]
    print(f"{results}: {'passed' if doc['passed'] else 'FAILED at ' + ', '.join(failed) if failed else 'no step ran'}"
          f"{' (without a GPU: the steps behaved as they must there)' if args.no_gpu and doc['passed'] else ''}",
          file=sys.stderr)
    return 0 if doc["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/gpu_check_results.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("record")
    s.add_argument("--results", required=True)
    s.add_argument("--step", required=True)
    s.add_argument("--rc", type=int, required=True)
    s.add_argument("--seconds", type=float, default=0.0)
    s.add_argument("--expect", choices=["ok", "fail", "skip", "clean", "refuse", "record"], default="ok")
    s.add_argument("--log")
    s.add_argument("--tail", type=int, default=15)
    s.add_argument("--json-file")
    s.add_argument("--junit")
    s.add_argument("--note", action="append", help="KEY=VALUE added to the step")
    s.add_argument("--last-line", help="with --expect ok: the output's last line must be this")
    s.add_argument("--predicted-by", help="a preflight JSON report: note whether the log names what it found missing")
    s = sub.add_parser("finish")
    s.add_argument("--results", required=True)
    s.add_argument("--no-gpu", action="store_true", help="the run was on a machine without a GPU")
    args = p.parse_args(argv)
    if args.command == "record":
        record(args)
        return 0
    return finish(args)


if __name__ == "__main__":
    sys.exit(main())
