"""The OpInfo pass table: every case of opinfo_runner on flagos against a reference, per dtype, as JSON.

    python tests/opinfo/opinfo_table.py --reference cpu  --out opinfo-host.json
    python tests/opinfo/opinfo_table.py --reference cuda --out opinfo-cuda.json [--reference-python PY]

``--reference cpu`` (host platform): a case passes when flagos equals the CPU within PyTorch's
default tolerances.  ``--reference cuda`` (cuda platform): the reference interpreter (tests/gpu/reference.py;
``--reference-python`` or ``FLAGOS_TEST_REFERENCE_PYTHON``) computes native CUDA and the CPU on the very
samples flagos gets, and the table counts, per dtype, the cases where native CUDA equals the CPU
(PyTorch's cross-device tolerance, 1e-3), where flagos equals the CPU among those, and where flagos equals
native CUDA within the default tolerances.  Run it from outside the source tree's parent (any cwd works:
it finds its modules by path).  Exit 0 when flagos passes every case its reference passes, else 1.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "gpu")]

import torch  # noqa: E402
from expected_failures import EXPECTED_ERRORS, EXPECTED_MISMATCHES  # noqa: E402
from opinfo_runner import (  # noqa: E402
    CROSS_DEVICE,
    DTYPE_NAMES,
    CaseResult,
    case_ids,
    compare,
    native_results,
    prepare_case,
    run_case,
    run_prepared,
)

import torch_fl  # noqa: E402,F401

def _passes(actual: CaseResult, expected: CaseResult, **tol: float) -> str | None:
    try:
        compare(actual, expected, **tol)
    except AssertionError as e:
        return str(e).splitlines()[0][:300]
    return None


def against_cpu(ids: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for cid in ids:
        case = prepare_case(cid)
        failure = _passes(run_prepared(case, "flagos"), run_prepared(case, "cpu"))
        out[cid] = {"flagos_vs_cpu": failure is None, "failure": failure}
    return out


def against_cuda(ids: list[str], python: str | None) -> dict[str, dict[str, Any]]:
    payload, native = native_results(ids, python)
    out: dict[str, dict[str, Any]] = {}
    for cid in ids:
        if cid not in payload or cid not in native:
            out[cid] = {"skipped": "samples do not travel" if cid not in payload else "unknown to the reference"}
            continue
        cuda = CaseResult.from_plain(native[cid]["cuda"])
        cpu = CaseResult.from_plain(native[cid]["cpu"])
        flagos = run_case(cid, "flagos", payload[cid])
        native_failure = _passes(cuda, cpu, **CROSS_DEVICE)
        flagos_failure = _passes(flagos, cpu, **CROSS_DEVICE)
        out[cid] = {
            "native_vs_cpu": native_failure is None,
            "flagos_vs_cpu": flagos_failure is None,
            "flagos_vs_native": _passes(flagos, cuda) is None,
            "failure": flagos_failure,
        }
    return out


def table(results: dict[str, dict[str, Any]], reference: str) -> dict[str, dict[str, int]]:
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for cid, r in results.items():
        row = rows[cid.rpartition("-")[2]]
        if "skipped" in r:
            row["skipped"] += 1
            continue
        row["run"] += 1
        if reference == "cpu":
            row["passed"] += r["flagos_vs_cpu"]
        else:
            row["native_vs_cpu"] += r["native_vs_cpu"]
            row["flagos_vs_cpu_where_native_passes"] += r["native_vs_cpu"] and r["flagos_vs_cpu"]
            row["flagos_vs_native"] += r["flagos_vs_native"]
    return {name: dict(rows[name]) for name in DTYPE_NAMES.values() if name in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--reference-python", help="interpreter with a CUDA build of torch (reference cuda)")
    parser.add_argument("--ops", help="comma-separated op ids to run (default: all)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    ids = case_ids()
    if args.ops:
        wanted = set(args.ops.split(","))
        ids = [c for c in ids if c.rpartition("-")[0] in wanted]
    start = time.perf_counter()
    results = against_cpu(ids) if args.reference == "cpu" else against_cuda(ids, args.reference_python)
    summary = table(results, args.reference)
    # The documented exceptions (expected_failures.py) are not flagos failures.
    known = lambda cid: cid in EXPECTED_MISMATCHES or cid.rpartition("-")[0] in EXPECTED_ERRORS  # noqa: E731
    unexplained = sorted(
        cid for cid, r in results.items()
        if "skipped" not in r and not r["flagos_vs_cpu"] and r.get("native_vs_cpu", True) and not known(cid)
    )
    document = {
        "version": 1,
        "reference": args.reference,
        "torch": torch.__version__,
        "platform": torch_fl.build_config.PLATFORM,
        "seconds": round(time.perf_counter() - start, 1),
        "table": summary,
        "unexplained_failures": {cid: results[cid]["failure"] for cid in unexplained},
        "cases": results,
    }
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(document, indent=1))
    os.replace(tmp, args.out)
    for dtype, row in summary.items():
        print(dtype, row, file=sys.stderr)
    print(f"{len(unexplained)} unexplained failures; {document['seconds']} s", file=sys.stderr)
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
