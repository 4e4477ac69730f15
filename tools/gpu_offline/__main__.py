"""The pieces of the offline GPU procedure (tools/gpu-offline-pack.sh, tools/gpu-offline-env.sh) that are
easier in Python.  See tools/README.md.

Standard library only, Python >= 3.8: it runs under the packing machine's Python and under the GPU
machine's own python3 when reassembling, before the carried Python exists there.  Run the folder:

    python3 tools/gpu_offline pack-python  --python PY --out TARBALL
    python3 tools/gpu_offline split        --payload DIR --out PIECES_DIR [--piece-mib N]
    python3 tools/gpu_offline reassemble   --pieces PIECES_DIR --dest DIR
    python3 tools/gpu_offline omit-installed --wheelhouse WH --freeze FREEZE --records DIR --omitted DIR
    python3 tools/gpu_offline rebuild      --records DIR --site SITE_PACKAGES [--prefix PREFIX] --out WH
    python3 tools/gpu_offline unpack       --tarball PYTHON_TAR_XZ --dest DIR
    python3 tools/gpu_offline carry-calls  --pieces PIECES_DIR   (the transfer calls, one JSON object a line)
    python3 tools/gpu_offline driver-stub  --preflight-json REPORT --out DIR

One module per job: pieces.py (split, reassemble), installed_wheels.py (omit-installed, rebuild),
python_copy.py (pack-python, unpack), carry_calls.py, driver_stub.py.  Steps are recorded in
results.json by tools/gpu_check_results.py, the GPU check's own recorder.
Exit codes: 0 ok, 1 a check failed, 2 unusable input (one line: the problem, then the fix).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from carry_calls import carry_calls, largest_piece_mib
from driver_stub import driver_stub
from failures import CheckFailed, UsageError
from installed_wheels import omit_installed, rebuild
from pieces import reassemble, split
from python_copy import pack_python, unpack


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/gpu_offline", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("pack-python")
    s.add_argument("--python", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--xz-preset", type=int, default=6, choices=range(10))
    s = sub.add_parser("omit-installed")
    s.add_argument("--wheelhouse", required=True)
    s.add_argument("--freeze", required=True, help="pip list --format=freeze of the GPU machine")
    s.add_argument("--records", required=True)
    s.add_argument("--omitted", required=True)
    s = sub.add_parser("rebuild")
    s.add_argument("--records", required=True)
    s.add_argument("--site", required=True, help="the machine's site-packages")
    s.add_argument("--prefix", help="its installation prefix (data files); default: from --site's path")
    s.add_argument("--out", required=True)
    s = sub.add_parser("unpack")
    s.add_argument("--tarball", required=True)
    s.add_argument("--dest", required=True)
    s = sub.add_parser("split")
    s.add_argument("--payload", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--piece-mib", type=float, default=None,
                   help="piece size (default: the largest whose transfer call fits beside --repo's working tree)")
    s.add_argument("--repo", default=str(Path(__file__).resolve().parents[2]))
    s = sub.add_parser("reassemble")
    s.add_argument("--pieces", required=True)
    s.add_argument("--dest", required=True)
    s = sub.add_parser("carry-calls", help="print the transfer calls, one JSON object a line")
    s.add_argument("--pieces", required=True)
    s.add_argument("--repo", default=str(Path(__file__).resolve().parents[2]))
    s.add_argument("--out-arg", default="/tmp/flagos-offline-out", help="the --out of the last call")
    s = sub.add_parser("driver-stub")
    s.add_argument("--preflight-json", required=True)
    s.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        if args.command == "pack-python":
            print(json.dumps(pack_python(args.python, Path(args.out).resolve(), args.xz_preset), indent=2))
        elif args.command == "omit-installed":
            for name in omit_installed(Path(args.wheelhouse), Path(args.freeze), Path(args.records), Path(args.omitted)):
                print(name)
        elif args.command == "rebuild":
            for name in rebuild(Path(args.records), Path(args.site), Path(args.out),
                                 Path(args.prefix) if args.prefix else None):
                print(name)
        elif args.command == "unpack":
            unpack(Path(args.tarball), Path(args.dest))
        elif args.command == "split":
            piece_mib = args.piece_mib if args.piece_mib is not None else largest_piece_mib(Path(args.repo))
            m = split(Path(args.payload), Path(args.out), int(piece_mib * (1 << 20)))
            print(f"{len(m['pieces'])} pieces, {m['total_size']} bytes, in {args.out}", file=sys.stderr)  # type: ignore[arg-type]
        elif args.command == "reassemble":
            m = reassemble(Path(args.pieces), Path(args.dest))
            print(f"{len(m['files'])} files, {m['total_size']} bytes, verified, in {args.dest}", file=sys.stderr)  # type: ignore[arg-type]
        elif args.command == "driver-stub":
            print(driver_stub(Path(args.preflight_json), Path(args.out)))
        else:
            for call in carry_calls(Path(args.pieces), Path(args.repo), args.out_arg):
                print(json.dumps(call))
    except UsageError as e:
        print(f"tools/gpu_offline: {e}", file=sys.stderr)
        return 2
    except CheckFailed as e:
        print(f"tools/gpu_offline: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader stopped early (`carry-calls | head`): what it read is complete lines; say nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
