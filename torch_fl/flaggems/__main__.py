"""``python -m torch_fl.flaggems``: the flaggems provider of this process (routing from the environment) as JSON;
``calibrate`` and ``merge`` write verified route tables (``torch_fl.flaggems.calibration``)."""

from __future__ import annotations

import argparse
import json
import sys


def parser() -> argparse.ArgumentParser:
    from torch_fl.flaggems.calibration.command import add_commands

    root = argparse.ArgumentParser(
        prog="python -m torch_fl.flaggems",
        description="Without a command: print, as one JSON document, what the flaggems provider does in this "
        "process: whether flag_gems is installed and its version, the operators routed to it and those it offers "
        "but flagos does not route, with the reason, and for each operator why it goes where it goes. The routing "
        "comes from the environment (FLAGOS_BACKEND_CONFIG, FLAGOS_USE_FLAGGEMS=1, FLAGOS_OP_<op>=flaggems), as in "
        "any program. `calibrate` measures FlagGems against the kernel device and writes a verified route table; "
        "`merge` joins the state files of calibration shards.",
    )
    add_commands(root.add_subparsers(dest="command", metavar="COMMAND"))
    return root


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.command in ("calibrate", "merge"):
        from torch_fl.flaggems.calibration.command import CalibrationError, run_calibrate, run_merge

        try:
            return (run_calibrate if args.command == "calibrate" else run_merge)(args, argv)
        except CalibrationError as e:
            if args.debug:
                raise
            print(f"python -m torch_fl.flaggems {args.command}: {e}", file=sys.stderr)
            return 2
    # Imported after parsing: --help must answer without loading the plugin.
    import torch_fl  # noqa: F401  (installs the routing table, and with it the provider)
    from torch_fl.flaggems import status

    print(json.dumps({"version": 1, **status()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
