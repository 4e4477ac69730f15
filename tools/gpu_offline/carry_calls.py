"""The transfer calls that carry the pieces to the target one at a time, then run the procedure there."""

from __future__ import annotations

import os
from pathlib import Path

from failures import UsageError
from pieces import MANIFEST, load_manifest

# On the target, outside the working tree that each call replaces.
STAGE = "/tmp/flagos-pieces"


def carry_calls(pieces_dir: Path, repo: Path, out_arg: str) -> list[dict[str, object]]:
    """The calls, for a runner that copies the repository plus named ignored paths to the air-gapped
    machine (at most 64 MiB a call) and runs one command there, that carry the pieces one by one and
    then run the procedure: one ``{carry, command, timeout_s}`` object per call.

    The pieces must lie inside the repository in an ignored folder (only such paths can be carried);
    every call prints how many pieces the machine holds, so a fresh machine (its /tmp empty) shows at
    once: carry from the first piece again.
    """
    manifest = load_manifest(pieces_dir)
    # Not resolved: a symbolic link inside the repository to pieces kept elsewhere is fine, since the
    # runner carries a path through one link.
    rel = os.path.relpath(os.path.abspath(pieces_dir), os.path.abspath(repo))
    if rel.startswith(".."):
        raise UsageError(f"the pieces ({pieces_dir}) are outside the repository ({repo}) — pack with --out under"
                         " build/ (ignored) or link an ignored folder there to them: only paths inside the"
                         " repository can be carried")
    count = f"ls {STAGE} | grep -c part-"
    calls: list[dict[str, object]] = []
    pieces = [str(p["name"]) for p in manifest["pieces"]]  # type: ignore[attr-defined]
    for name in pieces[:-1]:
        calls.append({"carry": [f"{rel}/{name}"], "timeout_s": 120,
                      "command": f"mkdir -p {STAGE} && cp {rel}/{name} {STAGE}/ && {count}"})
    last = pieces[-1]
    # The machine's own python3 holds its CUDA torch: its nvidia packages are the second environment's,
    # and it is the reference interpreter of the GPU check (native CUDA results to compare with).
    nv = "$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))')"
    # Few files come back from $OUT: results.json (every step, with its log's tail) and one archive of
    # all the logs and JSON reports.  `timeout 560` leaves the copy its time inside the call's 600 s; a run
    # cut short can be resumed without reassembly: --payload /tmp/torch-fl-gpu-offline/payload.
    calls.append({"carry": [f"{rel}/{last}", f"{rel}/{MANIFEST}"], "timeout_s": 600,
                  "command": f"mkdir -p {STAGE} && cp {rel}/{last} {rel}/{MANIFEST} {STAGE}/ && {count}; "
                             f"timeout 560 tools/gpu-offline-env.sh --pieces {STAGE} --out {out_arg} --machine-nvidia {nv} "
                             f"--reference-python \"$(command -v python3)\"; rc=$?; "
                             f"cp {out_arg}/results.json $OUT/; tar -czf $OUT/offline-out.tar.gz -C {out_arg} .; "
                             "exit $rc"})
    return calls
