"""The transfer calls that carry the pieces to the target one at a time, then run the procedure there."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from failures import UsageError
from pieces import MANIFEST, load_manifest

# On the target, outside the working tree that each call replaces.
STAGE = "/tmp/flagos-pieces"
# What one call may copy: the working tree and the paths it carries together.
CALL_LIMIT = 64 << 20
# Kept free beside the largest piece, for the manifest and for the working tree's growth between a pack
# and the transfers.
MARGIN = 1 << 20


def working_tree_bytes(repo: Path) -> int:
    """The bytes every call copies besides what it carries: the files git tracks, and the untracked ones it
    does not ignore (the runner's rule)."""
    try:
        listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise UsageError(f"cannot list the working tree of {repo} with git ({e}) — the calls copy a git checkout:"
                         " give --repo the checkout that holds the pieces") from None
    total = 0
    for name in filter(None, listed.split(b"\0")):
        path = repo / os.fsdecode(name)
        if path.is_file() and not path.is_symlink():  # a deleted file is still listed until committed
            total += path.stat().st_size
    return total


def largest_piece_mib(repo: Path, tree: int | None = None) -> int:
    """The largest piece size, in whole MiB, whose call fits beside this working tree (of `tree` bytes, when
    already counted)."""
    room = CALL_LIMIT - MARGIN - (working_tree_bytes(repo) if tree is None else tree)
    if room < 1 << 20:
        raise UsageError(f"the working tree of {repo} leaves less than 1 MiB of a call's 64 MiB for a piece —"
                         " move large untracked files out of the checkout or ignore them")
    return room >> 20


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
    # The last call carries the manifest besides its piece; every call copies the working tree too.
    largest = max(int(p["size"]) for p in manifest["pieces"]) + (pieces_dir / MANIFEST).stat().st_size  # type: ignore[attr-defined]
    tree = working_tree_bytes(repo)
    if tree + largest > CALL_LIMIT:
        raise UsageError(f"a call would copy {(tree + largest) / (1 << 20):.1f} MiB (the working tree's"
                         f" {tree / (1 << 20):.1f} MiB and a piece's {largest / (1 << 20):.1f} MiB), over the 64 MiB"
                         f" one call carries — split the payload again with --piece-mib {largest_piece_mib(repo, tree)}")
    count = f"ls {STAGE} | grep -c part-"
    calls: list[dict[str, object]] = []
    pieces = [str(p["name"]) for p in manifest["pieces"]]  # type: ignore[attr-defined]
    for name in pieces[:-1]:
        calls.append({"carry": [f"{rel}/{name}"], "timeout_s": 120,
                      "command": f"mkdir -p {STAGE} && cp {rel}/{name} {STAGE}/ && {count}"})
    last = pieces[-1]
    # The machine's own python3 holds its CUDA torch: its nvidia packages are the second environment's,
    # and it is the reference interpreter of the GPU check (native CUDA results to compare with), unless the
    # payload carries a CUDA build of its own torch release for that (gpu-offline-pack.sh --native-torch).
    nv = "$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))')"
    native_carried = any(str(f["path"]).startswith("native/") for f in manifest["files"])  # type: ignore[attr-defined]
    reference = "" if native_carried else ' --reference-python "$(command -v python3)"'

    # Few files come back from $OUT: results.json (every step, with its log's tail) and one archive of
    # all the logs and JSON reports.  `timeout 560` leaves the copy its time inside the call's 600 s; a run
    # cut short can be resumed without reassembly: --payload /tmp/torch-fl-gpu-offline/payload.
    calls.append({"carry": [f"{rel}/{last}", f"{rel}/{MANIFEST}"], "timeout_s": 600,
                  "command": f"mkdir -p {STAGE} && cp {rel}/{last} {rel}/{MANIFEST} {STAGE}/ && {count}; "
                             f"timeout 560 tools/gpu-offline-env.sh --pieces {STAGE} --out {out_arg} --machine-nvidia {nv}"
                             f"{reference}; rc=$?; "
                             f"cp {out_arg}/results.json $OUT/; tar -czf $OUT/offline-out.tar.gz -C {out_arg} .; "
                             "exit $rc"})
    return calls
