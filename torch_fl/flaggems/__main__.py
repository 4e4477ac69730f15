"""``python -m torch_fl.flaggems``: the flaggems provider of this process (routing from the environment) as JSON."""

from __future__ import annotations

import argparse
import json
import sys


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m torch_fl.flaggems",
        description="Print, as one JSON document, what the flaggems provider does in this process: whether "
        "flag_gems is installed and its version, the operators routed to it and those it offers but flagos "
        "does not route, with the reason. The routing comes from the environment (FLAGOS_BACKEND_CONFIG, "
        "FLAGOS_USE_FLAGGEMS=1, FLAGOS_OP_<op>=flaggems), as in any program.",
    )


def main(argv: list[str] | None = None) -> int:
    parser().parse_args(argv)
    # Imported after parsing: --help must answer without loading the plugin.
    import torch_fl  # noqa: F401  (installs the routing table, and with it the provider)
    from torch_fl.flaggems import status

    print(json.dumps({"version": 1, **status()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
