"""results.json: one record per step of the procedure (exit code, time, log tail, reports), and the verdict."""

from __future__ import annotations

import argparse
import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path


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
        ok = args.rc not in (0, -11, 139)  # fails, but cleanly: no segfault
    else:
        ok = True  # "record": informational only
    step["as_expected"] = ok
    doc["steps"].append(step)
    results.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def finish(args: argparse.Namespace) -> int:
    results = Path(args.results)
    doc = json.loads(results.read_text(encoding="utf-8"))
    main = [s for s in doc["steps"] if not str(s["name"]).startswith("machine-nvidia")]
    doc["main_path_passed"] = bool(main) and all(s["as_expected"] for s in main)
    doc["rehearsal"] = args.rehearsal
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    failed = [s["name"] for s in main if not s["as_expected"]]
    print(f"{results}: main path {'passed' if doc['main_path_passed'] else 'FAILED at ' + ', '.join(failed)}"
          f"{' (rehearsal without a GPU)' if args.rehearsal else ''}", file=sys.stderr)
    return 0 if doc["main_path_passed"] else 1
